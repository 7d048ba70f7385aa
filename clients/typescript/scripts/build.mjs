// Builds the package from inside the repository (npm run build / npm pack): the TypeScript to
// dist/ with declarations, and the contract as a consumer needs it offline: proto/ holds
// queue.proto with the google/api files it imports (from the pinned google-proto-files package,
// as the coordinator's buf.yaml resolves them) and a buf.yaml, and leasehold.binpb is its built
// image for `buf breaking --against`. Uses the repository's own typescript, buf and protos.
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const root = path.resolve(pkg, "../..");
const bin = (name) => path.join(root, "node_modules", ".bin", name);
const run = (cmd, args) => execFileSync(cmd, args, { cwd: pkg, stdio: "inherit" });

rmSync(path.join(pkg, "dist"), { recursive: true, force: true });
run(bin("tsc"), ["-p", "tsconfig.json"]);

const proto = path.join(pkg, "proto");
rmSync(proto, { recursive: true, force: true });
cpSync(path.join(root, "proto", "leasehold"), path.join(proto, "leasehold"), { recursive: true });
mkdirSync(path.join(proto, "google", "api"), { recursive: true });
for (const f of ["annotations.proto", "http.proto"]) {
  cpSync(path.join(root, "node_modules", "google-proto-files", "google", "api", f), path.join(proto, "google", "api", f));
}
writeFileSync(
  path.join(proto, "buf.yaml"),
  [
    "# The Leasehold contract as one self-contained module: leasehold/ and the google/api files it imports",
    "# (vendored from google-proto-files). Lint and breaking checks look at leasehold/ only.",
    "version: v2",
    "lint:",
    "  use: [STANDARD]",
    "  ignore: [google]",
    "breaking:",
    "  use: [FILE]",
    "  ignore: [google]",
    "",
  ].join("\n"),
);
run(bin("buf"), ["build", "proto", "-o", "leasehold.binpb"]);
