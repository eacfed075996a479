// The copy's rate keeping (lib/copy/throttle.ts): the wait before the next batch keeps the rows
// copied since the call began within rowsPerSecond; 0 means unlimited.
import { describe, it, expect } from 'vitest';
import { rateDelayMs } from '../../lib/copy/throttle';

describe('rateDelayMs', () => {
  it('waits until the rows copied so far fit the rate', () => {
    // 100 rows at 50 rows/s take 2 s; 500 ms have passed: wait 1.5 s.
    expect(rateDelayMs(100, 1000, 50, 1500)).toBe(1500);
    // On pace or behind it: no wait.
    expect(rateDelayMs(100, 1000, 50, 3000)).toBe(0);
    expect(rateDelayMs(100, 1000, 50, 9000)).toBe(0);
    // Rounded up: never a millisecond early.
    expect(rateDelayMs(1, 0, 3, 0)).toBe(334);
  });
  it('never waits when unlimited (0) or nothing was copied yet', () => {
    expect(rateDelayMs(10_000, 0, 0, 0)).toBe(0);
    expect(rateDelayMs(0, 0, 50, 0)).toBe(0);
  });
  it('paces a whole copy at the rate: the waits add up to rows / rate', () => {
    // A simulated clock: batches of 10 rows that take no time of their own.
    let now = 0;
    let rows = 0;
    while (rows < 600) {
      now += rateDelayMs(rows, 0, 50, now);
      rows += 10;
    }
    now += rateDelayMs(rows, 0, 50, now);
    expect(now).toBe(12_000);
  });
});
