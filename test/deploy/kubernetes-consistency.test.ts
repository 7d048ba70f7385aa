// The deployment files checked against the coordinator they deploy, so they cannot drift from it
// while no cluster runs here: the Kubernetes manifests (deploy/kubernetes) and the compose stack
// (deploy/compose) name only ports, probe paths, environment variables and commands the
// coordinator and its image have, with values its configuration accepts; the image's own
// entrypoint, health check and user match them. Part of `npm test` (no Docker, no database).
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";
import { createOpsRoutes } from "../../src/api/ops-routes.js";
import { CONFIG_VARIABLES, loadConfig } from "../../src/config/index.js";
import { Metrics } from "../../src/telemetry/metrics.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const read = (rel: string) => readFileSync(path.join(ROOT, rel), "utf8");
const KNOWN = new Set<string>(CONFIG_VARIABLES.map(([name]) => name));
const DEFAULTS = Object.fromEntries(CONFIG_VARIABLES.map(([name, def]) => [name, def])) as Record<string, string>;
const tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-k8s-check-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

// ---------------------------------------------------------------- what the coordinator has

/** The image: its user, port, entrypoint's commands and node flags, health check path. */
const dockerfile = read("deploy/container/Dockerfile");
const entrypoint = read("deploy/container/docker-entrypoint.sh");
const IMAGE_USER = /^USER (\d+):(\d+)$/m.exec(dockerfile)?.slice(1).map(Number) ?? [];
const IMAGE_PORT = Number(/^EXPOSE (\d+)$/m.exec(dockerfile)?.[1]);
/** The entrypoint's first-argument cases (`coordinator)`, `migrate)`, …), not the catch-all. */
const COMMANDS = [...entrypoint.matchAll(/^ {2}([a-z][a-z-]*)\)$/gm)].map((m) => m[1]);

