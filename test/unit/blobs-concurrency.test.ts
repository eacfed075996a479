import { describe, it, expect } from 'vitest';
import { getMaxListeners, setMaxListeners } from 'node:events';
import { allowConcurrentRequests, forEachLimit } from '../../lib/blobs/concurrency';

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

describe('allowConcurrentRequests', () => {
  it("raises a signal's listener limit to the requests a sync runs at once, never lowers it, and leaves an unlimited one alone", () => {
    const s = new AbortController().signal;
    expect(getMaxListeners(s)).toBe(10);
    allowConcurrentRequests(s, 32);
    expect(getMaxListeners(s)).toBe(32);
    allowConcurrentRequests(s, 12);
    expect(getMaxListeners(s)).toBe(32);
    expect(() => allowConcurrentRequests(undefined, 32)).not.toThrow();
    const unlimited = new AbortController().signal;
    setMaxListeners(0, unlimited);
    allowConcurrentRequests(unlimited, 32);
    // (Node 20's getMaxListeners throws for an EventTarget at 0, so the limit is read by adding listeners.)
    const warned: Error[] = [];
    const onWarning = (w: Error) => warned.push(w);
    process.on('warning', onWarning);
    for (let i = 0; i < 40; i++) unlimited.addEventListener('abort', () => {});
    return new Promise<void>((resolve) =>
      setImmediate(() => {
        process.off('warning', onWarning);
        expect(warned.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
        resolve();
      }),
    );
  });

  it('lets 32 requests listen at once without the leak warning', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    try {
      const s = new AbortController().signal;
      allowConcurrentRequests(s, 32);
      const fns = Array.from({ length: 32 }, () => () => {});
      for (const f of fns) s.addEventListener('abort', f);
      await new Promise((r) => setImmediate(r));
      for (const f of fns) s.removeEventListener('abort', f);
      expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
      // Without it, the same listeners warn (the check above can fail).
      const plain = new AbortController().signal;
      for (const f of fns) plain.addEventListener('abort', f);
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toHaveLength(1);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
