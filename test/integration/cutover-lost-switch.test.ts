// The cutover's lost-switch branch (lib/cutover/live.ts, switchOwner): an attempt whose freeze
// was taken over by a later attempt reaches the switch, makes the next owner accept the new
// epoch, loses the directory compare-and-set, and must take that acceptance back and fail:
// the directory stays with the later attempt, the next owner refuses the new epoch, and the
// old owner still owns the unit (fail closed: frozen under the later attempt's token).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { testConfig, closePools, shardPool, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { liveCutoverSteps, LiveCutoverEnv } from '../../lib/cutover/live';
import type { CutoverPlan } from '../../lib/cutover/steps';
import { getUnitFence } from '../../lib/shard/fence';
import { shardByName } from '../../lib/config';

const OWNER = 'shard-a';
const NEXT = 'shard-b';

beforeAll(async () => {
  await H.prepareStack();
});
afterAll(async () => {
  await closePools();
});

function env(): LiveCutoverEnv {
  const config = testConfig();
  return {
    directory: directoryPool(),
    ownerPool: shardPool(OWNER),
    nextPool: shardPool(NEXT),
    ownerDsn: shardByName(config, OWNER).dsn,
    tenantColumn: config.tenant.column,
    tables: async () => [],
    syncBlobs: async () => undefined,
    unfencedTables: async () => [],
    maxTxBytes: config.limits.applyMaxTxBytes,
    beat: () => {},
  };
}

describe('cutover: a switch that loses the directory compare-and-set', () => {
  it("takes back the next owner's acceptance and fails, leaving the unit with the attempt that took the freeze over", async () => {
    const tenant = await H.newTenant(OWNER, 'ls');
    const plan: CutoverPlan = {
      unit: tenant,
      moveId: `${tenant}.e1`,
      owner: OWNER,
      next: NEXT,
      epoch: 1,
      direction: 'forward',
      fenceBudgetMs: 5000,
      actor: 'lost-switch-test',
    };
    const early = liveCutoverSteps(plan, env());
    expect(await early.standing()).toEqual({ kind: 'open' });
    expect(await early.freeze({ kind: 'open' })).toEqual({ ok: true });
    // A later attempt of the same move (the early one stalled) takes the freeze over.
    const late = liveCutoverSteps(plan, env());
    const standing = await late.standing();
    expect(standing.kind).toBe('frozen-by-this-move');
    expect(await late.freeze(standing)).toEqual({ ok: true });
    const before = await H.placement(tenant);

    // The early attempt wakes up and tries to switch on its own, stale freeze.
    await expect(early.switchOwner('0/0', null)).rejects.toThrow(/switch compare-and-set lost/);

    // Its acceptance on the next owner is taken back: the new epoch is refused there.
    expect(await getUnitFence(shardPool(NEXT), tenant)).toMatchObject({ epoch: 2, owned: false });
    expect(await H.tryWrite(NEXT, tenant, 2)).toBe('SC421');
    // The directory is the later attempt's, untouched; the old owner still owns the unit.
    expect(await H.placement(tenant)).toEqual(before);
    expect(before).toMatchObject({ shard: OWNER, epoch: 1, state: 'moving', moveId: plan.moveId });
    expect(await getUnitFence(shardPool(OWNER), tenant)).toMatchObject({ epoch: 1, owned: true });

    // The later attempt can still undo its freeze: the unit is writable on its owner again.
    expect(await late.unfreeze('test over')).toBe('unfrozen');
    expect(await H.placement(tenant)).toMatchObject({ shard: OWNER, epoch: 1, state: 'active', moveId: null });
    expect(await H.tryWrite(OWNER, tenant, 1)).toBe('ok');
  });
});
