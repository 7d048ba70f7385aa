// The per-project switches of vitest.config.ts reach the stores and servers the tests build:
// the store and the server read no environment, so a switch the test support dropped would
// silently run the `router` and `one-statement-per-call` projects as `direct`.
import { describe, expect, it } from "vitest";
import { TEST_STORE_OPTIONS } from "../support/queue.js";
import { SWITCHES, testSwitches } from "../support/switches.js";

describe("test switches", () => {
  it("follow the project this file runs in", ({ task }) => {
    const project = task.file.projectName;
    expect(["direct", "router", "one-statement-per-call"]).toContain(project);
    expect(SWITCHES.directUnary).toBe(project !== "router");
    expect(SWITCHES.coalescing).toEqual(
      project === "one-statement-per-call" ? false : { maxBatch: 64, mixResults: project !== "router", lingerMs: 4 },
    );
    expect(TEST_STORE_OPTIONS.coalescing).toEqual(SWITCHES.coalescing);
    expect(SWITCHES.claimHints).toBe(project !== "one-statement-per-call");
    expect(TEST_STORE_OPTIONS.claimHints).toBe(SWITCHES.claimHints);
    expect(SWITCHES.flowClaimHints).toBe(true);
    expect(TEST_STORE_OPTIONS.flowClaimHints).toBe(SWITCHES.flowClaimHints);
  });

  it("are read with the configuration's rule", () => {
    expect(testSwitches({})).toEqual({
      directUnary: true,
      coalescing: { maxBatch: 64, mixResults: true, lingerMs: 4 },
      claimHints: true,
      flowClaimHints: true,
    });
    expect(testSwitches({ DIRECT_UNARY: "false", COALESCE: "false", CLAIM_HINTS: "false", FLOW_CLAIM_HINTS: "false" })).toEqual({
      directUnary: false,
      coalescing: false,
      claimHints: false,
      flowClaimHints: false,
    });
    expect(() => testSwitches({ CLAIM_HINTS: "no" })).toThrow(/^CLAIM_HINTS: /);
    expect(testSwitches({ COALESCE_MAX_BATCH: "8" }).coalescing).toEqual({ maxBatch: 8, mixResults: true, lingerMs: 4 });
    expect(testSwitches({ COALESCE_MIX: "false" }).coalescing).toEqual({ maxBatch: 64, mixResults: false, lingerMs: 4 });
    expect(testSwitches({ COALESCE_LINGER_MS: "0" }).coalescing).toEqual({ maxBatch: 64, mixResults: true, lingerMs: 0 });
    expect(() => testSwitches({ COALESCE_LINGER_MS: "-1" })).toThrow(/^COALESCE_LINGER_MS: /);
    expect(() => testSwitches({ COALESCE_MIX: "no" })).toThrow(/^COALESCE_MIX: /);
    expect(() => testSwitches({ DIRECT_UNARY: "off" })).toThrow(/^DIRECT_UNARY: /);
  });
});
