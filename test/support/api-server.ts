// A real API server on a kernel-chosen port of 127.0.0.1, for suites that call the coordinator over
// its transports. The one place tests call createApiServer for that: a suite names only what it
// sets differently from these defaults, and everything it gives is passed through as it is.
import { pino } from "pino";
import { createApiServer, type ApiServer, type ApiServerOptions } from "../../src/api/server.js";
import { SWITCHES } from "./switches.js";

export interface ApiServerFixture {
  server: ApiServer;
  port: number;
  /** http://127.0.0.1:<port>, for every transport and REST */
  base: string;
  /** stops the server, dropping connections still open after timeoutMs (default 2 s) */
  close(timeoutMs?: number): Promise<void>;
}

/** queue is required; the rest defaults to a silent, always-ready server with a 64 KiB body cap, 5 s deadline and the project's DIRECT_UNARY switch. */
export type ApiServerFixtureOptions = Pick<ApiServerOptions, "queue"> & Partial<ApiServerOptions>;

export async function apiServerFixture(options: ApiServerFixtureOptions): Promise<ApiServerFixture> {
  const server = createApiServer({
    logger: pino({ level: "silent" }),
    maxBodyBytes: 64 * 1024,
    requestTimeoutMs: 5000,
    readiness: async () => ({ ready: true }),
    ...options,
    // The project's switch (DIRECT_UNARY under the router project), unless the suite names its own.
    directUnary: options.directUnary ?? SWITCHES.directUnary,
  });
  const port = await server.listen(0, "127.0.0.1");
  return { server, port, base: `http://127.0.0.1:${port}`, close: (timeoutMs = 2000) => server.close(timeoutMs) };
}
