// The bench's verdicts (bench/figures.ts) and the pure helpers it reads its numbers with: a goal
// met or not must follow from the numbers, never from the bench's hopes.
import { describe, it, expect } from 'vitest';
import { best, formatTable, judge, median, meets, pairedRatios, quantile, Figure } from '../../bench/figures';
import { parsePgbench } from '../../bench/catchup';

const throughput = (ours: number[], baseline: number[]): Figure => ({
  name: 'copy rows/s',
  unit: 'rows/s',
  ours,
  baseline,
  better: 'higher',
  goal: { op: '>=', value: 0.9 },
  baselineLabel: 'raw pipe',
});

describe('bench figures', () => {
  it('takes the best round of each side: the highest throughput, the lowest time', () => {
    expect(best([3, 9, 5], 'higher')).toBe(9);
    expect(best([3, 9, 5], 'lower')).toBe(3);
    expect(best([NaN, 2], 'higher')).toBe(2);
    expect(best([], 'higher')).toBeNaN();
  });

  it('judges the ratio of the best rounds against the goal', () => {
    const v = judge(throughput([80, 95], [100, 90]));
    expect(v.ours).toBe(95);
    expect(v.baseline).toBe(100);
    expect(v.ratio).toBeCloseTo(0.95);
    expect(v.met).toBe(true);
    expect(judge(throughput([80, 85], [100, 90])).met).toBe(false);
  });

  it('judges a time ratio with an upper bound, and a figure without baseline on its value', () => {
    const router: Figure = { ...throughput([2.4, 2.2], [2.0, 2.1]), better: 'lower', goal: { op: '<=', value: 1.1 } };
    expect(judge(router)).toMatchObject({ ours: 2.2, baseline: 2.0, met: true });
    expect(judge({ ...router, ours: [2.3] }).met).toBe(false);
    const pause: Figure = { ...router, ours: [320], baseline: null, goal: { op: '<', value: 300 }, unit: 'ms' };
    expect(judge(pause)).toMatchObject({ ratio: null, met: false, goal: '< 300 ms' });
    expect(judge({ ...pause, ours: [299] }).met).toBe(true);
  });

  it('never meets a goal on a value that is not a number', () => {
    expect(meets(NaN, { op: '<=', value: 0 })).toBe(false);
    expect(judge(throughput([NaN], [100])).met).toBe(false);
  });

  it('prints a diagnostic row without a verdict, and a missed goal as NOT met', () => {
    const diag: Figure = { ...throughput([1], [1]), name: 'raw pipe into prepared tables', goal: undefined };
    const table = formatTable([judge(throughput([50], [100])), judge(diag)]);
    const lines = table.split('\n');
    expect(lines[0]).toMatch(/^\| figure +\| ours +\| baseline +\| ratio +\| goal +\| met +\|/);
    expect(lines[2]).toContain('0.50×');
    expect(lines[2]).toContain('NOT met');
    expect(lines[3]).toContain('(diagnostic)');
  });
});

describe('paired bench figures', () => {
  const paired = (ours: number[], baseline: number[]): Figure => ({ ...throughput(ours, baseline), paired: true });

  it('judges the median of the per-round ratios, not the best rounds', () => {
    // Best rounds would say 100 / 100 = 1.0; round by round ours is behind in 3 of 4 rounds.
    const v = judge(paired([80, 100, 60, 95], [100, 90, 75, 100]));
    expect(v.ratios).toEqual([0.8, 100 / 90, 0.8, 0.95]);
    expect(v.ratio).toBeCloseTo((0.8 + 0.95) / 2);
    expect(v.met).toBe(false);
    expect(v.ours).toBe(87.5);
    expect(v.baseline).toBe(95);
    expect(judge(paired([95, 92, 99], [100, 100, 100])).met).toBe(true);
  });

  it('reports the interquartile range of the per-round ratios beside the median', () => {
    const v = judge(paired([1, 2, 3, 4, 5, 6, 7, 8], [10, 10, 10, 10, 10, 10, 10, 10]));
    expect(v.spread).toEqual([0.2, 0.6]);
    const line = formatTable([v]).split('\n')[2];
    expect(line).toContain('0.45× [0.20–0.60, n=8]');
  });

  it('judges a paired time ratio with an upper bound', () => {
    const router: Figure = { ...paired([2.2, 2.4, 2.1], [2.0, 2.0, 2.0]), better: 'lower', goal: { op: '<=', value: 1.1 } };
    expect(judge(router)).toMatchObject({ ratio: 1.1, met: true });
    expect(judge({ ...router, ours: [2.3, 2.4, 2.1] }).met).toBe(false);
  });

  it('refuses rounds that do not pair up, and never meets a goal without a round', () => {
    expect(() => pairedRatios([1, 2], [1])).toThrow(/paired figure: 2 rounds of ours against 1/);
    expect(pairedRatios([1, NaN, 3], [2, 2, 0])).toEqual([0.5]);
    expect(judge(paired([NaN], [100])).met).toBe(false);
  });

  it('takes the median of an odd and an even count, ignoring non-numbers', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([NaN, 5])).toBe(5);
    expect(median([])).toBeNaN();
  });
});

describe('bench helpers', () => {
  it("reads pgbench's transactions, failures and tps", () => {
    const out = [
      'number of transactions actually processed: 44318',
      'number of failed transactions: 2 (0.005%)',
      'latency average = 0.044 ms',
      'tps = 45190.861490 (without initial connection time)',
    ].join('\n');
    expect(parsePgbench(out)).toEqual({ transactions: 44318, failed: 2, tps: 45190.86149 });
    expect(() => parsePgbench('pgbench: error: connection refused')).toThrow(/cannot read pgbench output/);
  });

  it('takes quantiles by nearest rank, ignoring non-numbers', () => {
    expect(quantile([5, 1, 3, 2, 4], 0.5)).toBe(3);
    expect(quantile([5, 1, 3, 2, 4], 0.99)).toBe(5);
    expect(quantile([NaN, 7], 0.99)).toBe(7);
    expect(quantile([], 0.5)).toBeNaN();
  });
});
