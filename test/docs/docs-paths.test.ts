// The READMEs (the project's, the Python package's and its examples') and docs/*.md name files,
// link pages and anchors, and quote the versions of a few packages; this keeps every one of them
// true, so a renamed file or a moved section fails here with a list of what is missing. No
// database: it reads the tree.
//
// What counts as a reference:
// - a markdown link or image to a local target: the file (or directory) must exist, relative to
//   the page, and an anchor into a markdown page must be one of its headings;
// - inside inline code or a fenced block, any token that looks like a repository path: a word
//   with a slash whose first segment is a top-level directory of the repository (`src/…`,
//   `test/…`, `.ci/run`, `deploy/ha/*.in`); it must exist (a `*` must match something);
// - inline code that is a file name alone (`store.ts`, `package.json`): some file in the
//   repository must have that name;
// - a dependency of package.json followed by a version (`vite` 8.3.0): the version must be the
//   one package-lock.json installs;
// - `npm run NAME`: package.json must have the script;
// - docs/configuration.md's table: one row per variable of CONFIG_VARIABLES, with its default, and
//   no row for a variable the coordinator does not read.
// Paths that .gitignore covers (built or local state, such as `dist/ui` or
// `deploy/ha/.state.json`) and tokens with placeholders (`<name>`, `{id}`, `$VAR`, `…`) are not
// checked. docs/performance-log.md is history: its code names files as they were then, so only
// its links are checked.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { CONFIG_VARIABLES } from "../../src/config/index.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const PAGES = [
  "README.md",
  "clients/python/README.md",
  "examples/python/README.md",
  ...readdirSync(path.join(ROOT, "docs"))
    .filter((f) => f.endsWith(".md"))
    .sort()
    .map((f) => `docs/${f}`),
];
const HISTORY = new Set(["docs/performance-log.md"]);