/** The ops routes a probe may name: served by the coordinator's own createOpsRoutes. */
async function servedPaths(paths: string[]): Promise<Record<string, number>> {
  const routes = createOpsRoutes({
    logger: pino({ level: "silent" }),
    readiness: async () => ({ ready: true }),
    metrics: new Metrics({ logger: pino({ level: "silent" }) }),
  });
  const server = http.createServer((req, res) => {
    void routes(req, res, new URL(req.url ?? "/", "http://x").pathname, { requestId: "check" }).then((served) => {
      if (!served) {
        res.statusCode = 404;
        res.end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  try {
    const out: Record<string, number> = {};
    for (const p of paths) out[p] = (await fetch(`http://127.0.0.1:${port}${p}`)).status;
    return out;
  } finally {
    server.close();
  }
}

/** Whether the migrate command takes `sub` (without DATABASE_URL it stops before doing anything). */
function migrateKnows(sub: string): boolean {
  const r = spawnSync(process.execPath, ["--import", "tsx", "src/migrate-cli.ts", sub], {
    cwd: ROOT,
    encoding: "utf8",
    env: { ...process.env, DATABASE_URL: "", HOST: "127.0.0.1" },
  });
  return !r.stderr.includes("usage:");
}

/** A tokens file loadConfig accepts, standing in for a mounted Secret. */
function tokensFile(): string {
  const f = path.join(tmp, "tokens.txt");
  writeFileSync(f, `${"a".repeat(64)} admin\n`);
  return f;
}

/**
 * The configuration the image's `command` would load from these variables: the entrypoint sets
 * HOST=0.0.0.0 (unless given) for the coordinator only; migrate and the CLI read the same
 * configuration with HOST unset.
 */
function configFrom(command: string, env: Record<string, string>): ReturnType<typeof loadConfig> {
  const withFiles = { ...env };
  if (withFiles.AUTH_TOKENS_FILE) withFiles.AUTH_TOKENS_FILE = tokensFile();
  return loadConfig(command === "coordinator" ? { HOST: "0.0.0.0", ...withFiles } : withFiles);
}

// ---------------------------------------------------------------- Kubernetes

interface Container {
  name: string;
  image: string;
  args?: string[];
  command?: string[];
  ports?: { name: string; containerPort: number }[];
  env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[];
  readinessProbe?: { httpGet?: { path: string; port: string | number } };
  livenessProbe?: { httpGet?: { path: string; port: string | number } };
  startupProbe?: { httpGet?: { path: string; port: string | number } };
  lifecycle?: { preStop?: { exec?: { command: string[] } } };
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: { readOnlyRootFilesystem?: boolean; allowPrivilegeEscalation?: boolean };
  volumeMounts?: { name: string; mountPath: string }[];
}
interface PodSpec {
  containers: Container[];
  terminationGracePeriodSeconds?: number;
  securityContext?: { runAsNonRoot?: boolean; runAsUser?: number; runAsGroup?: number };
  volumes?: { name: string; secret?: { secretName: string; items?: { key: string; path: string }[] } }[];
}
interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  spec: {
    selector?: { matchLabels?: Record<string, string> } & Record<string, string>;
    template?: { metadata: { labels: Record<string, string> }; spec: PodSpec };
    ports?: { name: string; port: number; targetPort: string | number; appProtocol?: string }[];
    endpoints?: { port: string; path: string; authorization?: { credentials: { name: string; key: string } } }[];
  };
}

const K8S_DIR = "deploy/kubernetes";
const manifests: Manifest[] = readdirSync(path.join(ROOT, K8S_DIR))
  .filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml")
  .flatMap((f) => parseAllDocuments(read(`${K8S_DIR}/${f}`)).map((d) => d.toJS() as Manifest));
const one = (kind: string) => {
  const found = manifests.filter((m) => m.kind === kind);
  expect(found, kind).toHaveLength(1);
  return found[0];
};
const matches = (selector: Record<string, string> | undefined, labels: Record<string, string>) =>
  Object.keys(selector ?? {}).length > 0 && Object.entries(selector ?? {}).every(([k, v]) => labels[k] === v);
const envOf = (c: Container) => Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value ?? "postgres://user:pass@db:5432/leasehold"]));
const ms = (env: Record<string, string>, name: string) => Number(env[name] ?? DEFAULTS[name]);

describe("the Kubernetes manifests", () => {
  it("are all listed by the kustomization", () => {
    const k = parse(read(`${K8S_DIR}/kustomization.yaml`)) as { resources: string[] };
    const files = readdirSync(path.join(ROOT, K8S_DIR)).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
    expect([...k.resources].sort()).toEqual(files.sort());
  });

  it("name only variables the coordinator reads, with values its configuration accepts", () => {
    for (const kind of ["Deployment", "Job"]) {
      for (const c of one(kind).spec.template?.spec.containers ?? []) {
        const env = envOf(c);
        expect(
          Object.keys(env).filter((n) => !KNOWN.has(n)),
          `${kind} ${c.name}`,
        ).toEqual([]);
        expect(() => configFrom(c.args?.[0] ?? "coordinator", env), `${kind} ${c.name}`).not.toThrow();
      }
    }
  });

  it("run commands of the image, as its user", () => {
    for (const [kind, expected] of [
      ["Deployment", ["coordinator"]],
      ["Job", ["migrate", "up"]],
    ] as const) {
      const pod = one(kind).spec.template?.spec as PodSpec;
      const [c] = pod.containers;
      expect(c.command, `${kind}: the image's entrypoint (tini) stays`).toBeUndefined();
      expect(c.args).toEqual(expected);
      expect(COMMANDS).toContain(c.args?.[0]);
      expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: IMAGE_USER[0], runAsGroup: IMAGE_USER[1] });
      expect(c.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false });
      expect(c.resources?.requests?.memory && c.resources?.limits?.memory, `${kind}: memory request and limit`).toBeTruthy();
      expect(c.image).toBe(one("Deployment").spec.template?.spec.containers[0].image);
    }
    expect(migrateKnows("up")).toBe(true);
    expect(migrateKnows("no-such-command")).toBe(false);
  });

  it("probe /readyz for readiness and /healthz for liveness on the port the coordinator listens on", async () => {
    const [c] = one("Deployment").spec.template?.spec.containers ?? [];
    const env = envOf(c);
    const port = c.ports?.find((p) => p.name === "api");
    expect(port?.containerPort).toBe(ms(env, "PORT"));
    expect(port?.containerPort).toBe(IMAGE_PORT);
    expect(c.readinessProbe?.httpGet).toEqual({ path: "/readyz", port: "api" });
    expect(c.livenessProbe?.httpGet).toEqual({ path: "/healthz", port: "api" });
    expect(c.startupProbe?.httpGet).toEqual({ path: "/healthz", port: "api" });
    const served = await servedPaths(["/readyz", "/healthz", "/metrics", "/nowhere"]);
    expect(served).toEqual({ "/readyz": 200, "/healthz": 200, "/metrics": 200, "/nowhere": 404 });
  });

  it("give a drain its time: the grace period covers preStop and SHUTDOWN_TIMEOUT_MS", () => {
    const spec = one("Deployment").spec.template?.spec as PodSpec;
    const [c] = spec.containers;
    const preStop = c.lifecycle?.preStop?.exec?.command ?? [];
    expect(preStop[0]).toBe("sleep");
    const sleep = Number(preStop[1]);
    // + 5 s for the pool's close, as src/main.ts bounds it.
    expect(spec.terminationGracePeriodSeconds).toBeGreaterThan(sleep + ms(envOf(c), "SHUTDOWN_TIMEOUT_MS") / 1000 + 5);
  });

  it("mount the tokens file where AUTH_TOKENS_FILE points, from the Secret the ServiceMonitor reads", () => {
    const spec = one("Deployment").spec.template?.spec as PodSpec;
    const [c] = spec.containers;
    const file = envOf(c).AUTH_TOKENS_FILE;
    const mount = c.volumeMounts?.find((m) => file.startsWith(`${m.mountPath}/`));
    expect(mount, `a volume mounted above ${file}`).toBeDefined();
    const volume = spec.volumes?.find((v) => v.name === mount?.name);
    expect(volume?.secret?.items?.map((i) => i.path)).toContain(path.basename(file));
    const auth = one("ServiceMonitor").spec.endpoints?.[0].authorization?.credentials;
    expect(auth?.name).toBe(volume?.secret?.secretName);
  });

  it("select the coordinators: Service (an h2c port named grpc), PodDisruptionBudget, ServiceMonitor", () => {
    const deployment = one("Deployment");
    const pods = deployment.spec.template?.metadata.labels ?? {};
    expect(matches(deployment.spec.selector?.matchLabels, pods)).toBe(true);
    const service = one("Service");
    expect(matches(service.spec.selector as Record<string, string>, pods)).toBe(true);
    expect(matches(one("PodDisruptionBudget").spec.selector?.matchLabels, pods)).toBe(true);
    const containerPorts = (deployment.spec.template?.spec.containers[0].ports ?? []).map((p) => p.name);
    for (const p of service.spec.ports ?? []) expect(containerPorts).toContain(p.targetPort);
    expect(service.spec.ports?.find((p) => p.name === "grpc")?.appProtocol).toBe("kubernetes.io/h2c");
    const monitor = one("ServiceMonitor");
    expect(matches(monitor.spec.selector?.matchLabels, service.metadata.labels ?? {})).toBe(true);
    for (const e of monitor.spec.endpoints ?? []) {
      expect((service.spec.ports ?? []).map((p) => p.name)).toContain(e.port);
      expect(e.path).toBe("/metrics");
    }
  });
});

