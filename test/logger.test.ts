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
