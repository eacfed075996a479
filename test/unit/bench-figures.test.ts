// The bench's verdicts (bench/figures.ts) and the pure helpers it reads its numbers with: a goal
// met or not must follow from the numbers, never from the bench's hopes.
import { describe, it, expect } from 'vitest';
import { best, formatTable, judge, meets, quantile, Figure } from '../../bench/figures';
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
