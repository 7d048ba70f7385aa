// The images the deploy tests run. Where no registry answers, each official image is replaced by one
// built on this machine from Debian (scripts/images/image.sh: node, haproxy, prometheus;
// scripts/pg-images/image.sh: PostgreSQL), and the coordinator's image is built from
// deploy/container/Dockerfile on that Node base. The coordinator's image is tagged by a hash of
// everything it is built from (the context .dockerignore lets through, the base image, the build
// arguments), so a run whose sources did not change finds it built, and CI builds it once.
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import tls from "node:tls";
import { ROOT, docker, must, run } from "./docker.js";

const REPOSITORY = "leasehold/coordinator";

/** An image of scripts/images/image.sh (node, haproxy, prometheus) or scripts/pg-images/image.sh (postgres). */
export function supportImage(kind: "node" | "haproxy" | "prometheus" | "postgres", log: (m: string) => void): string {
  const [script, arg] = kind === "postgres" ? ["scripts/pg-images/image.sh", "17"] : ["scripts/images/image.sh", kind];
  const r = run(path.join(ROOT, script), [arg], { timeoutMs: 900_000 });
  for (const line of r.stderr.split("\n").filter(Boolean)) log(line);
  const image = r.stdout.trim().split("\n").pop();
  if (r.status !== 0 || !image) throw new Error(`${script} ${arg} exited ${r.status}:\n${r.stderr}`);
  return image;
}

/** The files of the build context: the allow-list of .dockerignore (`*`, then `!path` lines), walked. */
export function contextFiles(): string[] {
  const lines = readFileSync(path.join(ROOT, ".dockerignore"), "utf8")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"));
  if (lines[0] !== "*" || lines.slice(1).some((l) => !l.startsWith("!")))
    throw new Error(".dockerignore is expected to be an allow-list: `*`, then `!path` lines");
  const files: string[] = [];
  const walk = (rel: string) => {
    const abs = path.join(ROOT, rel);
    if (!existsSync(abs)) return;
    if (statSync(abs).isDirectory()) for (const name of readdirSync(abs).sort()) walk(path.posix.join(rel, name));
    else files.push(rel);
  };
  for (const l of lines.slice(1)) walk(l.slice(1).replace(/\/$/, ""));
  return files.sort();
}

/**
 * Certificates npm trusts here beyond Node's own roots (npm's `cafile`, NODE_EXTRA_CA_CERTS): a
 * registry reached through a proxy with a private CA. Handed to the build as NPM_CA_CERTS, which
 * reaches the build stages only. Credentials of the npm configuration are never passed.
 */
function extraCaCerts(): string {
  const files = [run("npm", ["config", "get", "cafile"]).stdout.trim(), process.env.NODE_EXTRA_CA_CERTS ?? ""].filter(
    (f) => f && f !== "null" && f !== "undefined" && existsSync(f),
  );
  const norm = (pem: string) => pem.replace(/\s+/g, "");
  const roots = new Set(tls.rootCertificates.map(norm));
  const extra = new Set<string>();
  for (const f of files)
    for (const pem of readFileSync(f, "utf8").match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [])
      if (!roots.has(norm(pem))) extra.add(pem);
  return [...extra].join("\n");
}

/** Build arguments that reach npm: a private CA, another registry, the proxies of the environment. */
function npmBuildArgs(): Record<string, string> {
  const args: Record<string, string> = {};
  const ca = extraCaCerts();
  if (ca) args.NPM_CA_CERTS = ca;
  const registry = run("npm", ["config", "get", "registry"]).stdout.trim();
  if (registry && !/^https:\/\/registry\.npmjs\.org\/?$/.test(registry)) args.NPM_CONFIG_REGISTRY = registry;
  for (const name of ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"])
    if (process.env[name]) args[name] = process.env[name] as string;
  return args;
}

export interface CoordinatorImage {
  image: string;
  /** Seconds the build took; 0 when the image was there already. */
  buildSeconds: number;
  /** Bytes, as `docker image inspect` reports (every layer, the base's included). */
  size: number;
}

/** The coordinator's image for the current sources on `base`, built when no image has their hash. */
export function coordinatorImage(base: string, log: (m: string) => void): CoordinatorImage {
  const buildArgs = { BASE: base, ...npmBuildArgs() };
  const hash = createHash("sha256");
  hash.update(`base ${docker("image", "inspect", "--format", "{{.Id}}", base)}\n`);
  for (const [k, v] of Object.entries(buildArgs).sort()) hash.update(`arg ${k}=${v}\n`);
  for (const f of contextFiles()) hash.update(`file ${f}\n`).update(readFileSync(path.join(ROOT, f)));
  const image = `${REPOSITORY}:ctx-${hash.digest("hex").slice(0, 16)}`;
  const size = () => Number(docker("image", "inspect", "--format", "{{.Size}}", image));
  if (run("docker", ["image", "inspect", image]).status === 0) {
    log(`coordinator image ${image} (built earlier from these sources)`);
    return { image, buildSeconds: 0, size: size() };
  }
  log(`building ${image} from deploy/container/Dockerfile on ${base}`);
  const started = performance.now();
  must(
    "docker",
    [
      "build",
      "-f",
      "deploy/container/Dockerfile",
      ...Object.entries(buildArgs).flatMap(([k, v]) => ["--build-arg", `${k}=${v}`]),
      "-t",
      image,
      ".",
    ],
    { timeoutMs: 1_800_000 },
  );
  const buildSeconds = (performance.now() - started) / 1000;
  // Older builds of other sources: removed, so the engine does not fill up over many runs.
  for (const old of docker("image", "ls", REPOSITORY, "--format", "{{.Repository}}:{{.Tag}}").split("\n"))
    if (old.startsWith(`${REPOSITORY}:ctx-`) && old !== image) run("docker", ["rmi", old]);
  log(`built ${image} in ${buildSeconds.toFixed(0)} s`);
  return { image, buildSeconds, size: size() };
}
