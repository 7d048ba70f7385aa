// One PostgreSQL server of a given major version in a container, through @testcontainers/postgresql:
// the image from scripts/pg-images/image.sh (the official postgres:N where a registry answers, else
// leasehold/postgres:N built from Debian), the server flags of the embedded default, and a label
// that lets a later run remove a container whose runner was killed before it could stop it.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { PostgreSqlContainer, type StartedPostgreSqlContainer } from "@testcontainers/postgresql";
import { Wait } from "testcontainers";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const VERSIONS = ["15", "17"] as const;
export type Version = (typeof VERSIONS)[number];

const LABEL = "dev.leasehold.pg-matrix.pid";

/**
 * Ryuk (testcontainers' reaper of leftovers) is an image pulled from a registry, and where none
 * answers it cannot start: containers are stopped by this code instead (and by the next run's
 * sweep). On a machine that is itself a container (/.dockerenv), testcontainers looks for the
 * host's gateway by starting an alpine image, again pulled: published ports are on localhost here.
 */
export function testcontainersEnv(): void {
  process.env.TESTCONTAINERS_RYUK_DISABLED ??= "true";
  process.env.TESTCONTAINERS_HOST_OVERRIDE ??= "localhost";
}

/** Null when a Docker engine answers, else one line saying why not. */
export function engineProblem(): string | null {
  const r = spawnSync("docker", ["version", "--format", "{{.Server.Version}}"], { encoding: "utf8", timeout: 30_000 });
  if (r.error) return `no docker command (${(r.error as NodeJS.ErrnoException).code ?? r.error.message})`;
  if (r.status !== 0) return (r.stderr.trim().split("\n").pop() ?? "").trim() || `docker version exited ${r.status}`;
  return null;
}

/** Removes containers of earlier runs whose runner process is gone (killed with SIGKILL, say). */
export function sweepLeftovers(): void {
  const r = spawnSync("docker", ["ps", "-a", "--filter", `label=${LABEL}`, "--format", `{{.ID}} {{.Label "${LABEL}"}}`], {
    encoding: "utf8",
  });
  for (const line of r.stdout?.split("\n") ?? []) {
    const [id, pid] = line.trim().split(" ");
    if (!id || (pid && alive(Number(pid)))) continue;
    spawnSync("docker", ["rm", "-f", "-v", id], { stdio: "ignore" });
    console.log(`test:pg: removed container ${id} left by an earlier run (pid ${pid} is gone)`);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The image for a version, built or pulled when missing; image.sh says which kind on stderr. */
export function ensureImage(version: Version): string {
  const r = spawnSync(path.join(ROOT, "scripts/pg-images/image.sh"), [version], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "inherit"],
  });
  const image = r.stdout?.trim().split("\n").pop();
  if (r.status !== 0 || !image)
    throw new Error(`no PostgreSQL ${version} image (scripts/pg-images/image.sh exited ${r.status ?? r.signal})`);
  return image;
}

/**
 * The embedded default's flags (src/store/postgres/schema/embedded.ts), so the versions differ only in
 * the server itself. fsync=off on the matrix's tmpfs data directory changes nothing a test sees.
 */
const FLAGS = ["max_connections=200", "shared_buffers=256MB", "synchronous_commit=on", "wal_compression=on", "autovacuum_naptime=10s"];

/**
 * With an init process (docker run --init: tini) as PID 1 instead of the postmaster. Processes the
 * engine runs in the container (`docker exec`: readiness checks) are re-parented to PID 1 when
 * their runc parent exits; a postmaster that reaps one which died by a signal (SIGPIPE, once the
 * engine stopped reading its output) takes it for a crashed backend and restarts the server,
 * ending every session. Seen on PostgreSQL 15 here (the testcontainers module's default health
 * check, every 250 ms on a busy machine). The module has no switch for it; HostConfig is
 * protected.
 */
class PostgresWithInit extends PostgreSqlContainer {
  withInit(): this {
    this.hostConfig.Init = true;
    return this;
  }
}

export async function startPostgres(image: string, opts: { tmpfs: boolean }): Promise<StartedPostgreSqlContainer> {
  testcontainersEnv();
  let c = new PostgresWithInit(image)
    .withInit()
    .withUsername("postgres")
    .withPassword("leasehold")
    .withDatabase("postgres")
    .withLabels({ [LABEL]: String(process.pid) })
    // Docker's default /dev/shm is 64 MB; PostgreSQL's parallel workers share memory through it.
    .withSharedMemorySize(512 * 1024 * 1024)
    // The module's default readiness is a Docker health check (pg_isready every 250 ms), which the
    // engine keeps running, one `docker exec` each time, for the container's whole life: ~1/3 of a
    // core on a 2-core machine. The same pg_isready (over TCP, which the entrypoint's initdb-time
    // server does not listen on) as a wait that runs only until it first succeeds, and no health check.
    // ["NONE"] is the engine's "no health check" (the module's types know only CMD and CMD-SHELL).
    .withHealthCheck({ test: ["NONE" as "CMD"] })
    .withWaitStrategy(Wait.forAll([Wait.forSuccessfulCommand("pg_isready --host localhost --port 5432"), Wait.forListeningPorts()]))
    .withCommand(["postgres", ...FLAGS.flatMap((f) => ["-c", f]), ...(opts.tmpfs ? ["-c", "fsync=off"] : [])]);
  if (opts.tmpfs) c = c.withTmpFs({ "/var/lib/postgresql/data": "rw,mode=700" });
  return c.start();
}
