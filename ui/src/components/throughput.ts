// The overview's throughput chart: claims and completions per second, from the differences of
// /metrics counters read every few seconds (the samples outlive a visit to another page).
import type { MetricSample } from "../api.js";
import { duration, h } from "../dom.js";

interface RateSample {
  t: number;
  claims: number;
  completions: number;
}
const samples: RateSample[] = [];
export const SAMPLE_MS = 5000;
const KEEP_SAMPLES = 60; // five minutes

export function metric(ms: MetricSample[], name: string): MetricSample[] {
  return ms.filter((m) => m.name === name);
}

/** Adds one reading of the counters. */
export function recordSample(ms: MetricSample[]): void {
  const sum = (n: string) => metric(ms, n).reduce((a, m) => a + m.value, 0);
  samples.push({ t: Date.now(), claims: sum("leasehold_claims_total"), completions: sum("leasehold_completions_total") });
  while (samples.length > KEEP_SAMPLES) samples.shift();
}

/** A rate needs two readings: until then the overview reads again sooner than SAMPLE_MS. */
export function hasRate(): boolean {
  return samples.length >= 2;
}

function rates(): { claims: number[]; completions: number[] } {
  const claims: number[] = [];
  const completions: number[] = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    // A coordinator restart resets its counters: count that interval as unknown (0) rather than negative.
    claims.push(dt > 0 ? Math.max(0, samples[i].claims - samples[i - 1].claims) / dt : 0);
    completions.push(dt > 0 ? Math.max(0, samples[i].completions - samples[i - 1].completions) / dt : 0);
  }
  return { claims, completions };
}

export function chart(): HTMLElement {
  const { claims, completions } = rates();
  const W = 320;
  const H = 90;
  const max = Math.max(1, ...claims, ...completions);
  const line = (xs: number[]) =>
    // The x axis spans the samples so far (at least a minute), so a fresh page's chart is not a sliver.
    xs.map((v, i) => `${(i / Math.max(11, xs.length - 1)) * W},${H - (v / max) * (H - 4) - 2}`).join(" ");
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", String(W));
  svg.setAttribute("height", String(H));
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "chart");
  for (const [xs, cls] of [
    [claims, "claims"],
    [completions, "completions"],
  ] as const) {
    const p = document.createElementNS(ns, "polyline");
    p.setAttribute("points", line(xs));
    p.setAttribute("class", cls);
    svg.append(p);
  }
  const last = (xs: number[]) => (xs.length ? xs[xs.length - 1].toFixed(1) : "—");
  const span = (samples[samples.length - 1]?.t ?? 0) - (samples[0]?.t ?? 0);
  // One reading has no rate yet: say so instead of "the last 0 s" over an empty chart.
  const caption = hasRate()
    ? `Throughput, last ${duration(span / 1000)} (peak ${max.toFixed(1)}/s)`
    : "Throughput: measuring (a rate needs a second reading of the counters)";
  return h(
    "figure",
    { class: "card", id: "throughput", "data-measuring": !hasRate() },
    h("figcaption", { id: "throughput-caption" }, caption),
    hasRate() ? svg : null,
    h(
      "ul",
      { class: "legend" },
      h(
        "li",
        {},
        h("span", { class: "key claims", "aria-hidden": "true" }),
        "Claims/s: ",
        h("strong", { id: "claims-rate" }, last(claims)),
      ),
      h(
        "li",
        {},
        h("span", { class: "key completions", "aria-hidden": "true" }),
        "Completions/s: ",
        h("strong", { id: "completions-rate" }, last(completions)),
      ),
    ),
  );
}
