// A real Prometheus (Debian's, from the prometheus package) on loopback for the dashboard test:
// scrapes the given targets every second and evaluates the given rule files every second; queried
// through its HTTP API (/api/v1/query), as Grafana would.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { stringify } from "yaml";
import { freePort } from "../../support/global-setup.js";

export interface QueryResult {
  status: string;
  error?: string;
  data?: { resultType: string; result: { metric: Record<string, string>; value?: [number, string] }[] };
}

export interface Prometheus {
  url: string;
  query(expr: string): Promise<QueryResult>;
  get<T>(pathAndQuery: string): Promise<T>;
  log(): string;
  stop(): Promise<void>;
}

export async function startPrometheus(opts: { targets: string[]; ruleFiles: string[] }): Promise<Prometheus> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "leasehold-prometheus-"));
  const config = {
    global: { scrape_interval: "1s", evaluation_interval: "1s", scrape_timeout: "900ms" },
    rule_files: opts.ruleFiles,
    scrape_configs: [{ job_name: "leasehold", static_configs: [{ targets: opts.targets }] }],
  };
  writeFileSync(path.join(dir, "prometheus.yml"), stringify(config));
  const port = await freePort();
  let output = "";
  const child: ChildProcess = spawn(
    "prometheus",
    [
      `--config.file=${path.join(dir, "prometheus.yml")}`,
      `--storage.tsdb.path=${path.join(dir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  child.stdout?.setEncoding("utf8").on("data", (d: string) => (output += d));
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (output += d));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const get = async <T>(p: string): Promise<T> => {
    const res = await fetch(`${url}${p}`);
    return (await res.json()) as T;
  };
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`prometheus exited ${child.exitCode}:\n${output}`);
    const ok = await fetch(`${url}/-/ready`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (i > 300) throw new Error(`prometheus not ready after 30 s:\n${output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    get,
    query: (expr) => get<QueryResult>(`/api/v1/query?query=${encodeURIComponent(expr)}`),
    log: () => output,
    async stop() {
      child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