// ---------------------------------------------------------------- the image

describe("the image", () => {
  it("starts the coordinator with the node flags of `npm start`, and checks health on /readyz", () => {
    const pkg = JSON.parse(read("package.json")) as { scripts: Record<string, string> };
    const npmFlags = /node (.*) bin\/start\.js$/.exec(pkg.scripts.start)?.[1];
    const imageFlags = /exec node (.*) \/app\/bin\/start\.js/.exec(entrypoint)?.[1];
    expect(npmFlags).toBeTruthy();
    expect(imageFlags).toBe(npmFlags);
    expect(COMMANDS).toEqual(["coordinator", "migrate", "leasehold"]);
    expect(read("deploy/container/healthcheck.mjs")).toContain('path: "/readyz"');
    expect(/^HEALTHCHECK .* CMD \["node", "\/usr\/local\/bin\/healthcheck\.mjs"\]$/m.test(dockerfile)).toBe(true);
    expect(IMAGE_PORT).toBe(Number(DEFAULTS.PORT));
  });
});

// ---------------------------------------------------------------- compose

interface ComposeService {
  image?: string;
  command?: string[];
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string }> | string[];
  stop_grace_period?: string;
  secrets?: string[];
  volumes?: string[];
}
interface ComposeFile {
  services: Record<string, ComposeService>;
  secrets?: Record<string, { file: string }>;
}
const composeFile = (f: string) => parse(read(`deploy/compose/${f}`), { merge: true }) as ComposeFile;
/** Compose's `${VAR:-default}` with its default. */
const interpolate = (v: string) => v.replace(/\$\{\w+:-([^}]*)\}/g, "$1");
const seconds = (d: string) => Number(/^(\d+)s$/.exec(d)?.[1]);

