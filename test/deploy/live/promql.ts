// PromQL as the dashboard and the rules write it, made evaluable here.

/**
 * An alert's expression with `bool` after each comparison (outside label matchers and strings):
 * `x > 300` keeps only the series over 300, `x > bool 300` answers 0 or 1 for every series x has.
 * So the expression names the same metrics, labels and matching, and returns series on live data
 * whether or not the alert would fire.
 */
export function withBool(expr: string): string {
  let out = "";
  let braces = 0;
  let quote: string | null = null;
  for (let i = 0; i < expr.length; i++) {
    const c = expr[i];
    if (quote) {
      out += c;
      if (c === "\\") out += expr[++i] ?? "";
      else if (c === quote) quote = null;
      continue;
    }
    if (c === '"' || c === "'" || c === "`") {
      quote = c;
      out += c;
      continue;
    }
    if (c === "{") braces++;
    if (c === "}") braces--;
    const op = braces === 0 ? /^(==|!=|>=|<=|>|<)/.exec(expr.slice(i))?.[0] : undefined;
    if (op) {
      out += op;
      i += op.length - 1;
      if (!/^\s*bool\b/.test(expr.slice(i + 1))) out += " bool";
      continue;
    }
    out += c;
  }
  return out;
}

/** Grafana's variables, as the dashboard test sets them: every job and workload, a 15 s rate window. */
export function substituteVariables(expr: string, values: Record<string, string>): string {
  return expr.replace(/\$(__\w+|\w+)|\$\{(\w+)\}/g, (m, a: string | undefined, b: string | undefined) => {
    const name = a ?? b ?? "";
    if (!(name in values)) throw new Error(`no value for the dashboard variable ${m} in ${expr}`);
    return values[name];
  });
}

export interface DashboardPanel {
  type: string;
  title?: string;
  targets?: { expr?: string }[];
  panels?: DashboardPanel[];
}

/** Every query of a dashboard's panels (rows' nested panels included), with its panel's title. */
export function dashboardQueries(panels: DashboardPanel[]): { panel: string; expr: string }[] {
  const found: { panel: string; expr: string }[] = [];
  for (const p of panels) {
    for (const t of p.targets ?? []) if (t.expr) found.push({ panel: p.title ?? "", expr: t.expr });
    if (p.panels) found.push(...dashboardQueries(p.panels));
  }
  return found;
}
