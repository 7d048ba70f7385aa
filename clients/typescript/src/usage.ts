// Usage counters a handler reports with its result or its failure: checked in the worker before
// they are sent, so a bad counter fails the task with a message that names it rather than a
// refused report.

/**
 * What an attempt used, as named counters (`{ gpu_ms: 1200, tokens: 5000 }`): keys
 * `^[a-z][a-z0-9_.]{0,62}$`, at most 32, integers from 0 to Number.MAX_SAFE_INTEGER (a bigint in
 * that range too). The coordinator records it once with the accepted report and sums it into the
 * job's usage; a result sent again must carry the same usage.
 */
export type Usage = Readonly<Record<string, number | bigint>>;

const KEY = /^[a-z][a-z0-9_.]{0,62}$/;
const MAX_COUNTERS = 32;
const MAX_VALUE = BigInt(Number.MAX_SAFE_INTEGER);

/** `usage` as the message's map (int64 as bigint); a RangeError naming the first counter the coordinator would refuse. */
export function usageMessage(usage: Usage | undefined, where: string): { [key: string]: bigint } {
  const out: { [key: string]: bigint } = {};
  if (usage === undefined) return out;
  const entries = Object.entries(usage);
  if (entries.length > MAX_COUNTERS) throw new RangeError(`${where}: at most ${MAX_COUNTERS} counters, not ${entries.length}`);
  for (const [key, value] of entries) {
    if (!KEY.test(key)) throw new RangeError(`${where}: counter name ${JSON.stringify(key)} must match ^[a-z][a-z0-9_.]{0,62}$`);
    const ok = typeof value === "bigint" || (typeof value === "number" && Number.isInteger(value));
    const n = ok ? BigInt(value) : -1n;
    if (n < 0n || n > MAX_VALUE) throw new RangeError(`${where}[${key}]: an integer from 0 to ${MAX_VALUE}, not ${String(value)}`);
    out[key] = n;
  }
  return out;
}

/** A usage map the coordinator returned (Job.usage, Task.usage, TaskAttempt.usage) as plain numbers. */
export function usageNumbers(usage: { readonly [key: string]: bigint } | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, value] of Object.entries(usage ?? {})) out[key] = Number(value);
  return out;
}
