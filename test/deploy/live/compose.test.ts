// The compose stack of deploy/compose with both optional overlays (tokens with a scrape token,
// TLS at the balancer), brought up by whichever Compose is installed (the v2 plugin, or Debian's
// docker-compose 1.29): PostgreSQL, the one-shot migrate the coordinators wait for, two
// coordinators behind HAProxy (h2 to the backends), Prometheus scraping both with its token.
//
// A job runs through the balancer: gRPC workers (over TLS, h2 by ALPN) and REST workers (HTTP/1.1
// on the cleartext port) claim and report its tasks while coordinator-1 gets `docker stop`
// (SIGTERM) mid-run. It must drain and exit 0, and lose nothing: every task handed to a worker
// exactly once, completed on its first attempt (a lost claim answer would come back as attempt
// 2 once its lease expired), every result accepted; coordinator-2 serves the rest. Then
// `down -v` must leave no container, network or volume of the project behind.
import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { QueueService } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { sha } from "../../support/queue.js";
import { composeCommand, docker, dockerAsync, leftovers, must, mustAsync, run } from "./docker.js";

const images = inject("deployImages");
const PROJECT = `lhdeploy${process.pid}`;
const FILES = ["docker-compose.yml", "docker-compose.auth.yml", "docker-compose.tls.yml"].flatMap((f) => ["-f", `deploy/compose/${f}`]);
const TASKS = 240;
const WORKLOAD = "composed";
const token = (role: string) => `lh_${role}_${randomBytes(12).toString("hex")}`;
const TOKENS = { admin: token("admin"), worker: token("worker"), scrape: token("scrape") };

let compose: string[];
let env: NodeJS.ProcessEnv;
let secrets: string;
let api: string;
let apiTls: string;
let stats: string;
let prometheus: string;
let ca: string;
let upSeconds = 0;

function composeRun(args: string[], timeoutMs = 300_000): string {
  return must(compose[0], [...compose.slice(1), "-p", PROJECT, ...FILES, ...args], { env, timeoutMs });
}

/** The container of a compose service (also a stopped one). */
function container(service: string): string {
  const id = docker(
    "ps",
    "-aq",
    "--filter",
    `label=com.docker.compose.project=${PROJECT}`,
    "--filter",
    `label=com.docker.compose.service=${service}`,
  ).split("\n")[0];
  if (!id) throw new Error(`no container of ${service}`);
  return id;
}

