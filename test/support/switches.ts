// The switches vitest.config.ts sets per project (DIRECT_UNARY=false and COALESCE_MIX=false for `router`,
// COALESCE=false and CLAIM_HINTS=false for `one-statement-per-call`, FLOW_CLAIM_HINTS=false for `flow-claim-as-before`), read by the configuration's own parsers so a
// test's store and server follow them with the coordinator's rule. The store and the server
// read no environment themselves: every test passes these to them.
import { parseClaimHints, parseCoalescing, parseDirectUnary, parseFlowClaimHints } from "../../src/config/index.js";

export interface TestSwitches {
  /** pass as createApiServer's directUnary */
  directUnary: boolean;
  /** pass as PostgresQueue's coalescing */
  coalescing: { maxBatch: number; mixResults: boolean; lingerMs: number } | false;
  /** pass as PostgresQueue's claimHints */
  claimHints: boolean;
  /** pass as PostgresQueue's flowClaimHints */
  flowClaimHints: boolean;
}

export function testSwitches(env: NodeJS.ProcessEnv = process.env): TestSwitches {
  return {
    directUnary: parseDirectUnary(env),
    coalescing: parseCoalescing(env),
    claimHints: parseClaimHints(env),
    flowClaimHints: parseFlowClaimHints(env),
  };
}

/** This process's switches, read once. */
export const SWITCHES: TestSwitches = testSwitches();

/**
 * The same switches as a spawned coordinator's environment: the variables of this project's run
 * (DIRECT_UNARY, COALESCE*, CLAIM_HINTS, FLOW_CLAIM_HINTS) that are set, so a coordinator process follows the run as
 * an in-process store and server do.
 */
export function switchEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(env))
    if (v !== undefined && /^(DIRECT_UNARY|COALESCE\w*|CLAIM_HINTS|FLOW_CLAIM_HINTS)$/.test(k)) out[k] = v;
  return out;
}
