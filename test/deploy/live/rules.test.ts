// The alert rules of deploy/prometheus under promtool (Debian's prometheus package): `promtool
// check rules`, `promtool test rules` on leasehold.rules.test.yml, and the file's own promise that
// every alert has a case where it fires and a case where it stays quiet; every alert pages with a
// severity, a summary and a runbook_url whose anchor is a heading of docs/operations.md.
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { ROOT, run } from "./docker.js";

const DIR = path.join(ROOT, "deploy/prometheus");
const RULES = path.join(DIR, "leasehold.rules.yml");
const TESTS = path.join(DIR, "leasehold.rules.test.yml");

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface RuleTests {
  tests: { name: string; alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[];
}

const rules = (parse(readFileSync(RULES, "utf8")) as { groups: { rules: Rule[] }[] }).groups.flatMap((g) => g.rules);
const alerts = rules.filter((r) => r.alert);

/** GitHub's anchors of a markdown page's headings (as test/docs/docs-paths.test.ts reads them). */
function anchors(file: string): Set<string> {
  const found = new Set<string>();
  let fenced = false;
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    const h = !fenced && /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h)
      found.add(
        h[1]
          .trim()
          .toLowerCase()
          .replace(/[^\p{L}\p{N}\s_-]/gu, "")
          .replace(/\s/g, "-"),
      );
  }
  return found;
}

describe("alert rules", () => {
  it("pass promtool check rules", () => {
    const r = run("promtool", ["check", "rules", RULES]);
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`SUCCESS: ${rules.length} rules found`));
  });

  it("pass their unit tests (promtool test rules)", () => {
    const r = run("promtool", ["test", "rules", TESTS], { cwd: DIR });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain("SUCCESS");
  });

  it("each have a case that fires and a case that stays quiet", () => {
    const cases = (parse(readFileSync(TESTS, "utf8")) as RuleTests).tests.flatMap((t) => t.alert_rule_test ?? []);
    const missing: string[] = [];
    for (const { alert } of alerts) {
      const mine = cases.filter((c) => c.alertname === alert);
      if (!mine.some((c) => c.exp_alerts.length > 0)) missing.push(`${alert}: no case where it fires`);
      if (!mine.some((c) => c.exp_alerts.length === 0)) missing.push(`${alert}: no case where it stays quiet`);
    }
    expect(missing).toEqual([]);
    expect(alerts.length).toBeGreaterThanOrEqual(9);
  });

  it("each name a severity, a summary and a runbook in docs/operations.md", () => {
    const headings = anchors(path.join(ROOT, "docs/operations.md"));
    const problems: string[] = [];
    for (const a of alerts) {
      if (!["page", "ticket"].includes(a.labels?.severity ?? "")) problems.push(`${a.alert}: severity page or ticket`);
      if (!a.annotations?.summary) problems.push(`${a.alert}: no summary`);
      const m = /^docs\/operations\.md#(.+)$/.exec(a.annotations?.runbook_url ?? "");
      if (!m) problems.push(`${a.alert}: runbook_url is not docs/operations.md#…`);
      else if (!headings.has(m[1])) problems.push(`${a.alert}: docs/operations.md has no heading #${m[1]}`);
      else if (m[1] !== a.alert?.toLowerCase()) problems.push(`${a.alert}: runbook anchor #${m[1]} is not the alert's name`);
    }
    expect(problems).toEqual([]);
  });
});
