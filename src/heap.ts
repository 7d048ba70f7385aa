// How far the V8 heap may grow between full collections, set once at process start.
//
// V8 lets the old generation grow to a multiple of what survived the last full collection before
// it collects again (up to 4× for a small heap). A coordinator's live heap is small and steady
// (~35 MB), but a CreateJob of 10,000 tasks leaves ~25 MB of garbage behind it (the request, its
// tasks in three shapes, the answer), and a few such jobs in a row grew the process from ~95 MB to
// ~240 MB RSS before V8 collected. With growth capped at 30% over the live heap, six 10,000-task
// jobs in a row peaked at ~145 MB (measured over REST on the compiled coordinator); a full
// collection of a heap this small costs a few milliseconds. heap_growing_percent is read whenever
// V8 computes its next limit, so setting it before the first request is enough.
//
// The young generation is the other half of the peak: V8 sizes its semi-spaces at start only, so
// `npm start` passes --max-semi-space-size=8 (MB; 16 by default on 64-bit), which a running process
// cannot change. Under `npm run bench:peers` (2 rounds, same machine, one run after the other) the
// coordinator peaked at 137 MB with it and 144 without (123 against 151 in two other runs), at the
// same CPU per task; scavenges come twice as often and each has half as much to look at.
//
// The 30% cap alone made full collections far too frequent where the live heap is smallest: with
// ~20 MB live, V8 collected every ~6 MB promoted, 16 times in 100 one-after-another 1,000-task
// CreateJobs, each 6–11 ms plus incremental marking (--trace-gc). `npm start` therefore also passes
// --initial-old-space-size=48 (MB), a floor under the limit the cap computes: the old generation
// may reach 48 MB before a full collection, whatever is live (6 full collections in those 100
// CreateJobs). Measured on the compiled coordinator: a 1,000-task CreateJob 22.0 → 17.8 ms of
// coordinator CPU (`bench/enqueue-ab.ts`, ENQ_TASKS=1000, 3 alternating pairs); under `bench:peers`
// (two runs each way) the coordinator's CPU per single task 0.27–0.29 → 0.24–0.25 ms, per two-call
// task 0.50–0.59 → 0.41–0.43 ms, per batched task 0.11–0.15 → 0.11–0.12 ms, at a peak RSS of 130 MB
// against 121–122. A floor of 64 MB saved a little more CPU for a peak of 148–152 MB.
import v8 from "node:v8";

export const HEAP_GROWING_PERCENT = 30;

export function limitHeapGrowth(percent = HEAP_GROWING_PERCENT): void {
  v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
}
