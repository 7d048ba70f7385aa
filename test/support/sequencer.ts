import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * The files that take longest, longest first (seconds of a `npm test` run on a 2-core machine).
 * Vitest orders files by the durations it cached on an earlier run, and without a cache (a fresh
 * clone, CI) by size, largest first: the Python clients' suites, small files that run pytest for
 * ~45 and ~34 s, then started last and ran on alone for the last 45 s of the run.
 */
const LONGEST = [
  "test/clients/python-client-workers.test.ts", // 45
  "test/cli/cli.test.ts", // 71 in 23 tests, so it fills in beside the first
  "test/cli/cli-workflow.test.ts", // 35
  "test/store/flow-caps.test.ts", // 35
  "test/clients/python-client.test.ts", // 34
  "test/process/run.test.ts", // 31
  "test/clients/client-parity.test.ts", // 30
  "test/console/console.test.ts", // 30
  "test/store/flow-horizon.test.ts", // 21
];

/** Vitest's own order (projects apart, the cache's durations when it has them), with LONGEST first in each project. */
export class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (f: TestSpecification) => {
      const i = LONGEST.findIndex((p) => f.moduleId.endsWith(p));
      return i < 0 ? LONGEST.length : i;
    };
    const projects = [...new Set(sorted.map((f) => f.project.name))];
    return projects.flatMap((name) =>
      sorted
        .filter((f) => f.project.name === name)
        .map((f, i) => ({ f, i }))
        .sort((a, b) => rank(a.f) - rank(b.f) || a.i - b.i)
        .map((x) => x.f),
    );
  }
}
