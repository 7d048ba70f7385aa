// ListWorkloadKeys: a workload's concurrency keys with their pending and leased task counts and
// caps, counted when asked (the console's overview and operators; never on a claim's path).

import { validateListWorkloadKeys } from "../../../queue/flow-rules.js";
import { NotFoundError } from "../../../queue/errors.js";
import type { CallOptions, ListWorkloadKeysInput, ListWorkloadKeysResult } from "../../../queue/types.js";
import { requireWorkloadName } from "../../../queue/validation.js";
import type { StoreContext } from "../state/context.js";
import { withClient } from "../sql/db.js";
import { defineQuery } from "../sql/query.js";

/*
 * Every key with a pending task or a live lease, and every key with its own cap (a FULL JOIN
 * with workload_key_limits), busiest first. The unfinished tasks are read through the workload's
 * partial indexes (pending: tasks_claim_pending_idx; leased: tasks_leased_key_idx). Leased counts
 * live leases only, as the caps do. The workload row comes first so an unknown workload answers
 * no row at all (NOT_FOUND), and one without keys a single row with a null key; `total` (a
 * window over the rows before LIMIT) tells whether the list was cut.
 */
export const LIST_WORKLOAD_KEYS = defineQuery<
  { workload: string; limit: number },
  /** key null: the workload's one row when it has no key */
  { key: string | null; pending: number; leased: number; max_leased: number; own_limit: boolean; total: number }
>(
  "leasehold_list_workload_keys",
  `
WITH counts AS (
  SELECT t.concurrency_key AS key,
    count(*) FILTER (WHERE t.status = 'pending')::int AS pending,
    count(*) FILTER (WHERE t.status = 'leased' AND t.lease_expires_at > now())::int AS leased
  FROM tasks t
  WHERE t.workload = $1 AND t.status IN ('pending', 'leased')
  GROUP BY t.concurrency_key
), keys AS (
  SELECT coalesce(c.key, o.key) AS key, coalesce(c.pending, 0) AS pending, coalesce(c.leased, 0) AS leased, o.max_leased AS own
  FROM counts c
  FULL JOIN (SELECT key, max_leased FROM workload_key_limits WHERE workload = $1) o ON o.key = c.key
  WHERE o.key IS NOT NULL OR c.pending > 0 OR c.leased > 0
)
SELECT k.key, k.pending, k.leased, coalesce(k.own, w.max_leased_per_key, 0) AS max_leased, k.own IS NOT NULL AS own_limit,
  count(k.key) OVER ()::int AS total
FROM workloads w
LEFT JOIN keys k ON true
WHERE w.name = $1
ORDER BY k.leased DESC NULLS LAST, k.pending DESC, k.key
LIMIT $2`,
  (p) => [p.workload, p.limit],
);

export async function listWorkloadKeys(
  ctx: StoreContext,
  input: ListWorkloadKeysInput,
  opts: CallOptions,
): Promise<ListWorkloadKeysResult> {
  const { name, limit } = validateListWorkloadKeys(input, requireWorkloadName);
  const rows = await withClient(ctx.pool, opts.signal, (c) => LIST_WORKLOAD_KEYS.run(c, { workload: name, limit }));
  if (rows.length === 0) throw new NotFoundError("workload", name, "name");
  const keys = rows.flatMap((r) =>
    r.key === null ? [] : [{ key: r.key, pending: r.pending, leased: r.leased, maxLeased: r.max_leased, ownLimit: r.own_limit }],
  );
  return { keys, truncated: (rows[0].total ?? 0) > keys.length };
}
