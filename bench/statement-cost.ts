// What one statement costs its PostgreSQL backend, alone: the coalesced result-with-claim_next
// (COALESCED_COMPLETE_AND_CLAIM, what a chained single-task worker's report runs) executed ROUNDS
// times in one session, each completing the task the last one leased and leasing the next, with the
// backend's own CPU (utime + stime from /proc/PID/stat) read before and after. No coordinator, no
// other session, so the figure is the statement's: its plan's start-up, its reads and writes, the
// trigger and the events, without the commit's fsync (synchronous_commit off here). Variants run in
// turn, alternating, so drift on a shared machine falls on each alike. Not a test:
//
//   node --import tsx bench/statement-cost.ts [--rounds 2000] [--repeats 5] [--items 1] [--keyed]
//
// --keyed: the workload is bench:horizon's keyed shape (max_leased_per_key 4, 40-task jobs of 50
// concurrency keys in turn, each key's tier of 3 as its priority), so the claim is the flow claim's
// (leasehold_flow_claim_hinted, keys of their own). FLOW_FUNCTION=name: a variant `flow_<name>` runs
// the statement with that function in place of leasehold_flow_claim_hinted, created from the file
// FLOW_FUNCTION_SQL (a changed copy of its migration file, renamed): the variant compares it with the
// current one.
//
// VARIANTS=a,b: which of the variants below (all by default). A variant is a statement text and its
// hints: add one (the text with a part changed) to compare it with the current one, round by round.
// --explain prints each variant's plan as its kept generic plan runs it; PERF_OUT=file records the
// backend with perf (dwarf call graphs) over one more round of the first. --statements prints, per
// variant, what each statement it ran took, those inside functions too (pg_stat_statements with
// track = all: a DATABASE_URL server started with it loaded; one session, so time is its CPU).

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import pg from "pg";
import { createPool, PostgresQueue } from "../src/store/postgres/store.js";
import { SESSION_SETTINGS } from "../src/store/postgres/sql/db.js";
import { parseCoalescing } from "../src/config/index.js";
import { COALESCED_COMPLETE_AND_CLAIM, COALESCED_COMPLETE_AND_CLAIM_LEAN } from "../src/store/postgres/coalescing/coalesced-statements.js";
import { fmt, startDatabase } from "./harness.js";
import { fillLeasehold } from "./peers-loads.js";

