// A job's money facts as the console shows them: its account, billing context, usage totals and
// settlement (on the job page and in the settlements view), and an attempt's usage.
import type { Job } from "../../../gen/leasehold/queue/v1/queue_pb.js";
import { h, when } from "../dom.js";
import { FINAL_JOB, ts } from "./status.js";

/** "gpu_ms 1,200 · tokens 5,000", counters by name; "" for none. */
export function usageText(usage: { readonly [key: string]: bigint } | undefined): string {
  return Object.entries(usage ?? {})
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k} ${v.toLocaleString("en")}`)
    .join(" · ");
}

/** A job with an account or a billing context: the ones settled, and listed until they are. */
export function billable(job: Job): boolean {
  return !!job.account || !!job.billing;
}

/** "Reserved 500 units, key order-7"; "" without a billing context. */
export function billingText(job: Job): string {
  if (!job.billing) return "";
  const key = job.billing.billingKey ? `, key ${job.billing.billingKey}` : "";
  return `Reserved ${job.billing.reservedUnits.toLocaleString("en")} units${key}`;
}

/** The job page's money facts (dt/dd pairs for its facts list); none for a job that is not billable and used nothing. */
export function moneyFacts(job: Job): (HTMLElement | null)[] {
  const usage = usageText(job.usage);
  const settlement = job.settlement;
  return [
    job.account ? h("dt", {}, "Account") : null,
    job.account ? h("dd", { id: "job-account" }, h("a", { href: `#/jobs?account=${encodeURIComponent(job.account)}` }, job.account)) : null,
    job.billing ? h("dt", {}, "Billing") : null,
    job.billing ? h("dd", { id: "job-billing" }, billingText(job)) : null,
    usage || billable(job) ? h("dt", {}, "Usage") : null,
    usage || billable(job) ? h("dd", { id: "job-usage", class: "mono" }, usage || "none reported") : null,
    billable(job) ? h("dt", {}, "Settlement") : null,
    billable(job)
      ? h(
          "dd",
          { id: "job-settlement", "data-settled": settlement ? "yes" : "no" },
          settlement
            ? `${settlement.settledUnits.toLocaleString("en")} units settled as ${settlement.settlementKey}, ${when(ts(settlement.settledAt))}`
            : FINAL_JOB.has(job.status)
              ? "Not settled yet"
              : "Settled once the job is final",
        )
      : null,
  ];
}
