// The web console: the static files Vite builds from ui/ into dist/ui, served under /ui/ on the
// API's one port. The page itself holds no data; it calls the API (Connect JSON) with the
// operator's token, so these files are open like /healthz. Hashed assets are immutable; index.html
// is revalidated on every load so a new build is picked up at once. The site root sends a browser
// to the console, the one page a person opening the coordinator's address is looking for.
import { existsSync } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import { HttpError } from "./errors.js";
import type { NodeRequest, NodeResponse } from "./node-http.js";
import { projectRoot } from "../project-root.js";
import type { RequestInfo } from "./request-info.js";

/** The built console of the project this module belongs to. */
export const UI_DIR = path.join(projectRoot(import.meta.url), "dist", "ui");

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".map": "application/json",
  ".txt": "text/plain; charset=utf-8",
  ".woff2": "font/woff2",
};

// The page loads only its own files: a script or style injected through job data could not run.
const CSP =
  "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'";

export type UiRoutes = (req: NodeRequest, res: NodeResponse, pathname: string, info: RequestInfo) => Promise<boolean>;

export function createUiRoutes(opts: { dir?: string } = {}): UiRoutes {
  const dir = opts.dir ?? UI_DIR;
  return async (req, res, pathname, info) => {
    if (pathname === "/" && (req.method === "GET" || req.method === "HEAD")) {
      info.protocol = "http";
      info.operation = "ui";
      // 302, not 308: the root is a convenience that may one day answer something else.
      res.statusCode = 302;
      res.setHeader("location", "/ui/");
      res.end();
      return true;
    }
    if (pathname !== "/ui" && !pathname.startsWith("/ui/")) return false;
    info.protocol = "http";
    info.operation = "ui";
    if (req.method !== "GET" && req.method !== "HEAD") {
      throw new HttpError(Code.Unimplemented, `method ${req.method} is not allowed on ${pathname}`, 405, { allow: "GET, HEAD" });
    }
    if (pathname === "/ui") {
      res.statusCode = 308;
      res.setHeader("location", "/ui/");
      res.end();
      return true;
    }
    const index = path.join(dir, "index.html");
    if (!existsSync(index)) {
      throw new HttpError(Code.Unavailable, "the web console is not built (npm run build builds it into dist/ui)", 503);
    }
    // Route paths inside the page are fragments (#/jobs/…), so any other path under /ui/ is a file.
    let rel: string;
    try {
      rel = decodeURIComponent(pathname.slice("/ui/".length));
    } catch {
      throw new HttpError(Code.NotFound, `no file ${pathname}`, 404);
    }
    let file = rel === "" ? index : path.resolve(dir, rel);
    if (file !== index && !file.startsWith(dir + path.sep)) throw new HttpError(Code.NotFound, `no file ${pathname}`, 404);
    try {
      if ((await stat(file)).isDirectory()) file = path.join(file, "index.html");
    } catch {
      throw new HttpError(Code.NotFound, `no file ${pathname}`, 404);
    }
    let body: Buffer;
    try {
      body = await readFile(file);
    } catch {
      throw new HttpError(Code.NotFound, `no file ${pathname}`, 404);
    }
    const ext = path.extname(file).toLowerCase();
    res.statusCode = 200;
    res.setHeader("content-type", CONTENT_TYPES[ext] ?? "application/octet-stream");
    res.setHeader("content-length", body.length);
    res.setHeader("x-content-type-options", "nosniff");
    // Vite names everything under assets/ by a hash of its content: a name never changes meaning.
    const hashed = path.relative(dir, file).split(path.sep)[0] === "assets";
    res.setHeader("cache-control", hashed ? "public, max-age=31536000, immutable" : "no-cache");
    if (ext === ".html") {
      res.setHeader("content-security-policy", CSP);
      res.setHeader("referrer-policy", "no-referrer");
    }
    if (req.method === "HEAD") res.end();
    else res.end(body);
    return true;
  };
}

/** The console's routes over the built dist/ui, for the API's dispatch. */
export const serveUi: UiRoutes = createUiRoutes();
