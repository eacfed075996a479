// The fence carries the freeze token of the cutover attempt that froze it: a paused attempt's
// late unfreeze cannot reopen another attempt's freeze (the bug test/model found), while the
// workflow's own cancel (no token) still can. Real Postgres.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { shardPool, uniq, closePools } from '../helpers/stack';
import { prepareStack } from '../helpers/move';
import { installOwner, freezeSource, unfreeze, getUnitFence } from '../../lib/shard/fence';

beforeAll(prepareStack);
afterAll(closePools);

describe('fence freeze tokens', () => {
  it("refuses an unfreeze under another attempt's token, accepts the freezing attempt's, and the tokenless cancel", async () => {
    const pool = shardPool('shard-a');
    const unit = uniq('ft');
    expect((await installOwner(pool, unit, 1)).ok).toBe(true);
    await freezeSource(pool, unit, 1, { token: 'attempt-b' });
    expect(await getUnitFence(pool, unit)).toMatchObject({ frozen: true, freezeToken: 'attempt-b' });

    // Attempt A (paused, its own freeze long gone) wakes up and unfreezes: refused, still frozen.
    expect((await unfreeze(pool, unit, 1, ['attempt-a'])).ok).toBe(false);
    expect(await getUnitFence(pool, unit)).toMatchObject({ frozen: true, freezeToken: 'attempt-b' });

    // B itself (or whoever took B's freeze over) may.
    expect((await unfreeze(pool, unit, 1, ['attempt-c', 'attempt-b'])).ok).toBe(true);
    expect(await getUnitFence(pool, unit)).toEqual({ unit, epoch: 1, owned: true, frozen: false });

    // The workflow's cancel, after its own directory compare-and-set, passes no token.
    await freezeSource(pool, unit, 1, { token: 'attempt-d' });
    expect((await unfreeze(pool, unit, 1)).ok).toBe(true);
    expect((await getUnitFence(pool, unit))?.frozen).toBe(false);
  });
});
