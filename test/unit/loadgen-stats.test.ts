// Latency summaries and histograms of the loadgen report.
import { describe, it, expect } from 'vitest';
import { LatencyRecorder, latencyHistogram, percentile } from '../../lib/loadgen/stats';

describe('latency statistics', () => {
  it('computes nearest-rank percentiles and the max', () => {
    const r = new LatencyRecorder();
    for (let i = 1; i <= 100; i++) r.add(i);
    expect(r.summary()).toMatchObject({ count: 100, p50: 50, p90: 90, p99: 99, max: 100, mean: 50.5 });
  });

  it('reports zeros for no samples', () => {
    expect(new LatencyRecorder().summary()).toEqual({ count: 0, p50: 0, p90: 0, p99: 0, max: 0, mean: 0 });
    expect(percentile([], 99)).toBe(0);
  });

  it('buckets by powers of two with empty buckets in between kept', () => {
    expect(latencyHistogram([0.5, 1, 3, 3, 20])).toEqual([
      [1, 2],
      [2, 0],
      [4, 2],
      [8, 0],
      [16, 0],
      [32, 1],
    ]);
  });
});