/** .gitignore: names ignored wherever they appear, and paths ignored from the root. */
function ignored(): { names: RegExp[]; paths: string[] } {
  const names: RegExp[] = [];
  const paths: string[] = [];
  for (const raw of readFileSync(path.join(ROOT, ".gitignore"), "utf8").split("\n")) {
    const line = raw.trim().replace(/\/$/, "");
    if (!line || line.startsWith("#")) continue;
    if (line.includes("/")) paths.push(line.replace(/^\//, ""));
    else names.push(globRegExp(line));
  }
  return { names, paths };
}

function globRegExp(glob: string): RegExp {
  return new RegExp(
    `^${glob
      .split("*")
      .map((s) => s.replace(/[.+?^${}()|[\]\\]/g, "\\$&"))
      .join("[^/]*")}$`,
  );
}

const IGNORED = ignored();
const isIgnored = (rel: string) => {
  const segments = rel.replace(/\/$/, "").split("/");
  return segments.some((s) => IGNORED.names.some((re) => re.test(s))) || IGNORED.paths.some((p) => rel === p || rel.startsWith(`${p}/`));
};

const TOP_DIRS = new Set(
  readdirSync(ROOT, { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== ".git" && !isIgnored(d.name))
    .map((d) => d.name),
);

/**
 * Names that a package's own .gitignore covers (say `leasehold.binpb`, which the TypeScript client
 * builds at pack time): a page may name such a file, though no checkout holds it.
 */
const PACKAGE_IGNORED_NAMES: RegExp[] = readdirSync(path.join(ROOT, "clients"), { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(path.join(ROOT, "clients", d.name, ".gitignore")))
  .flatMap((d) => readFileSync(path.join(ROOT, "clients", d.name, ".gitignore"), "utf8").split("\n"))
  .map((line) => line.trim().replace(/\/$/, ""))
  .filter((line) => line && !line.startsWith("#") && !line.includes("/"))
  .map(globRegExp);

/** Every file's name in the repository (outside ignored and git's own directories). */
function fileNames(): Set<string> {
  const names = new Set<string>();
  const walk = (rel: string) => {
    for (const d of readdirSync(path.join(ROOT, rel), { withFileTypes: true })) {
      const child = rel ? `${rel}/${d.name}` : d.name;
      if (d.name === ".git" || isIgnored(child)) continue;
      if (d.isDirectory()) walk(child);
      else names.add(d.name);
    }
  };
  walk("");
  return names;
}
const FILE_NAMES = fileNames();

/** Does a repository path exist? A `*` in its last segment must match at least one entry. */
function exists(rel: string): boolean {
  const clean = rel.replace(/\/$/, "");
  if (!clean.includes("*")) return existsSync(path.join(ROOT, clean));
  const dir = path.dirname(clean);
  if (dir.includes("*") || !existsSync(path.join(ROOT, dir)) || !statSync(path.join(ROOT, dir)).isDirectory()) return false;
  const re = globRegExp(path.basename(clean));
  return readdirSync(path.join(ROOT, dir)).some((f) => re.test(f));
}

interface Page {
  file: string;
  /** Prose lines (fences removed), with their line numbers. */
  prose: { n: number; text: string }[];
  /** Fenced code lines, with their line numbers. */
  fenced: { n: number; text: string }[];
  headings: Set<string>;
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, each space a hyphen; repeats get -1, -2. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

function readPage(file: string): Page {
  const page: Page = { file, prose: [], fenced: [], headings: new Set() };
  const seen = new Map<string, number>();
  let fence: string | null = null;
  readFileSync(path.join(ROOT, file), "utf8")
    .split("\n")
    .forEach((text, i) => {
      const n = i + 1;
      const marker = /^\s*(```|~~~)/.exec(text);
      if (marker) {
        if (fence === null) fence = marker[1];
        else if (marker[1] === fence) fence = null;
        return;
      }
      if (fence !== null) {
        page.fenced.push({ n, text });
        return;
      }
      page.prose.push({ n, text });
      const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(text);
      if (heading) {
        const base = slug(heading[1]);
        const count = seen.get(base) ?? 0;
        seen.set(base, count + 1);
        page.headings.add(count === 0 ? base : `${base}-${count}`);
      }
    });
  return page;
}

const PAGE_CACHE = new Map<string, Page>();
const page = (file: string) => {
  let p = PAGE_CACHE.get(file);
  if (!p) PAGE_CACHE.set(file, (p = readPage(file)));
  return p;
};

const PLACEHOLDER = /[<>{}$…]|\.\.\./;
const REPO_PATH = /^\.?[\w-]+(\/[\w.*@+-]*)+$/;
const FILE_NAME = /^[\w.*-]+\.(ts|js|mjs|cjs|sql|py|proto|sh|json|yaml|yml|md|in|toml|html|css|txt|binpb)$/;

/** Tokens of a piece of code that look like repository paths. */
function codePaths(code: string): string[] {
  return code
    .split(/[\s()[\],;'"=|]+/)
    .map((t) => t.replace(/[.:,;]+$/, "").replace(/^\.\//, ""))
    .filter((t) => !PLACEHOLDER.test(t) && REPO_PATH.test(t) && TOP_DIRS.has(t.split("/")[0]));
}

/** Inline code spans of a prose line (the text between single backticks). */
const codeSpans = (line: string) => [...line.matchAll(/`([^`]+)`/g)].map((m) => m[1]);

function missingPaths(file: string): string[] {
  const p = page(file);
  const problems: string[] = [];
  const check = (n: number, token: string) => {
    if (!isIgnored(token) && !exists(token)) problems.push(`${file}:${n}: \`${token}\` does not exist`);
  };
  if (!HISTORY.has(file)) {
    for (const { n, text } of p.fenced) for (const t of codePaths(text)) check(n, t);
    for (const { n, text } of p.prose)
      for (const span of codeSpans(text)) {
        const t = span.trim();
        for (const token of codePaths(t)) check(n, token);
        if (FILE_NAME.test(t) && !isIgnored(t) && !PACKAGE_IGNORED_NAMES.some((re) => re.test(t))) {
          const re = globRegExp(t);
          if (![...FILE_NAMES].some((name) => re.test(name))) problems.push(`${file}:${n}: no file is named \`${t}\``);
        }
      }
  }
  for (const { n, text } of p.prose) {
    const withoutCode = text.replace(/`[^`]*`/g, "");
    for (const m of withoutCode.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = m[1];
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
      const [rel, anchor] = target.split("#", 2) as [string, string | undefined];
      const resolved = rel === "" ? file : path.posix.normalize(path.posix.join(path.posix.dirname(file), decodeURI(rel)));
      if (resolved.startsWith("..") || !existsSync(path.join(ROOT, resolved))) {
        problems.push(`${file}:${n}: link to \`${target}\`: ${resolved} does not exist`);
        continue;
      }
      if (anchor !== undefined && resolved.endsWith(".md") && !page(resolved).headings.has(anchor))
        problems.push(`${file}:${n}: link to \`${target}\`: ${resolved} has no heading #${anchor}`);
    }
  }
  return problems;
}

/** The installed version of each direct dependency, from package-lock.json. */
function lockedVersions(): Map<string, string> {
  const pkg = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as Record<string, Record<string, string> | undefined>;
  const lock = JSON.parse(readFileSync(path.join(ROOT, "package-lock.json"), "utf8")) as {
    packages: Record<string, { version?: string } | undefined>;
  };
  const versions = new Map<string, string>();
  for (const name of [...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.devDependencies ?? {})]) {
    const version = lock.packages[`node_modules/${name}`]?.version;
    if (version) versions.set(name, version);
  }
  return versions;
}

function wrongVersions(file: string, versions: Map<string, string>): string[] {
  if (HISTORY.has(file)) return [];
  const problems: string[] = [];
  for (const { n, text } of page(file).prose)
    for (const [name, locked] of versions) {
      const escaped = name.replace(/[.+?^${}()|[\]\\/]/g, "\\$&");
      const re = new RegExp(`(?<![\\w@/-])\`?${escaped}\`?\\s+\\**v?(\\d+\\.\\d+\\.\\d+(?:-[0-9A-Za-z.]*[0-9A-Za-z])?)`, "g");
      for (const m of text.matchAll(re))
        if (m[1] !== locked) problems.push(`${file}:${n}: ${name} ${m[1]}, but package-lock.json installs ${locked}`);
    }
  return problems;
}

/** `npm run NAME` where package.json has no such script. */
function unknownScripts(file: string): string[] {
  if (HISTORY.has(file)) return [];
  const pkg = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> };
  const p = page(file);
  const problems: string[] = [];
  for (const { n, text } of [...p.prose, ...p.fenced])
    for (const m of text.matchAll(/npm run (?:-[a-z-]+ )*([\w:.-]+)/g))
      if (!(m[1] in pkg.scripts)) problems.push(`${file}:${n}: \`npm run ${m[1]}\`, but package.json has no script "${m[1]}"`);
  return problems;
}

describe("docs name what is in the repository", () => {
  it("reads the README and every page under docs/", () => {
    expect(PAGES).toContain("README.md");
    expect(PAGES.length).toBeGreaterThan(5);
    expect(TOP_DIRS.has("src") && TOP_DIRS.has("test") && TOP_DIRS.has(".ci")).toBe(true);
    expect(TOP_DIRS.has("node_modules")).toBe(false);
  });

  it("finds a missing path, file name, page and anchor (the checker itself)", () => {
    expect(codePaths("npm run test:pg -- 17 test/store/queue.test.ts")).toEqual(["test/store/queue.test.ts"]);
    expect(codePaths("migrations/<timestamp>_x.sql s3://bucket/a dist/ui")).toEqual([]);
    expect(exists("deploy/ha/*.in")).toBe(true);
    expect(exists("src/api/no-such-file.ts")).toBe(false);
    expect(exists("src/queue/*.nothing")).toBe(false);
    expect(isIgnored("deploy/ha/.state.json")).toBe(true);
    expect(slug("The event log in partitions")).toBe("the-event-log-in-partitions");
    expect(slug("`npm run bench:peers`: Leasehold beside peers")).toBe("npm-run-benchpeers-leasehold-beside-peers");
  });

  it.each(PAGES)("every repository path and local link in %s exists", (file) => {
    expect(missingPaths(file), `missing in ${file} (rename the reference, or restore the file)`).toEqual([]);
  });

  it.each(PAGES)("every npm script named in %s exists", (file) => {
    expect(unknownScripts(file)).toEqual([]);
  });

  it.each(PAGES)("every dependency version quoted in %s is the lockfile's", (file) => {
    expect(wrongVersions(file, lockedVersions())).toEqual([]);
  });
});

describe("docs/configuration.md", () => {
  const rows = readFileSync(path.join(ROOT, "docs", "configuration.md"), "utf8")
    .split("\n")
    .map((l) => /^\| `([A-Z][A-Z0-9_]*)` \|([^|]*)\|/.exec(l))
    .filter((m) => m !== null)
    .map((m) => ({ name: m[1], fallback: m[2].trim() }));

  it("lists every variable the coordinator reads, with its default", () => {
    for (const [name, fallback] of CONFIG_VARIABLES) {
      const row = rows.find((r) => r.name === name);
      expect(row, `no row for ${name}`).toBeDefined();
      expect(row?.fallback, name).toContain(fallback);
    }
  });

  it("lists no variable the coordinator does not read", () => {
    const known = new Set<string>(CONFIG_VARIABLES.map(([name]) => name));
    expect(rows.map((r) => r.name).filter((name) => !known.has(name))).toEqual([]);
  });
});
