// inLanes (lib/copy/lanes.ts): the move's table copy runs COPY_TABLE_LANES tables at once.
import { describe, it, expect } from 'vitest';
import { inLanes } from '../../lib/copy/lanes';

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('inLanes', () => {
  it('runs at most `lanes` at once, starts items in order, and runs every item once', async () => {
    let running = 0;
    let most = 0;
    const started: number[] = [];
    await inLanes([0, 1, 2, 3, 4, 5, 6], 2, async (i) => {
      started.push(i);
      most = Math.max(most, ++running);
      await tick(5 + ((i * 7) % 11));
      running--;
    });
    expect(most).toBe(2);
    expect(started).toEqual([0, 1, 2, 3, 4, 5, 6]);
  });

  it('after a failure starts nothing new, waits for the started ones, then throws the first failure', async () => {
    const finished: number[] = [];
    const started: number[] = [];
    const err = await inLanes([0, 1, 2, 3], 2, async (i) => {
      started.push(i);
      if (i === 0) throw new Error('table 0 failed');
      await tick(20);
      finished.push(i);
    }).catch((e: Error) => e);
    expect((err as Error).message).toBe('table 0 failed');
    expect(started).toEqual([0, 1]);
    expect(finished).toEqual([1]); // the sibling ran to its end before the failure was thrown
  });

  it('one lane is one at a time, and no items is no work', async () => {
    let running = 0;
    let most = 0;
    await inLanes([1, 2, 3], 1, async () => {
      most = Math.max(most, ++running);
      await tick(2);
      running--;
    });
    expect(most).toBe(1);
    await inLanes([], 2, async () => {
      throw new Error('never');
    });
  });
});
