// When the apply commits its open group (lib/cdc/apply.ts groupFull): by size, and by time open
// measured against what the last commit cost, so a slow target link does not turn every source
// transaction into its own commit.
import { describe, it, expect } from 'vitest';
import { groupFull } from '../../lib/cdc/apply';

const open = (pendingSinceMs: number, pendingTransactions = 5, pendingRows = 50) => ({ pendingTransactions, pendingRows, pendingSinceMs });

describe('group commit', () => {
  it('on a fast target a group is full after its time bound', () => {
    expect(groupFull(open(999), 2)).toBe(false);
    expect(groupFull(open(1000), 2)).toBe(true);
  });

  it('on a slow target a group stays open four times as long as the last commit took', () => {
    // A commit of five round trips at 200 ms each: groups of 4 s, not of one transaction each.
    expect(groupFull(open(1000), 1000)).toBe(false);
    expect(groupFull(open(3999), 1000)).toBe(false);
    expect(groupFull(open(4000), 1000)).toBe(true);
  });

  it('is full by transactions or rows whatever the time', () => {
    expect(groupFull(open(0, 1000), 5000)).toBe(true);
    expect(groupFull(open(0, 1, 40_000), 5000)).toBe(true);
    expect(groupFull(open(0, 999, 39_999), 5000)).toBe(false);
  });
});
