// REST calls over node:http with keep-alive, for tests that drive many workers against real
// coordinator processes (a fraction of fetch's CPU per call, which matters on two cores).
import http from "node:http";

export interface Answer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
  /** the x-request-id the coordinator answered with (null without an answer) */
  requestId: string | null;
  /** from the call to its answer (or failure) */
  ms: number;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 128 });

/** One REST call; a connection failure is status 0. */
export function call(base: string, method: string, route: string, body?: unknown, timeoutMs = 30_000): Promise<Answer> {
  const t0 = Date.now();
  const data = body === undefined ? undefined : JSON.stringify(body);
  const url = new URL(route, base);
  return new Promise((resolve) => {
    const failed = () => resolve({ status: 0, body: null, requestId: null, ms: Date.now() - t0 });
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        method,
        path: url.pathname + url.search,
        agent,
        timeout: timeoutMs,
        headers: data === undefined ? {} : { "content-type": "application/json", "content-length": Buffer.byteLength(data) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", failed);
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          const requestId = res.headers["x-request-id"];
          resolve({
            status: res.statusCode ?? 0,
            body: text ? JSON.parse(text) : null,
            requestId: typeof requestId === "string" ? requestId : null,
            ms: Date.now() - t0,
          });
        });
      },
    );
    req.on("timeout", () => req.destroy());
    req.on("error", failed);
    req.end(data);
  });
}

export function closeAgent(): void {
  agent.destroy();
}