const arg = (name: string, fallback: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const ROUNDS = Number(arg("rounds", "2000"));
const KEYED = process.argv.includes("--keyed");
const REPEATS = Number(arg("repeats", "5"));
// --items K: each statement carries K results of K workers, each with claim_next of one task (the
// coordinator's coalesced statement carried ~8 under bench:peers' chained single load).
const ITEMS = Number(arg("items", "1"));
const SHA = "0".repeat(64);
const TICK_MS = 10; // USER_HZ 100 on Linux

/** A statement's text as PostgreSQL runs it, and the hints it is sent (jsonb text). */
interface Variant {
  text: string;
  hints: string;
}
const VARIANTS: Record<string, Variant> = {
  // As the coordinator sends it once the lease reaper has found no expired lease (claim-hints.ts).
  current: { text: COALESCED_COMPLETE_AND_CLAIM.text, hints: JSON.stringify({ "~expired": false }) },
  // The same without the arms of expired leases and of flow control, as sent while neither can take anything.
  lean: { text: COALESCED_COMPLETE_AND_CLAIM_LEAN.text, hints: JSON.stringify({ "~expired": false }) },
};
if (process.env.FLOW_FUNCTION)
  VARIANTS[`flow_${process.env.FLOW_FUNCTION}`] = {
    text: COALESCED_COMPLETE_AND_CLAIM.text.replaceAll("leasehold_flow_claim_hinted(", `${process.env.FLOW_FUNCTION}(`),
    hints: VARIANTS.current.hints,
  };
const chosen = (process.env.VARIANTS ?? Object.keys(VARIANTS).join(",")).split(",");

/** bench:horizon's keyed shape: 40-task jobs of 50 keys in turn, key k's priority k mod 3, 4 leases a key at most. */
async function fillKeyed(count: number): Promise<void> {
  await store.putWorkload({ name: "sc", leaseSeconds: 300, maxAttempts: 3, maxLeasedPerKey: 4 });
  for (let j = 0; j * 40 < count; j++)
    await store.createJob({
      workload: "sc",
      concurrencyKey: `k${j % 50}`,
      priority: (j % 50) % 3,
      tasks: Array.from({ length: 40 }, (_, i) => ({ chunkIndex: i, inputUri: `s3://sc/${i}`, inputSha256: SHA })),
    });
}

/** The statements of the last round (--statements): ms a statement of the variant's, calls a statement, text. */
async function printStatements(c: pg.Client, name: string): Promise<void> {
  const { rows } = await c.query<{ ms: number; calls: number; blks: number; q: string }>(
    `SELECT total_exec_time / $1 AS ms, calls::float8 / $1 AS calls, (shared_blks_hit + shared_blks_read)::float8 / calls AS blks,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS q
     FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls >= $1
     ORDER BY total_exec_time DESC LIMIT 14`,
    [ROUNDS],
  );
  console.log(`--- ${name}: per statement of the variant (ms, calls, buffers a call, text)`);
  for (const r of rows) console.log(`  ${fmt(r.ms, 3).padStart(7)} ${fmt(r.calls, 1).padStart(5)} ${fmt(r.blks, 0).padStart(5)}  ${r.q}`);
}

function backendTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(f[11]) + Number(f[12]);
}

