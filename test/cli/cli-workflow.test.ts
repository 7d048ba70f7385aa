// `leasehold workflow create|get|list|watch|cancel|retry` and `job create --after`, each as a real
// child process against a real coordinator process: a pipeline from a YAML file, watched to its end
// (one line per node change when stderr is no terminal) while the test works on its tasks over
// REST; a failing node, the watch's exit code and why, and its retry; a cancel; a refused file
// that names the node by its name; a job after another. The file and watch pieces alone:
// cli-workflow-units.test.ts.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";
import { restCall } from "../support/rest.js";
import { runCli } from "../support/cli.js";
import { nodeEntry } from "../support/entry.js";
import { ROOT } from "../support/process.js";

let db: TestDatabase;
let base: string;
let tmp: string;

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-cli-workflow-"));
  db = await createTestDatabase();
  base = await spawnCoordinator({ DATABASE_URL: db.url, PORT: "0" }).listening();
  for (const w of ["cw_chunks", "cw_stitch", "cw_report", "cw_idle"]) {
    expect((await restCall(base, "PUT", `/workloads/${w}`, { max_attempts: 1 })).status).toBe(200);
  }
});

afterAll(async () => {
  await killAll();
  await db?.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const cli = (args: string[], stdin = "") => runCli(["--url", base, ...args], { stdin });

/** `workflow watch ID` as a child process; `started` resolves once it has printed its first block (its snapshot is read). */
function watch(id: string) {
  let ended = false;
  let onStart!: () => void;
  const started = new Promise<void>((r) => (onStart = r));
  const done = runCli(["--url", base, "workflow", "watch", id], {
    onStderr: (all) => all.includes(`workflow ${id}`) && onStart(),
  }).finally(() => {
    ended = true;
    onStart();
  });
  return { started, done, ended: () => ended };
}

function pipelineFile(name: string, chunks = 3): string {
  const file = path.join(tmp, `${name}.yaml`);
  const tasks = Array.from(
    { length: chunks },
    (_, i) => `      - {chunk_index: ${i}, input_uri: s3://in/${name}/${i}, input_sha256: ${sha(`${i}`)}}`,
  );
  writeFileSync(
    file,
    [
      `name: ${name}`,
      "nodes:",
      "  chunks:",
      "    workload: cw_chunks",
      "    tasks:",
      ...tasks,
      "  stitch:",
      "    after: [chunks]",
      "    workload: cw_stitch",
      `    input_uri: s3://out/${name}/`,
      `    input_sha256: ${sha("stitch")}`,
      "  report:",
      "    after: [stitch]",
      "    workload: cw_report",
      `    input_uri: s3://out/${name}/`,
      `    input_sha256: ${sha("report")}`,
      "",
    ].join("\n"),
  );
  return file;
}

interface ClaimedTask {
  id: string;
  attempt: number;
  workload: string;
  chunk_index: number;
}

/** Works on the workloads' tasks over REST until `done` says stop: each completes, unless `fails` says it fails. */
async function work(workloads: string[], done: () => boolean, fails: (t: ClaimedTask) => boolean = () => false): Promise<number> {
  let n = 0;
  while (!done()) {
    const claim = await restCall(base, "POST", "/tasks/claim", { worker_id: "cli-w", workloads, max_tasks: 8, wait_seconds: 1 });
    if (claim.status === 204) continue;
    expect(claim.status).toBe(200);
    for (const t of (claim.body as { tasks: ClaimedTask[] }).tasks) {
      const report = fails(t)
        ? await restCall(base, "POST", `/tasks/${t.id}/failure`, {
            worker_id: "cli-w",
            attempt: t.attempt,
            error_code: "bad_seam",
            error_message: "seams do not meet",
            retryable: false,
          })
        : await restCall(base, "POST", `/tasks/${t.id}/result`, {
            worker_id: "cli-w",
            attempt: t.attempt,
            result_uri: `s3://out/${t.workload}/${t.chunk_index}`,
            result_sha256: sha(`${t.workload}-${t.chunk_index}`),
          });
      expect(report.status, JSON.stringify(report.body)).toBe(200);
      n++;
    }
  }
  return n;
}

describe("leasehold workflow", () => {
  it("create -f pipeline.yaml, then watch it to its end while its tasks are worked on; get and list show it", async () => {
    const created = await cli(["workflow", "create", "-f", pipelineFile("mesh-001")]);
    expect(created.code, created.stderr).toBe(0);
    const id = /^workflow ([0-9a-f-]{36}) \(mesh-001\): pending, 0\/3 nodes completed$/m.exec(created.stdout)?.[1];
    expect(id, created.stdout).toBeDefined();
    expect(created.stdout).toMatch(/^NODE +STATUS +WORKLOAD +TASKS +AFTER +JOB$/m);
    expect(created.stdout).toMatch(/^chunks +pending +cw_chunks +0\/3 +- +[0-9a-f-]{36}$/m);
    expect(created.stdout).toMatch(/^stitch +waiting +cw_stitch +0\/1 +chunks +[0-9a-f-]{36} +waits for chunks$/m);

    const watching = watch(id!);
    await watching.started;
    const worked = await work(["cw_chunks", "cw_stitch", "cw_report"], watching.ended);
    const watched = await watching.done;
    expect(watched.code, watched.stderr).toBe(0);
    expect(worked).toBe(5);
    expect(watched.stdout).toBe(`workflow ${id} completed: 3/3 nodes completed\n`);
    // No terminal: the starting block, then one line per node change, in commit order.
    const changes = watched.stderr.split("\n").filter((l) => /^(chunks|stitch|report): /.test(l));
    expect(changes.filter((l) => l.startsWith("report: "))).toEqual([
      "report: waiting → pending",
      "report: pending → running",
      "report: running → completed (1/1 tasks completed)",
    ]);
    expect(changes).toContain("chunks: running → completed (3/3 tasks completed)");
    expect(changes.indexOf("chunks: running → completed (3/3 tasks completed)")).toBeLessThan(changes.indexOf("stitch: waiting → pending"));

    const got = await cli(["workflow", "get", id!]);
    expect(got.code, got.stderr).toBe(0);
    expect(got.stdout).toMatch(/^nodes: +completed 3$/m);
    expect(got.stdout).toMatch(/^report +completed +cw_report +1\/1 +stitch /m);
    const json = await cli(["--json", "workflow", "get", id!]);
    expect(JSON.parse(json.stdout).workflow).toMatchObject({ id, name: "mesh-001", status: "JOB_STATUS_COMPLETED" });

    const list = await cli(["workflow", "list"]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/^ID +STATUS +NAME +NODES +CREATED$/m);
    expect(list.stdout).toMatch(new RegExp(`^${id} +completed +mesh-001 +completed 3 +\\d{4}-`, "m"));
  }, 120_000);

  it("on a terminal, watch redraws a line per node in place, and the outcome follows the last drawing", async () => {
    const created = await cli(["--json", "workflow", "create", "-f", pipelineFile("mesh-tty", 2)]);
    const id = JSON.parse(created.stdout).workflow.id as string;
    // script(1) runs the watch on a pseudo-terminal (one that reports no size: the CLI takes 24 × 120).
    const command = [process.execPath, ...nodeEntry("src/cli/main.ts"), "--url", base, "workflow", "watch", id]
      .map((a) => `'${a}'`)
      .join(" ");
    const child = spawn("script", ["-qec", command, "/dev/null"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let ended = false;
    child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
    const exited = new Promise<number | null>((resolve) => child.once("close", (code) => ((ended = true), resolve(code))));
    await new Promise<void>((resolve) => {
      const look = () => (out.includes(`workflow ${id}`) || ended ? resolve() : setTimeout(look, 50));
      look();
    });
    await work(["cw_chunks", "cw_stitch", "cw_report"], () => ended);
    expect(await exited, out).toBe(0);
    // Each redraw goes up over the block before it (three nodes and a header: four lines).
    expect(out).toContain("\x1b[4A");
    const final = out
      .slice(out.lastIndexOf("\x1b[4A"))
      .replace(new RegExp(String.fromCharCode(27) + "\\[[0-9]*[A-Za-z]", "g"), "")
      .replace(/\r/g, "");
    expect(final.split("\n")).toEqual([
      `workflow ${id} (mesh-tty): completed, 3/3 nodes completed`,
      "chunks  completed  [####################] 2/2 tasks",
      "stitch  completed  [####################] 1/1 tasks",
      "report  completed  [####################] 1/1 tasks",
      `workflow ${id} completed: 3/3 nodes completed`,
      "",
    ]);
  }, 120_000);

  it("a node that fails: watch exits 1 and says which and why; the node after it is cancelled; retry runs them again", async () => {
    const created = await cli(["--json", "workflow", "create", "-f", pipelineFile("mesh-002", 2)]);
    expect(created.code, created.stderr).toBe(0);
    const id = JSON.parse(created.stdout).workflow.id as string;
    const watching = watch(id);
    await watching.started;
    await work(["cw_chunks", "cw_stitch", "cw_report"], watching.ended, (t) => t.workload === "cw_stitch");
    const watched = await watching.done;
    expect(watched.code, watched.stderr).toBe(1);
    expect(watched.stdout).toMatch(new RegExp(`^workflow ${id} failed: 1/3 nodes completed$`, "m"));
    expect(watched.stdout).toMatch(
      /^ {2}stitch failed \(job [0-9a-f-]{36}\): chunk 0 \(task [0-9a-f-]{36}, attempt 1, worker cli-w\): bad_seam: seams do not meet$/m,
    );
    expect(watched.stdout).toMatch(/^ {2}report cancelled \(job [0-9a-f-]{36}\): .*stitch/m);

    const retried = await cli(["workflow", "retry", id]);
    expect(retried.code, retried.stderr).toBe(0);
    expect(retried.stdout).toBe(`workflow ${id} running: 2 nodes (2 tasks) back to run\n`);
    const again = watch(id);
    await work(["cw_chunks", "cw_stitch", "cw_report"], again.ended);
    expect((await again.done).code).toBe(0);
  }, 120_000);

  it("cancel: every node not final is cancelled, and a watch of it exits 3", async () => {
    const file = path.join(tmp, "idle.yaml");
    writeFileSync(
      file,
      `nodes:\n  a: {workload: cw_idle, input_uri: s3://a, input_sha256: ${sha("a")}}\n  b: {workload: cw_idle, input_uri: s3://b, input_sha256: ${sha("b")}, after: [a]}\n`,
    );
    const created = await cli(
      ["--json", "workflow", "create", "-f", "-", "--name", "idle"],
      `{"nodes": {"a": {"workload": "cw_idle", "input_uri": "s3://a", "input_sha256": "${sha("a")}"}}}`,
    );
    expect(created.code, created.stderr).toBe(0);
    const viaFile = await cli(["--json", "workflow", "create", "-f", file]);
    const id = JSON.parse(viaFile.stdout).workflow.id as string;
    const cancelled = await cli(["workflow", "cancel", id, "--reason", "not today"]);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(cancelled.stdout).toBe(`workflow ${id} cancelled: 2 nodes cancelled\n`);
    const watched = await cli(["workflow", "watch", id]);
    expect(watched.code).toBe(3);
    expect(watched.stdout).toMatch(/^ {2}a cancelled \(job [0-9a-f-]{36}\): not today$/m);
    expect(JSON.parse(created.stdout).workflow.name).toBe("idle");
  }, 60_000);

  it("a refused workflow names the node by its name, and nothing is written", async () => {
    const before = JSON.parse((await cli(["--json", "workflow", "list"])).stdout).workflows.length as number;
    const file = path.join(tmp, "bad.yaml");
    writeFileSync(
      file,
      `nodes:\n  a: {workload: cw_idle, input_uri: s3://a, input_sha256: ${sha("a")}}\n  b: {workload: cw_idle, input_uri: s3://b, input_sha256: ${sha("b")}, after: [c]}\n`,
    );
    const bad = await cli(["workflow", "create", "-f", file]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^leasehold: invalid_argument: .*nodes\[1\] \(b\)\.after\[0\]\.node/m);
    expect(bad.stderr).toMatch(/request id [0-9a-f-]{36}/);
    const unknown = path.join(tmp, "unknown.yaml");
    writeFileSync(unknown, `nodes:\n  a: {workload: cw_nope, input_uri: s3://a, input_sha256: ${sha("a")}}\n`);
    const missing = await cli(["workflow", "create", "-f", unknown]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/not_found: .*nodes\[0\] \(a\)\.job\.workload|not_found: .*cw_nope/);
    expect(JSON.parse((await cli(["--json", "workflow", "list"])).stdout).workflows).toHaveLength(before);
  });
});

describe("leasehold job create --after", () => {
  it("makes a job that waits for its parents; job get shows them; a cancelled required parent cancels it", async () => {
    const make = async (uri: string, ...extra: string[]) => {
      const r = await cli(["--json", "job", "create", "cw_idle", "--input-uri", uri, "--input-sha256", sha(uri), ...extra]);
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout).job as { id: string; status: string };
    };
    const parent = await make("s3://p");
    const other = await make("s3://o");
    const child = await make("s3://c", "--after", parent.id, "--after-optional", other.id);
    expect(child.status).toBe("JOB_STATUS_WAITING");
    const got = await cli(["job", "get", child.id]);
    expect(got.stdout).toContain("status:   waiting");
    expect(got.stdout).toMatch(/^tasks: +1 \(waiting 1, pending 0/m);
    expect(got.stdout).toMatch(/^after: +2 jobs \(all_completed, waiting for 2\)$/m);
    expect(got.stdout).toContain(`  ${other.id} pending, 0/1 tasks completed, optional`);
    expect((await cli(["--json", "jobs", "list", "--status", "waiting"])).stdout).toContain(child.id);
    expect((await cli(["job", "cancel", parent.id])).code).toBe(0);
    const after = await cli(["job", "get", child.id]);
    expect(after.stdout).toContain("status:   cancelled");
    const policy = await make("s3://f", "--after", parent.id, "--dependency-policy", "all_final");
    expect(policy.status).toBe("JOB_STATUS_PENDING");
  });
});
