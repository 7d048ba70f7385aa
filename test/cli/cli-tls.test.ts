// The CLI against a coordinator that serves TLS with a self-signed certificate (made here by
// openssl) and requires a token: the token from --token-file or LEASEHOLD_TOKEN (never on the
// command line), the certificate trusted with --ca-file or LEASEHOLD_CA_FILE, a certificate it
// does not trust named as a TLS problem, and a bad option answered with that command's usage only.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_VARIABLES } from "../../src/config/index.js";
import { createTestDatabase, type TestDatabase } from "../support/db.js";
import { killAll, spawnCoordinator } from "../support/process.js";
import { sha } from "../support/queue.js";
import { runCli } from "../support/cli.js";

const TOKEN = "cli-tls-admin-token";

let db: TestDatabase;
let tmp: string;
let base: string;
let certFile: string;

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), "leasehold-cli-tls-"));
  certFile = path.join(tmp, "cert.pem");
  const keyFile = path.join(tmp, "key.pem");
  execFileSync(
    "openssl",
    ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days", "1", "-keyout", keyFile, "-out", certFile].concat([
      "-addext",
      "subjectAltName=DNS:localhost,IP:127.0.0.1",
    ]),
    { stdio: "ignore" },
  );
  writeFileSync(path.join(tmp, "tokens"), `${sha(TOKEN)} admin\n`);
  writeFileSync(path.join(tmp, "token"), `${TOKEN}\n`);
  writeFileSync(path.join(tmp, "not-a-cert.pem"), "hello\n");
  db = await createTestDatabase();
  base = await spawnCoordinator({
    DATABASE_URL: db.url,
    PORT: "0",
    TLS_CERT_FILE: certFile,
    TLS_KEY_FILE: keyFile,
    AUTH_TOKENS_FILE: path.join(tmp, "tokens"),
  }).listening();
});

afterAll(async () => {
  await killAll();
  await db?.drop();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The CLI as a child process, with none of its variables but those in `env`. */
function cli(args: string[], env: Record<string, string> = {}) {
  const childEnv: NodeJS.ProcessEnv = { ...process.env };
  for (const [name] of CLI_VARIABLES) delete childEnv[name];
  return runCli(args, { env: { ...childEnv, ...env } });
}

describe("the CLI over TLS with a token it does not take on the command line", () => {
  it("names an untrusted certificate as a TLS problem, in one line that says how to trust it", async () => {
    expect(base).toMatch(/^https:\/\//);
    const r = await cli(["--url", base, "workload", "list"], { LEASEHOLD_TOKEN: TOKEN });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/^leasehold: TLS: self-signed certificate \(pass --ca-file FILE, or set LEASEHOLD_CA_FILE, .*\)\n$/);
  });

  it("trusts the certificate of --ca-file or LEASEHOLD_CA_FILE, and takes the token from LEASEHOLD_TOKEN or --token-file", async () => {
    const [envBoth, fileOptions, noToken] = await Promise.all([
      cli(["--url", base, "workload", "list"], { LEASEHOLD_TOKEN: TOKEN, LEASEHOLD_CA_FILE: certFile }),
      cli(["--url", base, "--ca-file", certFile, "--token-file", path.join(tmp, "token"), "workload", "list"]),
      cli(["--url", base, "--ca-file", certFile, "workload", "list"]),
    ]);
    expect([envBoth.code, envBoth.stderr]).toEqual([0, ""]);
    expect([fileOptions.code, fileOptions.stderr]).toEqual([0, ""]);
    expect(fileOptions.stdout).toBe(envBoth.stdout);
    // Without any token the coordinator refuses: the token above came from the variable and the file.
    expect(noToken.code).toBe(1);
    expect(noToken.stderr).toMatch(/^leasehold: unauthenticated: /);
  });

  it("refuses --token with --token-file, an empty token file and a CA file that holds no certificate, each in one line", async () => {
    const empty = path.join(tmp, "empty");
    writeFileSync(empty, "\n");
    const [both, emptyFile, notCert, missingCa] = await Promise.all([
      cli(["--url", base, "--token", TOKEN, "--token-file", path.join(tmp, "token"), "workload", "list"]),
      cli(["--url", base, "--token-file", empty, "workload", "list"]),
      cli(["--url", base, "--ca-file", path.join(tmp, "not-a-cert.pem"), "workload", "list"], { LEASEHOLD_TOKEN: TOKEN }),
      cli(["--url", base, "workload", "list"], { LEASEHOLD_TOKEN: TOKEN, LEASEHOLD_CA_FILE: path.join(tmp, "missing.pem") }),
    ]);
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/^leasehold: --token and --token-file: give one of them\n/);
    expect(emptyFile.code).toBe(1);
    expect(emptyFile.stderr).toBe(`leasehold: --token-file: ${empty} has no token on its first line\n`);
    expect(notCert.code).toBe(1);
    expect(notCert.stderr).toBe(`leasehold: --ca-file: ${path.join(tmp, "not-a-cert.pem")} is not a PEM certificate\n`);
    expect(missingCa.code).toBe(1);
    expect(missingCa.stderr).toBe(`leasehold: LEASEHOLD_CA_FILE: cannot read ${path.join(tmp, "missing.pem")} (ENOENT)\n`);
  });
});

describe("bad usage", () => {
  it("a bad option value prints one line and that command's usage, not every command's", async () => {
    const [badValue, unknownOption, missingArgument] = await Promise.all([
      cli(["--url", base, "jobs", "list", "--status", "done"]),
      cli(["--url", base, "job", "get", "x", "--bogus"]),
      cli(["job", "get"]),
    ]);
    for (const r of [badValue, unknownOption, missingArgument]) {
      expect(r.code).toBe(2);
      expect(r.stdout).toBe("");
      expect(r.stderr).not.toContain("exit codes:");
      expect(r.stderr).not.toContain("workload put");
      expect(r.stderr.split("\n").length).toBeLessThan(10);
    }
    expect(badValue.stderr).toMatch(/^leasehold: --status must be one of pending, .*, not "done"\nusage: leasehold .*\n {2}jobs list\b/);
    expect(unknownOption.stderr).toMatch(/^leasehold: unknown option '--bogus'\nusage: leasehold .*\n {2}job get ID /);
    expect(missingArgument.stderr).toMatch(/^leasehold: missing required argument 'ID'\nusage: leasehold .*\n {2}job get ID /);
  });
});
