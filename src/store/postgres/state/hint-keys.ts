// Positions in claim order, shared by the plain claim's hints (claim-hints.ts) and the flow
// lanes' (flow-hints.ts): the key a hint keeps, the row it learns from, their order, and the head a
// wake-up names.

/** What a hint learns from a claimed row (claim.ts' ClaimedRow has these and more). */
export interface HintRow {
  workload: string;
  priority: number;
  fair_rank?: string | number;
  created_at: Date;
  /** created_at in microseconds since the epoch (text), as the claim statements return it */
  created_us?: string | null;
  chunk_index: number;
  /** null for a reclaimed lease, which says nothing of the pending tasks */
  pickup_seconds: number | null;
}

/** A position in claim order; c is created_at in microseconds since the epoch. */
export interface HintKey {
  p: number;
  r: string;
  c: number;
  i: number;
}

/** Whether a comes before b in claim order (priority DESC, fair_rank, created_at, chunk_index). */
export function before(a: HintKey, b: HintKey): boolean {
  if (a.p !== b.p) return a.p > b.p;
  const ar = BigInt(a.r);
  const br = BigInt(b.r);
  if (ar !== br) return ar < br;
  if (a.c !== b.c) return a.c < b.c;
  return a.i < b.i;
}

/**
 * The head a wake-up names: `priority;fair_rank;epoch_us[;chunk[;ms]]`, the claim-order key of the
 * lowest task it announces, and for a retry in backoff the milliseconds until it falls due.
 */
export function parseHead(head: string | undefined): { key: HintKey; inMs: number } | undefined {
  if (!head) return undefined;
  const [p, r, c, i, ms] = head.split(";");
  const int = (s: string | undefined) => /^-?\d+$/.test(s ?? "");
  if (!int(p) || !int(r) || !int(c) || (i !== undefined && !int(i)) || (ms !== undefined && !int(ms))) return undefined;
  return { key: { p: Number(p), r, c: Number(c), i: i === undefined ? 0 : Number(i) }, inMs: ms === undefined ? 0 : Number(ms) };
}