describe("the compose stack", () => {
  const base = composeFile("docker-compose.yml");
  const coordinators = Object.entries(base.services).filter(([, s]) => s.image?.includes("LEASEHOLD_IMAGE") && !s.command);
  const haproxy = read("deploy/compose/haproxy.cfg");

  it("runs the image's commands: the coordinators, and migrate up first", () => {
    expect(coordinators.map(([name]) => name)).toEqual(["coordinator-1", "coordinator-2"]);
    expect(base.services.migrate.command).toEqual(["migrate", "up"]);
    expect(COMMANDS).toContain(base.services.migrate.command?.[0]);
    for (const [name, s] of coordinators) {
      expect((s.depends_on as Record<string, { condition: string }>).migrate, name).toEqual({
        condition: "service_completed_successfully",
      });
    }
  });

  it("names only variables the coordinator reads, with values it accepts, with and without the auth overlay", () => {
    const auth = composeFile("docker-compose.auth.yml");
    for (const [name, s] of [...coordinators, ["migrate", base.services.migrate] as const]) {
      for (const extra of [{}, auth.services[name]?.environment ?? {}]) {
        const env = Object.fromEntries(Object.entries({ ...s.environment, ...extra }).map(([k, v]) => [k, interpolate(String(v))]));
        expect(
          Object.keys(env).filter((n) => !KNOWN.has(n)),
          name,
        ).toEqual([]);
        expect(() => configFrom(s.command?.[0] ?? "coordinator", env), name).not.toThrow();
      }
    }
  });

  it("stops a coordinator within its grace period", () => {
    for (const [name, s] of coordinators) {
      expect(seconds(s.stop_grace_period ?? "10s"), name).toBeGreaterThan(ms(s.environment ?? {}, "SHUTDOWN_TIMEOUT_MS") / 1000 + 5);
    }
  });

  it("balances the coordinators on their port with HTTP/2, checking /readyz; Prometheus scrapes each", () => {
    const servers = [...haproxy.matchAll(/^\s+server (\S+) (\S+):(\d+)$/gm)];
    expect(servers.map((m) => m[1])).toEqual(coordinators.map(([name]) => name));
    for (const [, , host, port] of servers) {
      expect(coordinators.map(([name]) => name)).toContain(host);
      expect(Number(port)).toBe(Number(DEFAULTS.PORT));
    }
    expect(haproxy).toMatch(/default-server proto h2 /);
    expect(haproxy).toMatch(/http-check send meth GET uri \/readyz /);
    for (const f of ["prometheus.yml", "prometheus.auth.yml"]) {
      const prom = parse(read(`deploy/compose/${f}`)) as {
        scrape_configs: { static_configs: { targets: string[] }[] }[];
        rule_files: string[];
      };
      expect(prom.scrape_configs[0].static_configs[0].targets, f).toEqual(coordinators.map(([name]) => `${name}:${DEFAULTS.PORT}`));
      expect(prom.rule_files).toEqual(["/etc/prometheus/rules/*.yml"]);
    }
    expect(base.services.prometheus.volumes).toContain("../prometheus/leasehold.rules.yml:/etc/prometheus/rules/leasehold.rules.yml:ro");
  });

  it("mounts the overlays' secrets where the coordinators, Prometheus and HAProxy read them", () => {
    const auth = composeFile("docker-compose.auth.yml");
    for (const [name] of coordinators) {
      const file = auth.services[name].environment?.AUTH_TOKENS_FILE ?? "";
      expect(auth.services[name].secrets?.map((s) => `/run/secrets/${s}`)).toContain(file);
    }
    const promAuth = parse(read("deploy/compose/prometheus.auth.yml")) as {
      scrape_configs: { authorization: { credentials_file: string } }[];
    };
    expect(auth.services.prometheus.secrets?.map((s) => `/run/secrets/${s}`)).toContain(
      promAuth.scrape_configs[0].authorization.credentials_file,
    );
    expect(Object.keys(auth.secrets ?? {}).sort()).toEqual(["leasehold_tokens", "metrics_token"]);

    const tls = composeFile("docker-compose.tls.yml");
    const pem = tls.services.haproxy.environment?.LEASEHOLD_TLS_PEM ?? "";
    expect(tls.services.haproxy.secrets?.map((s) => `/run/secrets/${s}`)).toContain(pem);
    expect(haproxy).toContain('bind :8443 ssl crt "${LEASEHOLD_TLS_PEM}"');
  });
});
