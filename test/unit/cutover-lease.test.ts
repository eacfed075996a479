// The freeze lease's arithmetic (lib/cutover/lease.ts): the directory's switch deadline always
// leaves the whole fence budget to the steps before the switch, and always ends before the lease
// by a margin of at least a second and a tenth of the lease.
import { describe, it, expect } from 'vitest';
import { freezeLease, MIN_SWITCH_MARGIN_MS, SWITCH_MARGIN_FRACTION } from '../../lib/cutover/lease';

describe('freezeLease', () => {
  it('is the fence budget plus the extra for the default config (2 s + 3 s), with a 1 s margin', () => {
    expect(freezeLease(2000, 3000)).toEqual({ leaseMs: 5000, switchWithinMs: 4000 });
  });

  it.each([
    [100, 1501],
    [2000, 1500],
    [2000, 3000],
    [10_000, 3000],
    [60_000, 3000],
    [600_000, 10_000],
  ])('budget %i ms, extra %i ms: budget < switch deadline < lease, by the margin', (budget, extra) => {
    const l = freezeLease(budget, extra);
    expect(l.switchWithinMs).toBeGreaterThan(budget);
    expect(l.leaseMs - l.switchWithinMs).toBeGreaterThanOrEqual(Math.max(MIN_SWITCH_MARGIN_MS, l.leaseMs * SWITCH_MARGIN_FRACTION));
  });

  it('refuses an extra that leaves no room for the margin', () => {
    expect(() => freezeLease(2000, 1000)).toThrow(/more than 1000 ms extra/);
    expect(() => freezeLease(0, 3000)).toThrow(/positive fence budget/);
  });
});
