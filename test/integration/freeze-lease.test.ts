// The cutover's freeze is a lease (lib/cutover/lease.ts, docs/architecture.md "Freeze lease"),
// against the real shards and directory: a freeze whose lease ran out lets the owner's writes
// through again (so a worker cut off from the source cannot leave the unit frozen, DESIGN.md §5.8);
// a pinned freeze never runs out, and a pin after the lease ran out is refused; the directory
// refuses a switch after its freeze's switch deadline; and no write is ever accepted under a
// stale epoch, not even once the lease of an old owner whose disown never arrived has run out.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { closePools, shardPool, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { freezeSource, pinFreeze, getUnitFence } from '../../lib/shard/fence';
import { compareAndSetPlacement } from '../../lib/directory/placements';
import { liveCutoverSteps } from '../../lib/cutover/live';
import type { CutoverPlan } from '../../lib/cutover/steps';
import type { FreezeLease } from '../../lib/cutover/lease';
import { sleep } from '../../lib/dev/proc';

const OWNER = 'shard-a';
const NEXT = 'shard-b';

beforeAll(async () => {
  await H.prepareStack();
});
afterAll(async () => {
  await closePools();
});

/** Both writers' paths (the router's and a writer outside it) answer the same. */
async function writes(shard: string, tenant: string, epoch: number): Promise<string> {
  const [a, b] = [await H.tryWrite(shard, tenant, epoch, 'router'), await H.tryWrite(shard, tenant, epoch)];
  return a === b ? a : `router ${a}, unrouted ${b}`;
}

/** Waits until the shard itself says the unit's freeze no longer refuses writes (bounded). */
async function untilLeaseRunsOut(shard: string, tenant: string, boundMs: number) {
  const t0 = Date.now();
  while ((await getUnitFence(shardPool(shard), tenant))?.frozen) {
    if (Date.now() - t0 > boundMs) throw new Error(`the freeze of ${tenant} on ${shard} still refuses writes after ${boundMs} ms`);
    await sleep(50);
  }
}

const env = () => H.bareCutoverEnv(OWNER, NEXT);

const planFor = (tenant: string, lease: FreezeLease): CutoverPlan =>
  H.forwardCutoverPlan(tenant, { owner: OWNER, next: NEXT, fenceBudgetMs: 1000, lease, actor: 'lease-test' });

