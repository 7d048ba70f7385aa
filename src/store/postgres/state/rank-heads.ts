// The heads of fair ranks this coordinator has found, per workload and priority: the rank of the
// first pending task a CreateJob of a keyed workload saw at its priority, or with none pending the
// furthest rank any key had got (create-job-core.ts, rank_head). Each session also keeps the last
// head it found (a session setting); a session of a pool of many was last used many jobs ago, and
// under a held MVCC horizon every task claimed since is a dead entry it walks on its way to the
// head (4,701 buffers a CreateJob after ten minutes of bench:horizon's keyed shape). A head found
// by any session is a valid start for every other:
// ranks below it are only taken by tasks that were leased and came back (flow-control-claim.md,
// "Under a held horizon"), so the statement starts from the further of the two.

/** Workloads and priorities kept, at most: past it the map starts again (a head missing costs one walk, never a wrong rank). */
const MAX_HEADS = 10_000;

export class RankHeads {
  private readonly heads = new Map<string, bigint>();
  private readonly text = new Map<string, string>();

  /** The furthest head found for the workload at the priority, as text (a bigint), or null for none. */
  get(workload: string, priority: number): string | null {
    return this.text.get(key(workload, priority)) ?? null;
  }

  /** A head a statement found or noted (null: none, no key of the workload has a rank yet). Heads only move forward. */
  learn(workload: string, priority: number, head: string | null): void {
    if (head === null) return;
    const k = key(workload, priority);
    const found = BigInt(head);
    const known = this.heads.get(k);
    if (known !== undefined && known >= found) return;
    if (this.heads.size >= MAX_HEADS && known === undefined) {
      this.heads.clear();
      this.text.clear();
    }
    this.heads.set(k, found);
    this.text.set(k, head);
  }
}

const key = (workload: string, priority: number) => `${priority}\u0000${workload}`;
