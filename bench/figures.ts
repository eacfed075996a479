// The bench's figures and its one table: each figure is ours against a baseline measured in the
// same run, their ratio, and the goal the ratio must meet. A figure is judged on the best round of
// each side, or, when its rounds are paired (short rounds, each side once per round), on the median
// of the per-round ratios, printed with their interquartile range. Pure: no I/O, so the verdicts
// are unit-tested (test/unit/bench-figures.test.ts).

/** A goal on the ratio ours / baseline, or (no baseline) on ours itself. */
export interface Goal {
  op: '>=' | '<=' | '<';
  value: number;
}

export interface Figure {
  /** What is measured, e.g. "copy rows/s". */
  name: string;
  unit: string;
  /** Every round's value (ours), in run order. */
  ours: number[];
  /** Every round's value of the baseline, or null for a figure judged on ours alone. */
  baseline: number[] | null;
  /** Which way is better for the value itself: throughput is 'higher', a pause or a latency 'lower'. */
  better: 'higher' | 'lower';
  /** Absent: a diagnostic row (where time goes), judged against nothing. */
  goal?: Goal;
  /** What the baseline is, for the table's reader. */
  baselineLabel: string;
  note?: string;
  /**
   * ours[i] and baseline[i] ran in the same round, one right after the other: judged on the median
   * of the per-round ratios (ours and baseline shown as each side's median), not on best rounds.
   */
  paired?: boolean;
}

export interface Verdict {
  name: string;
  unit: string;
  ours: number;
  baseline: number | null;
  ratio: number | null;
  goal: string;
  /** null for a diagnostic row without a goal. */
  met: boolean | null;
  baselineLabel: string;
  note?: string;
  /** Paired figures: the per-round ratios, and their interquartile range [p25, p75]. */
  ratios?: number[];
  spread?: [number, number];
  samples: { ours: number[]; baseline: number[] | null };
}

/** A figure judged on its own value, lower being better (a pause, a count of failures). */
export function absoluteFigure(name: string, unit: string, value: number, goal: Goal | undefined, baselineLabel: string): Figure {
  return { name, unit, ours: [value], baseline: null, better: 'lower', ...(goal ? { goal } : {}), baselineLabel };
}

/** The best round: the highest throughput or the lowest time (rounds share the machine with others). */
export function best(values: number[], better: 'higher' | 'lower'): number {
  const finite = values.filter((v) => Number.isFinite(v));
  if (finite.length === 0) return NaN;
  return better === 'higher' ? Math.max(...finite) : Math.min(...finite);
}

/** The q-quantile of values (nearest rank), ignoring non-numbers. */
export function quantile(values: number[], q: number): number {
  const xs = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (xs.length === 0) return NaN;
  return xs[Math.min(xs.length - 1, Math.max(0, Math.ceil(q * xs.length) - 1))];
}

/** The median (mean of the middle two for an even count), ignoring non-numbers. */
export function median(values: number[]): number {
  const xs = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (xs.length === 0) return NaN;
  const m = xs.length >> 1;
  return xs.length % 2 ? xs[m] : (xs[m - 1] + xs[m]) / 2;
}

/** Per-round ratios ours[i] / baseline[i] of a paired figure (rounds missing either side are left out). */
export function pairedRatios(ours: number[], baseline: number[]): number[] {
  if (ours.length !== baseline.length) throw new Error(`paired figure: ${ours.length} rounds of ours against ${baseline.length} of the baseline`);
  return ours.map((o, i) => o / baseline[i]).filter((r) => Number.isFinite(r) && r > 0);
}

export function meets(value: number, goal: Goal): boolean {
  if (!Number.isFinite(value)) return false;
  if (goal.op === '>=') return value >= goal.value;
  if (goal.op === '<=') return value <= goal.value;
  return value < goal.value;
}

export function formatGoal(goal: Goal, unit = ''): string {
  const op = goal.op === '>=' ? '≥' : goal.op === '<=' ? '≤' : '<';
  return unit ? `${op} ${goal.value} ${unit}` : `${op} ${goal.value}×`;
}

export function judge(f: Figure): Verdict {
  if (f.paired && f.baseline) return judgePaired(f, f.baseline);
  const ours = best(f.ours, f.better);
  const baseline = f.baseline ? best(f.baseline, f.better) : null;
  const ratio = baseline === null ? null : ours / baseline;
  return {
    name: f.name,
    unit: f.unit,
    ours,
    baseline,
    ratio,
    goal: f.goal ? formatGoal(f.goal, baseline === null ? f.unit : '') : '—',
    met: f.goal ? meets(ratio ?? ours, f.goal) : null,
    baselineLabel: f.baselineLabel,
    note: f.note,
    samples: { ours: f.ours, baseline: f.baseline },
  };
}

function judgePaired(f: Figure, baselineSamples: number[]): Verdict {
  const ratios = pairedRatios(f.ours, baselineSamples);
  const ratio = median(ratios);
  return {
    name: f.name,
    unit: f.unit,
    ours: median(f.ours),
    baseline: median(baselineSamples),
    ratio,
    goal: f.goal ? formatGoal(f.goal) : '—',
    met: f.goal ? meets(ratio, f.goal) : null,
    baselineLabel: f.baselineLabel,
    note: f.note,
    ratios,
    spread: [quantile(ratios, 0.25), quantile(ratios, 0.75)],
    samples: { ours: f.ours, baseline: baselineSamples },
  };
}

function num(v: number | null): string {
  if (v === null) return '—';
  if (!Number.isFinite(v)) return 'n/a';
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 100) return String(v);
  if (a >= 100) return Math.round(v).toLocaleString('en-US');
  if (a >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

/** The one table, as Markdown (printed as is, and kept in BENCHMARKS.md). */
export function formatTable(verdicts: Verdict[]): string {
  const rows = verdicts.map((v) => [
    v.name,
    `${num(v.ours)} ${v.unit}`,
    v.baseline === null ? '—' : `${num(v.baseline)} ${v.unit}`,
    v.ratio === null ? '—' : v.spread ? `${num(v.ratio)}× [${num(v.spread[0])}–${num(v.spread[1])}, n=${v.ratios!.length}]` : `${num(v.ratio)}×`,
    v.goal,
    v.met === null ? '(diagnostic)' : v.met ? 'met' : 'NOT met',
    v.baselineLabel,
  ]);
  const head = ['figure', 'ours', 'baseline', 'ratio', 'goal', 'met', 'baseline is'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  return [line(head), `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`, ...rows.map(line)].join('\n');
}