const db = await startDatabase();
const pool = createPool({ connectionString: db.url, max: 2, statementTimeoutMs: 600_000, connectTimeoutMs: 10_000 });
const store = new PostgresQueue(pool, {
  coalescing: parseCoalescing({}),
  defaultLeaseSeconds: 300,
  defaultMaxAttempts: 3,
  maxTasksPerJob: 10_000,
});
try {
  const perVariant = (ROUNDS * (REPEATS + 1) + 200) * ITEMS;
  if (KEYED) await fillKeyed(perVariant * chosen.length + 1000);
  else await fillLeasehold(store, "sc", perVariant * chosen.length + 1000);
  const c = new pg.Client({ connectionString: db.url });
  c.on("error", () => {});
  await c.connect();
  await c.query("SET synchronous_commit = off");
  if (process.env.FLOW_FUNCTION_SQL) await c.query(readFileSync(process.env.FLOW_FUNCTION_SQL, "utf8"));
  // The coordinator's own session settings (generic plans kept, no JIT).
  for (const [k, v] of Object.entries(SESSION_SETTINGS)) await c.query(`SET ${k} = ${c.escapeLiteral(v)}`);
  await c.query("VACUUM ANALYZE tasks, jobs");
  const pid = (await c.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0].pid;
  type Held = { id: string; attempt: number };
  const held = new Map<string, Held[]>();
  // The statement's @items: each held task's result, with claim_next of one task for the same worker.
  const resultItems = (name: string, hs: Held[]) =>
    JSON.stringify(
      hs.map((h, i) => ({
        caller: i,
        task_id: h.id,
        worker_id: `w-${name}-${i}`,
        attempt: h.attempt,
        result_uri: "s3://r",
        result_sha256: SHA,
        metrics: null,
        usage: null,
        claim_worker: `w-${name}-${i}`,
        claim_n: 1,
        claim_always: false,
      })),
    );
  // Each variant its own workers and task chains, its statement prepared under its own name.
  const step = async (name: string): Promise<void> => {
    const v = VARIANTS[name];
    let hs = held.get(name);
    if (!hs) {
      hs = [];
      for (let i = 0; i < ITEMS; i++) {
        const r = await c.query<{ id: string; attempt: number }>(
          `UPDATE tasks SET status = 'leased', attempt = attempt + 1, lease_owner = $1, lease_expires_at = now() + interval '300 s',
             lease_seq = txid_current(), started_at = now()
           WHERE id = (SELECT id FROM tasks WHERE status = 'pending' AND workload = 'sc'
             ORDER BY priority DESC, fair_rank, created_at, chunk_index LIMIT 1 FOR UPDATE SKIP LOCKED)
           RETURNING id, attempt`,
          [`w-${name}-${i}`],
        );
        hs.push(r.rows[0]);
      }
    }
    const r = await c.query<{ part: number; id: string; attempt: number; caller: number }>({
      name: `sc_${name}`,
      text: v.text,
      values: [resultItems(name, hs), hs.map((h) => h.id), ["sc"], null, "{}", v.hints],
    });
    const next = r.rows.filter((x) => x.part === 1).sort((a, b) => a.caller - b.caller);
    if (next.length !== ITEMS)
      throw new Error(`${name}: ${next.length} of ${ITEMS} claimed (rows: ${JSON.stringify(r.rows.map((x) => x.part))})`);
    held.set(
      name,
      next.map((x) => ({ id: x.id, attempt: x.attempt })),
    );
  };
  for (const name of chosen) for (let i = 0; i < 100; i++) await step(name); // warm: plans cached
  if (process.argv.includes("--explain")) {
    // One execution's plan, as the kept generic plan runs it (EXPLAIN EXECUTE of a prepared statement).
    for (const name of chosen) {
      const hs = held.get(name)!;
      const items = resultItems(name, hs);
      await c.query(`PREPARE x_${name} AS ${VARIANTS[name].text}`);
      const r = await c.query<{ "QUERY PLAN": string }>(
        `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE x_${name}(${c.escapeLiteral(items)}, ARRAY[${hs.map((h) => c.escapeLiteral(h.id)).join(", ")}]::uuid[],
           ARRAY['sc'], NULL, '{}', ${c.escapeLiteral(VARIANTS[name].hints)})`,
      );
      console.log(`--- ${name}: ${r.rows.length} plan lines`);
      console.log(r.rows.map((x) => x["QUERY PLAN"]).join("\n"));
      held.delete(name);
    }
  }
  const ms: Record<string, number[]> = Object.fromEntries(chosen.map((n) => [n, []]));
  // PERF_OUT=file: a `perf record` of the backend over one more round of the first variant (as root).
  if (process.env.PERF_OUT) {
    const perf = spawn("perf", ["record", "-F", "1000", "--call-graph", "dwarf,16384", "-p", String(pid), "-o", process.env.PERF_OUT], {
      stdio: "ignore",
    });
    await new Promise((r) => setTimeout(r, 500));
    for (let i = 0; i < ROUNDS; i++) await step(chosen[0]);
    perf.kill("SIGINT");
    await new Promise((r) => perf.on("exit", r));
  }
  const statements = process.argv.includes("--statements");
  if (statements) await c.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
  for (let rep = 0; rep < REPEATS; rep++) {
    for (const name of chosen) {
      if (statements && rep === 0) await c.query("SELECT pg_stat_statements_reset()");
      const before = backendTicks(pid);
      for (let i = 0; i < ROUNDS; i++) await step(name);
      ms[name].push(((backendTicks(pid) - before) * TICK_MS) / ROUNDS);
      if (statements && rep === 0) await printStatements(c, name);
    }
  }
  console.log(`backend CPU per statement (ms), ${ROUNDS} statements a round, ${REPEATS} rounds alternating; median [rounds]`);
  for (const name of chosen) {
    const sorted = [...ms[name]].sort((a, b) => a - b);
    console.log(`  ${name.padEnd(16)} ${fmt(sorted[Math.floor(sorted.length / 2)], 3)}  [${ms[name].map((x) => fmt(x, 3)).join(", ")}]`);
  }
  await c.end();
} finally {
  // The store's timers (the reaper, maintenance) would keep the process alive after the report.
  store.stopTimers();
  await pool.end();
  await db.stop();
}
