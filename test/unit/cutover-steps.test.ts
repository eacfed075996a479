// The cutover sequence (lib/cutover/steps.ts) over scripted steps and over its dry-run twin:
// the order of the verbs, the point of no return, and every way an attempt aborts before it.
import { describe, it, expect } from 'vitest';
import { runCutover, type CutoverPlan, type CutoverSteps, type Standing, type UnfreezeOutcome } from '../../lib/cutover/steps';
import { dryRunCutoverSteps, POINT_OF_NO_RETURN_MARK } from '../../lib/cutover/dry-run';

const plan: CutoverPlan = { unit: 'acme', moveId: 'acme.e3', owner: 'shard-a', next: 'shard-b', epoch: 3, direction: 'forward', fenceBudgetMs: 2000, actor: 'test' };

/** Steps that record each call and answer as scripted; `clock` advances by what each step "takes". */
function scripted(o: { standing?: Standing; freezeOk?: boolean; fenceOk?: boolean; applyOk?: boolean; diff?: string[]; sequencesOk?: boolean; unfreeze?: UnfreezeOutcome; stepMs?: number } = {}) {
  const calls: string[] = [];
  let now = 1000;
  const took = () => (now += o.stepMs ?? 10);
  const steps: CutoverSteps = {
    standing: async () => (calls.push('standing'), o.standing ?? { kind: 'open' }),
    preSyncBlobs: async () => void calls.push('preSyncBlobs'),
    freeze: async () => (calls.push('freeze'), took(), o.freezeOk === false ? { ok: false, reason: 'lost the race' } : { ok: true }),
    raiseFence: async () => (calls.push('raiseFence'), took(), o.fenceOk === false ? { ok: false, reason: 'writers held the lock' } : { ok: true }),
    applyToFencePoint: async () => (calls.push('applyToFencePoint'), took(), o.applyOk === false ? { ok: false, reason: 'did not reach' } : { ok: true, fenceLsn: '0/10' }),
    compare: async (onBlobs) => (calls.push('compare'), onBlobs(), took(), o.diff ?? []),
    advanceSequences: async () => (calls.push('advanceSequences'), took(), o.sequencesOk === false ? { ok: false, reason: 'setval refused' } : { ok: true }),
    markReverseStart: async () => void calls.push('markReverseStart'),
    switchOwner: async () => void calls.push('switchOwner'),
    finishOldOwner: async () => void calls.push('finishOldOwner'),
    unfreeze: async () => (calls.push('unfreeze'), o.unfreeze ?? 'unfrozen'),
    measuredPauseMs: async () => (calls.push('measuredPauseMs'), 777),
  };
  return { steps, calls, hooks: { faultPoint: async (n: string) => void calls.push(`fault:${n}`), now: () => now } };
}

describe('runCutover', () => {
  it('runs freeze, fence, apply, compare, sequences, reverse start, then the switch, then finishes the old owner', async () => {
    const s = scripted();
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r).toMatchObject({ ok: true, newEpoch: 4, fenceLsn: '0/10', alreadyDone: false });
    expect(s.calls).toEqual([
      'standing', 'preSyncBlobs', 'freeze', 'raiseFence', 'fault:after-fence-raised', 'applyToFencePoint', 'compare', 'advanceSequences', 'markReverseStart',
      'fault:before-switch', 'switchOwner', 'fault:after-switch-before-directory-notify', 'finishOldOwner',
    ]);
  });

  it.each([
    ['the fence lock budget is exceeded', { fenceOk: false }, 'writers held the lock'],
    ['the final apply does not reach the fence point', { applyOk: false }, 'did not reach'],
    ['the fingerprints differ', { diff: ['public.t: 3 rows on source vs 2 on target'] }, 'target differs from source at the fence'],
    ['the attempt overruns its budget', { stepMs: 800 }, 'longer than its budget'],
    ['the sequences cannot be advanced', { sequencesOk: false }, 'setval refused'],
  ])('unfreezes and never switches when %s', async (_name, o, reason) => {
    const s = scripted(o);
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toContain(reason);
    expect(s.calls).toContain('unfreeze');
    expect(s.calls).not.toContain('switchOwner');
    expect(s.calls).not.toContain('finishOldOwner');
  });

  it('reports fail-closed when the directory changed under an aborting attempt', async () => {
    const s = scripted({ diff: ['x'], unfreeze: 'lost' });
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toContain('left frozen, fail closed');
  });

  it('answers done when a concurrent delivery switched while this one aborted', async () => {
    const s = scripted({ applyOk: false, unfreeze: 'switched' });
    expect(await runCutover(s.steps, plan, s.hooks)).toMatchObject({ ok: true, alreadyDone: true, newEpoch: 4 });
    expect(s.calls).not.toContain('switchOwner');
  });

  it('a failed freeze changes nothing: no fence, no unfreeze', async () => {
    const s = scripted({ freezeOk: false });
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r).toMatchObject({ ok: false, reason: 'lost the race' });
    expect(s.calls).toEqual(['standing', 'preSyncBlobs', 'freeze']);
  });

  it('a redelivery after the switch only finishes the old owner and reports the directory-measured pause', async () => {
    const s = scripted({ standing: { kind: 'switched' } });
    expect(await runCutover(s.steps, plan, s.hooks)).toMatchObject({ ok: true, alreadyDone: true, pauseMs: 777 });
    expect(s.calls).toEqual(['standing', 'finishOldOwner', 'measuredPauseMs']);
  });

  it('a redelivery that finds its own freeze skips the blob pre-sync and the freeze, and reports the whole pause', async () => {
    const s = scripted({ standing: { kind: 'frozen-by-this-move' } });
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r).toMatchObject({ ok: true, pauseMs: 777, alreadyDone: false });
    expect(s.calls).not.toContain('freeze');
    expect(s.calls).not.toContain('preSyncBlobs');
    expect(s.calls.indexOf('raiseFence')).toBeLessThan(s.calls.indexOf('switchOwner'));
  });

  it("refuses a unit that is someone else's, touching nothing", async () => {
    const s = scripted({ standing: { kind: 'foreign', reason: 'moving under move other.e1' } });
    expect(await runCutover(s.steps, plan, s.hooks)).toMatchObject({ ok: false, reason: 'moving under move other.e1' });
    expect(s.calls).toEqual(['standing']);
  });

  it('the reverse direction does not record a reverse start and names its own fault point', async () => {
    const s = scripted();
    await runCutover(s.steps, { ...plan, direction: 'reverse' }, s.hooks);
    expect(s.calls).not.toContain('markReverseStart');
    expect(s.calls).toContain('advanceSequences');
    expect(s.calls).toContain('fault:mid-rollback');
  });
});

describe('the dry-run twin', () => {
  it('says, in the live order, what the cutover would do, with one marked point of no return', async () => {
    const dry = dryRunCutoverSteps(plan, { tables: ['public.accounts'] });
    const r = await runCutover(dry.steps, plan, { faultPoint: async () => {}, now: () => 0 });
    expect(r.ok).toBe(true);
    const order = ['check the directory', 'copy the blob delta', 'freeze:', 'raise the fence', 'apply slot', 'compare:', 'advance sequences', 'record where reverse', POINT_OF_NO_RETURN_MARK, 'finish the old owner'];
    expect(dry.log.map((l) => order.findIndex((o) => l.startsWith(o)))).toEqual(order.map((_, i) => i));
    expect(dry.log.filter((l) => l.includes(POINT_OF_NO_RETURN_MARK))).toHaveLength(1);
    expect(dry.log.join('\n')).toContain('epoch 4');
  });
});