describe('freeze lease on the source shard', () => {
  it("a freeze whose lease has run out lets writes at the owner's epoch pass again, and still refuses a stale epoch", async () => {
    const tenant = await H.newTenant(OWNER, 'fl');
    await freezeSource(shardPool(OWNER), tenant, 1, { token: 'tok-a', leaseMs: 1500 });
    expect(await writes(OWNER, tenant, 1)).toBe('SC423');
    expect(await getUnitFence(shardPool(OWNER), tenant)).toMatchObject({ frozen: true, freezeToken: 'tok-a' });
    await untilLeaseRunsOut(OWNER, tenant, 10_000);
    expect(await getUnitFence(shardPool(OWNER), tenant)).toMatchObject({ epoch: 1, owned: true, frozen: false, leaseExpired: true });
    expect(await writes(OWNER, tenant, 1)).toBe('ok');
    expect(await writes(OWNER, tenant, 2)).toBe('SC421');
    expect(await writes(NEXT, tenant, 1)).toBe('SC421');
  });

  it('a pinned freeze never runs out; a pin after the lease ran out is refused and changes nothing', async () => {
    const pinned = await H.newTenant(OWNER, 'fp');
    await freezeSource(shardPool(OWNER), pinned, 1, { token: 'tok-p', leaseMs: 1000 });
    expect((await pinFreeze(shardPool(OWNER), pinned, 1, 'tok-p')).ok).toBe(true);
    // Another attempt's token cannot pin it (nor could it have, before).
    expect((await pinFreeze(shardPool(OWNER), pinned, 1, 'tok-other')).ok).toBe(false);
    await sleep(1500);
    expect(await getUnitFence(shardPool(OWNER), pinned)).toMatchObject({ frozen: true });
    expect(await writes(OWNER, pinned, 1)).toBe('SC423');

    const late = await H.newTenant(OWNER, 'fx');
    await freezeSource(shardPool(OWNER), late, 1, { token: 'tok-x', leaseMs: 300 });
    await untilLeaseRunsOut(OWNER, late, 10_000);
    const r = await pinFreeze(shardPool(OWNER), late, 1, 'tok-x');
    expect(r.ok).toBe(false);
    expect(r.current).toMatchObject({ frozen: false, leaseExpired: true });
    expect(await writes(OWNER, late, 1)).toBe('ok');
  });

  it('the directory refuses a switch compare-and-set after its freeze’s switch deadline, and changes nothing', async () => {
    const tenant = await H.newTenant(OWNER, 'fd');
    const moveId = `${tenant}.e1`;
    const freeze = (token: string, switchWithinMs: number) =>
      compareAndSetPlacement(
        directoryPool(),
        tenant,
        { shard: OWNER, epoch: 1, state: 'active' },
        { shard: OWNER, state: 'moving', moveId, freezeToken: token, switchWithinMs },
        { actor: 'lease-test', action: 'freeze' },
      );
    const switchCas = (token: string) =>
      compareAndSetPlacement(
        directoryPool(),
        tenant,
        { shard: OWNER, epoch: 1, state: 'moving', moveId, freezeToken: token, beforeSwitchDeadline: true },
        { shard: NEXT, state: 'active', moveId: null },
        { actor: 'lease-test', action: 'switch' },
      );
    expect((await freeze('tok-late', 300)).ok).toBe(true);
    await sleep(600);
    const refused = await switchCas('tok-late');
    expect(refused.ok).toBe(false);
    expect(await H.placement(tenant)).toMatchObject({ shard: OWNER, epoch: 1, state: 'moving', freezeToken: 'tok-late' });
    // A freeze without a deadline cannot switch under the check either (fail closed).
    const undo = await compareAndSetPlacement(
      directoryPool(),
      tenant,
      { shard: OWNER, epoch: 1, state: 'moving', moveId, freezeToken: 'tok-late' },
      { shard: OWNER, state: 'active', moveId: null },
      { actor: 'lease-test', action: 'unfreeze' },
    );
    expect(undo.ok).toBe(true);
    expect(
      (
        await compareAndSetPlacement(
          directoryPool(),
          tenant,
          { shard: OWNER, epoch: 1, state: 'active' },
          { shard: OWNER, state: 'moving', moveId, freezeToken: 'tok-none' },
          { actor: 'lease-test', action: 'freeze' },
        )
      ).ok,
    ).toBe(true);
    expect((await switchCas('tok-none')).ok).toBe(false);
    expect(await H.placement(tenant)).toMatchObject({ shard: OWNER, epoch: 1, state: 'moving' });
  });

  it('a cutover whose switch comes after the deadline is refused, unfreezes, takes its acceptance back, and no stale epoch writes anywhere', async () => {
    const tenant = await H.newTenant(OWNER, 'fs');
    const s = liveCutoverSteps(planFor(tenant, { leaseMs: 5000, switchWithinMs: 400 }), env());
    expect(await s.freeze(await s.standing())).toEqual({ ok: true });
    expect(await s.raiseFence(1000)).toEqual({ ok: true });
    expect(await s.pinFreeze()).toEqual({ ok: true });
    await sleep(700);
    await expect(s.switchOwner('0/0', null)).rejects.toThrow(/switch refused: the directory's switch deadline/);
    expect(await H.placement(tenant)).toMatchObject({ shard: OWNER, epoch: 1, state: 'active', moveId: null });
    expect(await getUnitFence(shardPool(NEXT), tenant)).toMatchObject({ epoch: 2, owned: false });
    expect(await writes(NEXT, tenant, 2)).toBe('SC421');
    expect(await writes(OWNER, tenant, 2)).toBe('SC421');
    expect(await writes(OWNER, tenant, 1)).toBe('ok');
  });

  it("a superseded attempt's late raise is refused: it cannot replace the later attempt's pinned freeze with a lease that runs out after its switch", async () => {
    const tenant = await H.newTenant(OWNER, 'fr');
    const plan = planFor(tenant, { leaseMs: 1500, switchWithinMs: 1200 });
    const a = liveCutoverSteps(plan, env());
    expect(await a.freeze(await a.standing())).toEqual({ ok: true });
    // A pauses before its raise; B takes the freeze over, raises, pins and switches.
    const b = liveCutoverSteps(plan, env());
    expect(await b.freeze(await b.standing())).toEqual({ ok: true });
    expect(await b.raiseFence(1000)).toEqual({ ok: true });
    expect(await b.pinFreeze()).toEqual({ ok: true });
    const late = await a.raiseFence(1000);
    expect(late.ok).toBe(false);
    expect(late.ok ? '' : late.reason).toMatch(/a later freeze \(generation \d+, this attempt's \d+\) raised it/);
    await b.switchOwner('0/0', null);
    expect(await H.placement(tenant)).toMatchObject({ shard: NEXT, epoch: 2, state: 'active' });
    // B's disown has not reached the old owner yet; A's lease, had it replaced B's pin, runs out now.
    await sleep(1800);
    expect(await getUnitFence(shardPool(OWNER), tenant)).toMatchObject({ epoch: 1, owned: true, frozen: true });
    expect(await writes(OWNER, tenant, 1)).toBe('SC423');
    await b.finishOldOwner();
    expect(await writes(OWNER, tenant, 1)).toBe('SC421');
  });

  it("after a switch whose old owner is never disowned, the old owner's lease running out reopens nothing: the stale epoch stays refused", async () => {
    const tenant = await H.newTenant(OWNER, 'fo');
    const s = liveCutoverSteps(planFor(tenant, { leaseMs: 1200, switchWithinMs: 800 }), env());
    expect(await s.freeze(await s.standing())).toEqual({ ok: true });
    expect(await s.raiseFence(1000)).toEqual({ ok: true });
    expect(await s.pinFreeze()).toEqual({ ok: true });
    await s.switchOwner('0/0', null);
    expect(await H.placement(tenant)).toMatchObject({ shard: NEXT, epoch: 2, state: 'active' });
    // finishOldOwner never reaches the old owner (a cut link): its fence still owns epoch 1, frozen.
    await sleep(1700);
    expect(await getUnitFence(shardPool(OWNER), tenant)).toMatchObject({ epoch: 1, owned: true, frozen: true });
    expect(await writes(OWNER, tenant, 1)).toBe('SC423');
    expect(await writes(NEXT, tenant, 2)).toBe('ok');
    await s.finishOldOwner();
    expect(await writes(OWNER, tenant, 1)).toBe('SC421');
  });
});
