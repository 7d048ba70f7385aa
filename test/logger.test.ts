import { spawn } from "node:child_process";
import { Writable } from "node:stream";
import { pino } from "pino";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createLogger, isoTime } from "../src/logger.js";

describe("the logger's timestamp", () => {
  afterEach(() => vi.restoreAllMocks());

  it("is pino's isoTime text, made again when the millisecond changes", () => {
    const now = vi.spyOn(Date, "now");
    for (const ms of [0, 1_764_510_000_123, 1_764_510_000_123, 1_764_510_000_124, 1_764_510_000_123, 253_402_300_799_999]) {
      now.mockReturnValue(ms);
      expect(isoTime()).toBe(pino.stdTimeFunctions.isoTime());
    }
  });

  it("stamps each log line with its time", () => {
    const lines: string[] = [];
    const sink = new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) });
    const logger = createLogger("info", sink);
    const now = vi.spyOn(Date, "now");
    now.mockReturnValue(1_764_510_000_123);
    logger.info("one");
    now.mockReturnValue(1_764_510_000_999);
    logger.info("two");
    expect(lines.map((l) => (JSON.parse(l) as { time: string }).time)).toEqual(["2025-11-30T13:40:00.123Z", "2025-11-30T13:40:00.999Z"]);
  });
});

describe("the logger's standard output", () => {
  /** Runs a script that logs through createLogger's own stdout; resolves each line with the ms since start at which it arrived. */
  function run(script: string): Promise<{ line: string; at: number; exited: boolean }[]> {
    const lines: { line: string; at: number; exited: boolean }[] = [];
    const started = Date.now();
    let exited = false;
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let buf = "";
    child.stdout.on("data", (c: Buffer) => {
      buf += c.toString();
      for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
        lines.push({ line: buf.slice(0, i), at: Date.now() - started, exited });
        buf = buf.slice(i + 1);
      }
    });
    return new Promise((resolve, reject) => {
      child.once("error", reject);
      child.once("exit", () => (exited = true));
      child.once("close", () => resolve(lines));
    });
  }

  it("writes a line while the process lives, not only when its buffer fills", async () => {
    // One short line, then, a second later, a line written to fd 1 directly (past the logger's
    // buffer): the logged line must already be out by then, not held until the exit.
    const lines = await run(
      `import { writeSync } from "node:fs"; import { createLogger } from "./src/logger.ts"; createLogger("info").info("alone"); setTimeout(() => { writeSync(1, "later\\n"); process.exit(0); }, 1000);`,
    );
    expect(lines.map((l) => l.line)).toHaveLength(2);
    expect(JSON.parse(lines[0].line)).toMatchObject({ msg: "alone" });
    expect(lines[1].line).toBe("later");
  }, 30_000);

  it("writes every buffered line when the process exits", async () => {
    const lines = await run(
      `import { createLogger } from "./src/logger.ts"; const l = createLogger("info"); for (let i = 0; i < 50; i++) l.info({ i }, "line"); process.exit(3);`,
    );
    expect(lines.map((l) => (JSON.parse(l.line) as { i: number }).i)).toEqual(Array.from({ length: 50 }, (_, i) => i));
  }, 30_000);
});
