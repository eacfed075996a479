import { describe, it, expect } from 'vitest';
import { forEachLimit } from '../../lib/blobs/concurrency';

const tick = () => new Promise((r) => setTimeout(r, 2));

describe('forEachLimit', () => {
  it('runs every item with at most limit in flight', async () => {
    let inFlight = 0;
    let peak = 0;
    const seen: number[] = [];
    await forEachLimit([...Array(20).keys()], 3, async (x) => {
      inFlight++;
      peak = Math.max(peak, inFlight);
      await tick();
      seen.push(x);
      inFlight--;
    });
    expect(peak).toBe(3);
    expect(seen.sort((a, b) => a - b)).toEqual([...Array(20).keys()]);
  });

  it('rethrows the first failure only after in-flight items settle, and starts no new ones', async () => {
    let started = 0;
    let settled = 0;
    const p = forEachLimit([...Array(50).keys()], 4, async (x) => {
      started++;
      await tick();
      settled++;
      if (x === 5) throw new Error('boom');
    });
    await expect(p).rejects.toThrow('boom');
    expect(settled).toBe(started);
    expect(started).toBeLessThan(50);
  });

  it('accepts an empty list', async () => {
    await forEachLimit([], 4, async () => {
      throw new Error('never');
    });
  });
});
