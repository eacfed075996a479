// The cutover's lost-switch branch (lib/cutover/live.ts, switchOwner): an attempt whose freeze
// was taken over by a later attempt reaches the switch, makes the next owner accept the new
// epoch, loses the directory compare-and-set, and must take that acceptance back and fail:
// the directory stays with the later attempt, the next owner refuses the new epoch, and the
// old owner still owns the unit (fail closed: frozen under the later attempt's token).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { closePools, shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { liveCutoverSteps, LiveCutoverEnv } from '../../lib/cutover/live';
import type { CutoverPlan } from '../../lib/cutover/steps';
import { freezeLease } from '../../lib/cutover/lease';
import { getUnitFence } from '../../lib/shard/fence';

const OWNER = 'shard-a';
const NEXT = 'shard-b';

beforeAll(async () => {
  await H.prepareStack();
});
afterAll(async () => {
  await closePools();
});

const env = (faultPoint?: (name: string) => Promise<void>): LiveCutoverEnv => H.bareCutoverEnv(OWNER, NEXT, faultPoint);

/** A gate an attempt waits at inside switchOwner (after its acceptance), until released. */
function gate() {
  let reached!: () => void;
  let release!: () => void;
  const atGate = new Promise<void>((r) => (reached = r));
  const open = new Promise<void>((r) => (release = r));
  const hook = async (name: string) => {
    if (name !== 'after-accept-epoch') return;
    reached();
    await open;
  };
  return { hook, atGate, release };
}

const planFor = (tenant: string): CutoverPlan =>
  H.forwardCutoverPlan(tenant, { owner: OWNER, next: NEXT, fenceBudgetMs: 5000, lease: freezeLease(5000, 3000), actor: 'lost-switch-test' });

/** The early attempt freezes, the late one takes the freeze over; both are then free to switch. */
async function takenOver(tenant: string, early: LiveCutoverEnv, late: LiveCutoverEnv) {
  const plan = planFor(tenant);
  const a = liveCutoverSteps(plan, early);
  expect(await a.freeze(await a.standing())).toEqual({ ok: true });
  const b = liveCutoverSteps(plan, late);
  const standing = await b.standing();
  expect(standing.kind).toBe('frozen-by-this-move');
  expect(await b.freeze(standing)).toEqual({ ok: true });
  return { a, b };
}

async function expectSwitchedToNext(tenant: string) {
  expect(await H.placement(tenant)).toMatchObject({ shard: NEXT, epoch: 2, state: 'active', moveId: null });
  // The owner the directory names takes the unit's writes (before the generation guard it
  // refused them: the superseded attempt had taken the winner's acceptance back).
  expect(await getUnitFence(shardPool(NEXT), tenant)).toMatchObject({ epoch: 2, owned: true, frozen: false });
  expect(await H.tryWrite(NEXT, tenant, 2)).toBe('ok');
}

describe('cutover: a switch that loses the directory compare-and-set', () => {
  it('a superseded attempt that accepted first cannot take back the acceptance of the attempt that then switches', async () => {
    const tenant = await H.newTenant(OWNER, 'lsa');
    const g = gate();
    const { a, b } = await takenOver(tenant, env(), env(g.hook));
    // The late attempt accepts epoch 2 on the next owner and stalls before its directory CAS.
    const bSwitch = b.switchOwner('0/0', null);
    await g.atGate;
    // The early attempt reaches its switch now: its acceptance is refused (a later freeze's
    // attempt accepted), and it touches nothing.
    await expect(a.switchOwner('0/0', null)).rejects.toThrow(/switch superseded/);
    expect(await getUnitFence(shardPool(NEXT), tenant)).toMatchObject({ epoch: 2, owned: true });
    g.release();
    await bSwitch;
    await b.finishOldOwner();
    await expectSwitchedToNext(tenant);
    expect(await H.tryWrite(OWNER, tenant, 2)).toBe('SC421');
  });

  it('a superseded attempt whose switch CAS loses after the winner accepted takes back only its own acceptance', async () => {
    const tenant = await H.newTenant(OWNER, 'lsb');
    const ga = gate();
    const gb = gate();
    const { a, b } = await takenOver(tenant, env(ga.hook), env(gb.hook));
    // The early attempt accepts first and stalls; the late one accepts over it and stalls.
    const aSwitch = a.switchOwner('0/0', null);
    await ga.atGate;
    const bSwitch = b.switchOwner('0/0', null);
    await gb.atGate;
    // The early one wakes: its CAS loses (the freeze is the late one's); the acceptance on the
    // next owner is no longer its own, so it stays.
    ga.release();
    await expect(aSwitch).rejects.toThrow(/switch compare-and-set lost/);
    expect(await getUnitFence(shardPool(NEXT), tenant)).toMatchObject({ epoch: 2, owned: true });
    gb.release();
    await bSwitch;
    await b.finishOldOwner();
    await expectSwitchedToNext(tenant);
  });

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
      lease: freezeLease(5000, 3000),
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