const published = (service: string, port: number) => composeRun(["port", service, String(port)]).split("\n")[0];

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 120_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** HAProxy's view of the coordinators: server name → status (UP, DOWN, MAINT…). */
async function servers(): Promise<Record<string, string>> {
  const csv = await (await fetch(`${stats}/;csv`)).text();
  const [head, ...rows] = csv.replace(/^# /, "").trim().split("\n");
  const cols = head.split(",");
  const [px, sv, st] = ["pxname", "svname", "status"].map((c) => cols.indexOf(c));
  const out: Record<string, string> = {};
  for (const r of rows.map((l) => l.split(","))) if (r[px] === "coordinators" && r[sv] !== "BACKEND") out[r[sv]] = r[st];
  return out;
}

async function targets(): Promise<{ instance: string; health: string; lastError: string }[]> {
  const r = (await (await fetch(`${prometheus}/api/v1/targets`)).json()) as {
    data: { activeTargets: { labels: { instance: string }; health: string; lastError: string }[] };
  };
  return r.data.activeTargets.map((t) => ({ instance: t.labels.instance, health: t.health, lastError: t.lastError }));
}

async function rest(
  method: string,
  p: string,
  body?: unknown,
  bearer = TOKENS.admin,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${api}${p}`, {
    method,
    headers: { authorization: `Bearer ${bearer}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

beforeAll(async () => {
  const found = composeCommand();
  if (!found) throw new Error("no Compose: neither `docker compose` nor docker-compose (the setup installs Debian's)");
  compose = found;
  secrets = mkdtempSync(path.join(os.tmpdir(), "leasehold-compose-secrets-"));
  chmodSync(secrets, 0o755);
  const hash = (t: string) => createHash("sha256").update(t).digest("hex");
  // The tokens file holds hashes only; the scrape token is a metrics token (it may read /metrics and call no RPC).
  const lines = [`${hash(TOKENS.admin)} admin`, `${hash(TOKENS.worker)} worker w-`, `${hash(TOKENS.scrape)} metrics`];
  writeFileSync(path.join(secrets, "tokens.txt"), `${lines.join("\n")}\n`, { mode: 0o644 });
  writeFileSync(path.join(secrets, "metrics-token"), TOKENS.scrape, { mode: 0o644 });
  // A self-signed certificate for HAProxy's HTTPS port: the chain, then the key, in one PEM.
  execFileSync(
    "openssl",
    ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days", "1"].concat(
      ["-keyout", path.join(secrets, "key.pem"), "-out", path.join(secrets, "cert.pem")],
      ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
    ),
    { stdio: "ignore" },
  );
  ca = readFileSync(path.join(secrets, "cert.pem"), "utf8");
  writeFileSync(path.join(secrets, "tls.pem"), ca + readFileSync(path.join(secrets, "key.pem"), "utf8"), { mode: 0o644 });
  env = {
    ...process.env,
    LEASEHOLD_IMAGE: images.coordinator,
    POSTGRES_IMAGE: images.postgres,
    HAPROXY_IMAGE: images.haproxy,
    PROMETHEUS_IMAGE: images.prometheus,
    POSTGRES_PASSWORD: randomBytes(12).toString("hex"),
    LEASEHOLD_SECRETS: secrets,
    // Any free port on loopback: several runs (and a developer's own stack) side by side.
    LEASEHOLD_PUBLISH: "127.0.0.1:",
    LEASEHOLD_TLS_PUBLISH: "127.0.0.1:",
    PROMETHEUS_PUBLISH: "127.0.0.1:",
    HAPROXY_STATS_PUBLISH: "127.0.0.1:",
  };
  const started = performance.now();
  composeRun(["up", "-d", "--no-build"]);
  api = `http://${published("haproxy", 8080)}`;
  apiTls = `https://${published("haproxy", 8443)}`;
  stats = `http://${published("haproxy", 8404)}`;
  prometheus = `http://${published("prometheus", 9090)}`;
  await until("both coordinators UP in HAProxy", async () => {
    const s = await servers().catch(() => ({}) as Record<string, string>);
    return s["coordinator-1"] === "UP" && s["coordinator-2"] === "UP" ? true : undefined;
  });
  upSeconds = (performance.now() - started) / 1000;
  console.log(`test:deploy: ${compose.join(" ")} up: both coordinators ready behind HAProxy in ${upSeconds.toFixed(0)} s`);
}, 600_000);

afterAll(() => {
  if (!compose) return;
  // Whatever happened: the project's containers, networks and volumes go.
  run(compose[0], [...compose.slice(1), "-p", PROJECT, ...FILES, "down", "-v", "--remove-orphans", "--timeout", "30"], {
    env,
    timeoutMs: 300_000,
  });
  if (secrets) rmSync(secrets, { recursive: true, force: true });
});

describe("the compose stack", () => {
  it("migrates once, before the coordinators start, and Prometheus scrapes both with its token", async () => {
    const migrate = JSON.parse(docker("inspect", "--format", "{{json .State}}", container("migrate"))) as {
      ExitCode: number;
      FinishedAt: string;
    };
    expect(migrate.ExitCode).toBe(0);
    for (const c of ["coordinator-1", "coordinator-2"]) {
      const startedAt = docker("inspect", "--format", "{{.State.StartedAt}}", container(c));
      expect(Date.parse(startedAt)).toBeGreaterThanOrEqual(Date.parse(migrate.FinishedAt));
    }
    expect(run("docker", ["logs", container("migrate")]).stdout).toContain("schema is current");

    // Tokens are on: the API wants one, through either port.
    expect((await rest("GET", "/workloads", undefined, "wrong")).status).toBe(401);
    expect((await rest("GET", "/workloads")).status).toBe(200);

    const scraped = await until("Prometheus to scrape both coordinators", async () => {
      const t = await targets().catch(() => []);
      return t.length === 2 && t.every((x) => x.health === "up") ? t : undefined;
    });
    expect(scraped.map((t) => t.instance).sort()).toEqual(["coordinator-1:8080", "coordinator-2:8080"]);
    const ready = (await (await fetch(`${prometheus}/api/v1/query?query=sum(leasehold_ready)`)).json()) as {
      data: { result: { value: [number, string] }[] };
    };
    expect(ready.data.result[0]?.value[1]).toBe("2");
    const rules = (await (await fetch(`${prometheus}/api/v1/rules`)).json()) as { data: { groups: { rules: unknown[] }[] } };
    expect(rules.data.groups.flatMap((g) => g.rules).length).toBeGreaterThanOrEqual(9);
  });

  it("runs a job through the balancer over gRPC and REST while coordinator-1 is stopped: it drains, exits 0, nothing is lost", async () => {
    expect((await rest("PUT", `/workloads/${WORKLOAD}`, { lease_seconds: 20, max_attempts: 3 })).status).toBe(200);
    const created = await rest("POST", "/jobs", {
      workload: WORKLOAD,
      tasks: Array.from({ length: TASKS }, (_, i) => ({ chunk_index: i, input_uri: `s3://in/${i}`, input_sha256: sha(i) })),
    });
    expect(created.status).toBe(201);
    const jobId = (created.json.job as { id: string }).id;

    const handed = new Map<string, number>(); // task id → times a claim handed it to a worker
    const accepted = new Set<string>();
    const refused: string[] = []; // results the coordinator refused (a lost lease would be one)
    let retried = 0; // calls that failed in transit (the stop) and were asked again
    let stop = false;

    const handle = (id: string) => handed.set(id, (handed.get(id) ?? 0) + 1);
    /** Asks `call` until it answers; transport failures and UNAVAILABLE are retried, other refusals thrown. */
    async function retrying<T>(call: () => Promise<T>): Promise<T> {
      for (let i = 0; ; i++) {
        try {
          return await call();
        } catch (err) {
          const e = ConnectError.from(err);
          const transient = e.code === Code.Unavailable || e.code === Code.Unknown || e.code === Code.Internal || e.code === Code.Aborted;
          if (!transient || i > 100) throw err;
          retried++;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
    }

    async function grpcWorker(n: number, client: Client<typeof QueueService>): Promise<void> {
      const workerId = `w-grpc-${n}`;
      while (!stop) {
        const claim = await retrying(() => client.claimTasks({ workerId, workloads: [WORKLOAD], maxTasks: 1 + (n % 4), waitSeconds: 1 }));
        for (const t of claim.tasks) {
          handle(t.id);
          await new Promise((r) => setTimeout(r, 10 + (n % 3) * 10));
          try {
            await retrying(() =>
              client.completeTask({
                taskId: t.id,
                workerId,
                attempt: t.attempt,
                resultUri: `s3://out/${t.chunkIndex}`,
                resultSha256: sha(`out${t.chunkIndex}`),
              }),
            );
            accepted.add(t.id);
          } catch (err) {
            refused.push(`${t.id}: ${ConnectError.from(err).message}`);
          }
        }
      }
    }

    async function restCall(p: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
      for (let i = 0; ; i++) {
        try {
          const r = await rest("POST", p, body, TOKENS.worker);
          if ((r.status === 502 || r.status === 503) && i < 100) {
            retried++;
            await new Promise((res) => setTimeout(res, 100));
            continue;
          }
          return r;
        } catch (err) {
          if (i > 100) throw err;
          retried++; // the connection was cut
          await new Promise((res) => setTimeout(res, 100));
        }
      }
    }

    async function restWorker(n: number): Promise<void> {
      const workerId = `w-rest-${n}`;
      while (!stop) {
        const claim = await restCall("/tasks/claim", { worker_id: workerId, workloads: [WORKLOAD], max_tasks: 2, wait_seconds: 1 });
        for (const t of (claim.json.tasks as { id: string; attempt: number; chunk_index?: number }[] | undefined) ?? []) {
          handle(t.id);
          const chunk = t.chunk_index ?? 0;
          const r = await restCall(`/tasks/${t.id}/result`, {
            worker_id: workerId,
            attempt: t.attempt,
            result_uri: `s3://out/${chunk}`,
            result_sha256: sha(`out${chunk}`),
          });
          if (r.status === 200) accepted.add(t.id);
          else refused.push(`${t.id}: ${r.status} ${JSON.stringify(r.json)}`);
        }
      }
    }

    const grpcClients = [0, 1, 2, 3].map(() =>
      createClient(
        QueueService,
        createGrpcTransport({
          baseUrl: apiTls,
          nodeOptions: { ca },
          interceptors: [
            (next) => (req) => {
              req.header.set("authorization", `Bearer ${TOKENS.worker}`);
              return next(req);
            },
          ],
        }),
      ),
    );
    const workers = Promise.all([...grpcClients.map((c, n) => grpcWorker(n, c)), restWorker(0), restWorker(1)]);

    // A third of the way in, coordinator-1 gets SIGTERM (docker stop, as a rolling update would).
    await until("a third of the tasks done", () => (accepted.size >= TASKS / 3 ? true : undefined));
    const c1 = container("coordinator-1");
    const stopStarted = performance.now();
    await dockerAsync("stop", "--time", "30", c1);
    const stopSeconds = (performance.now() - stopStarted) / 1000;
    const doneAtStop = accepted.size;

    await until(
      "every task done",
      async () => {
        const job = await rest("GET", `/jobs/${jobId}`);
        return (job.json.job as { status: string }).status === "JOB_STATUS_COMPLETED" ? true : undefined;
      },
      240_000,
    );
    stop = true;
    await workers;

    // coordinator-1 drained and exited 0; coordinator-2 served on.
    const state = JSON.parse(docker("inspect", "--format", "{{json .State}}", c1)) as { Status: string; ExitCode: number };
    expect(state).toMatchObject({ Status: "exited", ExitCode: 0 });
    const log = run("docker", ["logs", c1]);
    expect(log.stdout + log.stderr).toContain("shutting down gracefully");
    const stopped = /"ms":(\d+),"msg":"stopped"/.exec(log.stdout + log.stderr);
    expect(stopped).not.toBeNull();
    expect(docker("inspect", "--format", "{{.State.Status}}", container("coordinator-2"))).toBe("running");
    // Out of the balancer: DOWN (its checks fail), or MAINT once Docker's DNS forgets the name.
    expect(await servers()).toMatchObject({ "coordinator-1": expect.stringMatching(/^(DOWN|MAINT)/), "coordinator-2": "UP" });

    // Nothing lost: each task handed out once, on attempt 1, its result accepted once and stored.
    expect(refused).toEqual([]);
    expect(accepted.size).toBe(TASKS);
    expect([...handed.values()].filter((n) => n !== 1)).toEqual([]);
    expect(handed.size).toBe(TASKS);
    const tasks: { id: string; status: string; attempt: number; chunk_index?: number; result_uri: string }[] = [];
    let pageToken = "";
    do {
      const page = await rest("GET", `/jobs/${jobId}/tasks?page_size=100${pageToken ? `&page_token=${pageToken}` : ""}`);
      tasks.push(...(page.json.tasks as { task: (typeof tasks)[number] }[]).map((t) => t.task));
      pageToken = (page.json.next_page_token as string | undefined) ?? "";
    } while (pageToken);
    expect(tasks).toHaveLength(TASKS);
    expect(tasks.filter((t) => t.status !== "TASK_STATUS_COMPLETED" || t.attempt !== 1)).toEqual([]);
    expect(tasks.filter((t) => t.result_uri !== `s3://out/${t.chunk_index ?? 0}`)).toEqual([]);

    // The CLI inside the coordinator that stayed (its default URL is itself).
    expect(
      must("docker", ["exec", "-e", `LEASEHOLD_TOKEN=${TOKENS.admin}`, container("coordinator-2"), "leasehold", "jobs", "list", "--json"]),
    ).toContain(jobId);

    console.log(
      `test:deploy: ${TASKS} tasks through HAProxy (4 gRPC workers over TLS, 2 REST workers); coordinator-1 stopped at ${doneAtStop} done: ` +
        `docker stop took ${stopSeconds.toFixed(1)} s (drain ${stopped?.[1]} ms), exit 0; ${retried} calls asked again through the stop; ` +
        `each task handed out once, completed on attempt 1`,
    );
  });

  it("comes down with `down -v` and leaves no container, network or volume behind", async () => {
    const started = performance.now();
    // Not blocking this process: HAProxy's soft stop waits for its clients (ours) to close.
    await mustAsync(compose[0], [...compose.slice(1), "-p", PROJECT, ...FILES, "down", "-v", "--remove-orphans", "--timeout", "30"], {
      env,
    });
    console.log(`test:deploy: down -v in ${((performance.now() - started) / 1000).toFixed(0)} s`);
    expect(leftovers(`label=com.docker.compose.project=${PROJECT}`)).toEqual([]);
  });
});
