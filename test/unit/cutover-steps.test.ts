// The cutover sequence (lib/cutover/steps.ts) over scripted steps and over its dry-run twin:
// the order of the verbs, the point of no return, and every way an attempt aborts before it.
import { describe, it, expect } from 'vitest';
import { runCutover, type CutoverPlan, type CutoverSteps, type Standing, type UnfreezeOutcome } from '../../lib/cutover/steps';
import { dryRunCutoverSteps, POINT_OF_NO_RETURN_MARK } from '../../lib/cutover/dry-run';

const plan: CutoverPlan = {
  unit: 'acme',
  moveId: 'acme.e3',
  owner: 'shard-a',
  next: 'shard-b',
  epoch: 3,
  direction: 'forward',
  fenceBudgetMs: 2000,
  lease: { leaseMs: 5000, switchWithinMs: 4000 },
  actor: 'test',
};

/** Steps that record each call and answer as scripted; `clock` advances by what each step "takes". */
function scripted(
  o: {
    standing?: Standing;
    freezeOk?: boolean;
    fenceOk?: boolean;
    applyOk?: boolean;
    diff?: string[];
    unfreeze?: UnfreezeOutcome;
    stepMs?: number;
    throwIn?: string;
    unfreezeThrows?: boolean;
    compareNever?: boolean;
    sequencesOk?: boolean;
    pinOk?: boolean;
    frozenForMs?: number;
    /** Raises that in-flight writers outlast (writersHeld) before one succeeds. */
    fenceHeld?: number;
    /** Where the unit stands when re-read after a try unfroze for writers. */
    standingAfterUnfreeze?: Standing;
    /** What each wait for long writers before a freeze "took". */
    quietWaitMs?: number;
  } = {},
) {
  const calls: string[] = [];
  /** The lock budget of each raise, in order. */
  const lockBudgets: number[] = [];
  let held = o.fenceHeld ?? 0;
  let unfrozen = false;
  let now = 1000;
  const took = () => (now += o.stepMs ?? 10);
  const call = <T>(name: string, answer: T, advance = false): T => {
    calls.push(name);
    if (o.throwIn === name) throw new Error(`${name} exploded`);
    if (advance) took();
    return answer;
  };
  const steps: CutoverSteps = {
    standing: async () => call('standing', (unfrozen && o.standingAfterUnfreeze) || (o.standing ?? { kind: 'open' })),
    awaitQuietWriters: async () => call('awaitQuietWriters', o.quietWaitMs ?? 0),
    preSyncBlobs: async () => call('preSyncBlobs', undefined),
    openFinalApply: async () => call('openFinalApply', undefined),
    closeFinalApply: () => void calls.push('closeFinalApply'),
    startFinalBlobSync: () => void calls.push('startFinalBlobSync'),
    freeze: async () => call('freeze', o.freezeOk === false ? { ok: false, reason: 'lost the race' } : { ok: true }, true),
    raiseFence: async (lockBudgetMs) => {
      lockBudgets.push(lockBudgetMs);
      if (held > 0) {
        held--;
        return call('raiseFence', { ok: false, reason: 'in-flight writers held the fence lock', writersHeld: true }, true);
      }
      return call('raiseFence', o.fenceOk === false ? { ok: false, reason: 'writers held the lock' } : { ok: true }, true);
    },
    applyToFencePoint: async () =>
      call('applyToFencePoint', o.applyOk === false ? { ok: false, reason: 'did not reach' } : { ok: true, fenceLsn: '0/10' }, true),
    compare: async (mark) => {
      if (o.compareNever) {
        calls.push('compare');
        return new Promise<string[]>(() => {});
      }
      mark('delta read');
      mark('blobs');
      mark('rows');
      return call('compare', o.diff ?? [], true);
    },
    advanceSequences: async () => call('advanceSequences', o.sequencesOk === false ? { ok: false, reason: 'setval refused' } : { ok: true }, true),
    reverseStartLsn: async () => call('reverseStartLsn', '0/20'),
    pinFreeze: async () => call('pinFreeze', o.pinOk === false ? { ok: false, reason: 'its lease ran out' } : { ok: true }),
    switchOwner: async () => call('switchOwner', undefined),
    finishOldOwner: async () => call('finishOldOwner', undefined),
    unfreeze: async () => {
      if (o.unfreezeThrows) throw new Error('directory down');
      unfrozen = true;
      return call('unfreeze', o.unfreeze ?? 'unfrozen');
    },
    measuredPauseMs: async () => call('measuredPauseMs', 777),
    frozenForMs: async () => call('frozenForMs', o.frozenForMs ?? null),
  };
  return {
    steps,
    calls,
    lockBudgets,
    hooks: {
      faultPoint: async (n: string) => {
        calls.push(`fault:${n}`);
      },
      now: () => now,
    },
  };
}

/** A fresh attempt's calls before the freeze: where the unit stands, the blob pre-sync, the final apply opened. */
const BEFORE_FREEZE = ['standing', 'openFinalApply', 'preSyncBlobs', 'fault:after-final-apply-opened', 'awaitQuietWriters'];

describe('runCutover', () => {
  it('opens the final apply before the freeze, runs freeze, fence, apply, compare, sequences, reverse start, pins the freeze, then the switch, then finishes the old owner, and closes the final apply last', async () => {
    const s = scripted();
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r).toMatchObject({ ok: true, newEpoch: 4, fenceLsn: '0/10', alreadyDone: false });
    expect(s.calls).toEqual([
      ...BEFORE_FREEZE,
      'freeze',
      'raiseFence',
      'fault:after-fence-raised',
      'startFinalBlobSync',
      'applyToFencePoint',
      'compare',
      'advanceSequences',
      'reverseStartLsn',
      'pinFreeze',
      'fault:before-switch',
      'switchOwner',
      'fault:after-switch-committed',
      'finishOldOwner',
      'closeFinalApply',
    ]);
  });

  it.each([
    ['the fence lock budget is exceeded', { fenceOk: false }, 'writers held the lock'],
    ['the final apply does not reach the fence point', { applyOk: false }, 'did not reach'],
    ['the fingerprints differ', { diff: ['public.t: 3 rows on source vs 2 on target'] }, 'target differs from source at the fence'],
    ['the attempt overruns its budget', { stepMs: 800 }, 'longer than its budget'],
    ['the sequences cannot be advanced', { sequencesOk: false }, 'setval refused'],
    ["the owner's freeze cannot be pinned (its lease ran out)", { pinOk: false }, 'its lease ran out'],
  ])('unfreezes and never switches when %s', async (_name, o, reason) => {
    const s = scripted(o);
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toContain(reason);
    expect(s.calls).toContain('unfreeze');
    expect(s.calls).not.toContain('switchOwner');
    expect(s.calls).not.toContain('finishOldOwner');
    expect(s.calls.at(-1), 'the final apply opened before the freeze is closed on the way out').toBe('closeFinalApply');
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

  it('a failed freeze re-reads where the unit stands, then declines, changing nothing: no fence, no unfreeze', async () => {
    const s = scripted({ freezeOk: false });
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r).toMatchObject({ ok: false, reason: 'lost the race' });
    expect(s.calls).toEqual([...BEFORE_FREEZE, 'freeze', 'standing', 'freeze', 'standing', 'freeze', 'standing', 'freeze', 'closeFinalApply']);
  });

  it('an unfreeze that finds the unit switched by another delivery finishes the old owner before answering done', async () => {
    const s = scripted({ applyOk: false, unfreeze: 'switched' });
    expect(await runCutover(s.steps, plan, s.hooks)).toMatchObject({ ok: true, alreadyDone: true });
    expect(s.calls.slice(-3)).toEqual(['unfreeze', 'finishOldOwner', 'closeFinalApply']);
  });

  it('a redelivery after the switch only finishes the old owner and reports the directory-measured pause', async () => {
    const s = scripted({ standing: { kind: 'switched' } });
    expect(await runCutover(s.steps, plan, s.hooks)).toMatchObject({ ok: true, alreadyDone: true, pauseMs: 777 });
    expect(s.calls).toEqual(['standing', 'finishOldOwner', 'measuredPauseMs']);
  });

  it('a redelivery that finds its own freeze skips the blob pre-sync, takes the freeze over, and reports the whole pause', async () => {
    const s = scripted({ standing: { kind: 'frozen-by-this-move', token: 'old' } });
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r).toMatchObject({ ok: true, pauseMs: 777, alreadyDone: false });
    expect(s.calls.indexOf('freeze')).toBeLessThan(s.calls.indexOf('raiseFence'));
    expect(s.calls).not.toContain('preSyncBlobs');
    expect(s.calls.indexOf('raiseFence')).toBeLessThan(s.calls.indexOf('switchOwner'));
  });

  it('a takeover of a freeze that already used its whole budget unfreezes instead of running a budget of its own', async () => {
    const s = scripted({ standing: { kind: 'frozen-by-this-move', token: 'old' }, frozenForMs: plan.fenceBudgetMs + 100 });
    const r = await runCutover(s.steps, plan, s.hooks);
    expect(r).toMatchObject({ ok: false, reason: expect.stringMatching(/budget/) });
    // The pause it reports is the whole freeze's, the silent delivery's share included.
    expect(r.pauseMs).toBeGreaterThan(plan.fenceBudgetMs);
    expect(s.calls).toContain('unfreeze');
    expect(s.calls).not.toContain('pinFreeze');
    expect(s.calls).not.toContain('switchOwner');
  });

  it('a takeover early in the freeze keeps what is left of the budget and switches', async () => {
    const s = scripted({ standing: { kind: 'frozen-by-this-move', token: 'old' }, frozenForMs: 300 });
    expect(await runCutover(s.steps, plan, s.hooks)).toMatchObject({ ok: true, pauseMs: 777 });
    expect(s.calls).toContain('switchOwner');
  });

  it("refuses a unit that is someone else's, touching nothing", async () => {
    const s = scripted({ standing: { kind: 'foreign', reason: 'moving under move other.e1' } });
    expect(await runCutover(s.steps, plan, s.hooks)).toMatchObject({ ok: false, reason: 'moving under move other.e1' });
    expect(s.calls).toEqual(['standing']);
  });

  it.each(['raiseFence', 'applyToFencePoint', 'compare', 'reverseStartLsn', 'fault:before-switch'])(
    'an exception in %s inside the frozen window unfreezes and returns a reason, never switches',
    async (where) => {
      const s = scripted(where.startsWith('fault:') ? {} : { throwIn: where });
      if (where.startsWith('fault:')) {
        s.hooks.faultPoint = async (n: string) => {
          s.calls.push(`fault:${n}`);
          if (`fault:${n}` === where) throw new Error('injected');
        };
      }
      const r = await runCutover(s.steps, plan, s.hooks);
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.reason).toMatch(/failed inside the frozen window: .*; unfrozen, will retry/);
      expect(s.calls).toContain('unfreeze');
      expect(s.calls).not.toContain('switchOwner');
    },
  );

  it('rethrows the error when it cannot even unfreeze, so the next attempt takes the freeze over', async () => {
    const s = scripted({ throwIn: 'applyToFencePoint', unfreezeThrows: true });
    await expect(runCutover(s.steps, plan, s.hooks)).rejects.toThrow('applyToFencePoint exploded');
    expect(s.calls).not.toContain('switchOwner');
  });

  it('a comparison that outlives the fence budget is abandoned: unfreeze, no switch; the result says where the pause went', async () => {
    const s = scripted({ compareNever: true });
    const r = await runCutover(s.steps, { ...plan, fenceBudgetMs: 100 }, s.hooks);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toContain('comparison did not finish within the fence budget');
    if (!r.ok) expect(Object.keys(r.steps ?? {})).toEqual(['fenced', 'applied', 'compared']);
    expect(s.calls).toContain('unfreeze');
    expect(s.calls).not.toContain('switchOwner');
  });

  it('a final catch-up that outlives the fence budget (its set-up and tear-down on a slow link) is abandoned: unfreeze, no switch', async () => {
    const s = scripted();
    s.steps.applyToFencePoint = () => new Promise(() => {});
    const t0 = Date.now();
    const r = await runCutover(s.steps, { ...plan, fenceBudgetMs: 100 }, s.hooks);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toContain('final catch-up did not finish within the fence budget of 100 ms');
    expect(Date.now() - t0).toBeLessThan(5000); // the budget plus the grace, not a hang
    expect(s.calls).toContain('unfreeze');
    expect(s.calls).not.toContain('compare');
    expect(s.calls).not.toContain('switchOwner');
  });

  describe('writers that outlast the fence lock budget', () => {
    const locked: CutoverPlan = { ...plan, fenceLock: { waitMs: 150, retries: 2 } };
    /** One try from the wait for long writers to its unfreeze, as the calls record it. */
    const heldTry = ['awaitQuietWriters', 'freeze', 'raiseFence', 'unfreeze', 'standing'];

    it('unfreeze, wait for them outside the pause, freeze again: the short budget on every try but the last, each aborted pause reported', async () => {
      const s = scripted({ fenceHeld: 2, quietWaitMs: 40 });
      const r = await runCutover(s.steps, locked, s.hooks);
      expect(r).toMatchObject({ ok: true, newEpoch: 4, writersWaitedMs: 120 });
      expect(r.abortedPausesMs).toHaveLength(2);
      for (const p of r.abortedPausesMs!) expect(p).toBeGreaterThan(0);
      expect(s.lockBudgets).toEqual([150, 150, 2000]);
      expect(s.calls.slice(0, 4 + 2 * heldTry.length)).toEqual([...BEFORE_FREEZE.slice(0, 4), ...heldTry, ...heldTry]);
      expect(s.calls.filter((c) => c === 'switchOwner')).toHaveLength(1);
    });

    it('a raise that the short budget lets through needs no retry', async () => {
      const s = scripted();
      const r = await runCutover(s.steps, locked, s.hooks);
      expect(r.ok).toBe(true);
      expect(r.abortedPausesMs).toBeUndefined();
      expect(s.lockBudgets).toEqual([150]);
    });

    it('when every try is held up, the last one (the whole budget) aborts as before: no switch, the earlier pauses reported with it', async () => {
      const s = scripted({ fenceHeld: 3 });
      const r = await runCutover(s.steps, locked, s.hooks);
      expect(r).toMatchObject({ ok: false, reason: expect.stringContaining('held the fence lock') });
      expect(r.abortedPausesMs).toHaveLength(2);
      expect(s.lockBudgets).toEqual([150, 150, 2000]);
      expect(s.calls).not.toContain('switchOwner');
      expect(s.calls.at(-1)).toBe('closeFinalApply');
    });

    it('does not retry after another reason to abort', async () => {
      const s = scripted({ fenceOk: false });
      const r = await runCutover(s.steps, locked, s.hooks);
      expect(r).toMatchObject({ ok: false, reason: 'writers held the lock' });
      expect(s.lockBudgets).toEqual([150]);
      expect(r.abortedPausesMs).toBeUndefined();
    });

    it("stops retrying when the unit is someone else's after the unfreeze, with that reason, its pause counted once", async () => {
      const s = scripted({ fenceHeld: 2, standingAfterUnfreeze: { kind: 'foreign', reason: 'moving under move other.e1' } });
      const r = await runCutover(s.steps, locked, s.hooks);
      expect(r).toMatchObject({ ok: false, reason: 'moving under move other.e1' });
      expect(r.pauseMs).toBeGreaterThan(0);
      expect(r.abortedPausesMs).toBeUndefined();
      expect(s.lockBudgets).toEqual([150]);
      expect(s.calls.filter((c) => c === 'freeze')).toHaveLength(1);
    });

    it('answers done when another delivery switched the unit after the unfreeze, finishing the old owner', async () => {
      const s = scripted({ fenceHeld: 2, standingAfterUnfreeze: { kind: 'switched' } });
      const r = await runCutover(s.steps, locked, s.hooks);
      expect(r).toMatchObject({ ok: true, alreadyDone: true, newEpoch: 4, pauseMs: 777 });
      expect(r.abortedPausesMs).toHaveLength(1);
      expect(s.calls.filter((c) => c === 'freeze')).toHaveLength(1);
      expect(s.calls).toContain('finishOldOwner');
      expect(s.calls).not.toContain('switchOwner');
    });

    it('a budget no longer than the lock wait, or no retries, is one try with the whole budget', async () => {
      for (const p of [
        { ...plan, fenceBudgetMs: 150, fenceLock: { waitMs: 150, retries: 2 } },
        { ...plan, fenceLock: { waitMs: 150, retries: 0 } },
      ]) {
        const s = scripted({ fenceHeld: 1 });
        const r = await runCutover(s.steps, p, s.hooks);
        expect(r.ok).toBe(false);
        expect(s.lockBudgets).toEqual([p.fenceBudgetMs]);
      }
    });

    it('a takeover of its own freeze does not wait for writers before it (it is frozen already)', async () => {
      const s = scripted({ standing: { kind: 'frozen-by-this-move', token: 'old' } });
      await runCutover(s.steps, locked, s.hooks);
      expect(s.calls).not.toContain('awaitQuietWriters');
    });
  });

  it('the reverse direction does not measure a reverse start and names its own fault point', async () => {
    const s = scripted();
    await runCutover(s.steps, { ...plan, direction: 'reverse' }, s.hooks);
    expect(s.calls).not.toContain('reverseStartLsn');
    expect(s.calls).toContain('advanceSequences');
    expect(s.calls).toContain('fault:mid-rollback');
  });
});

describe('heartbeats inside the frozen window', () => {
  it('come from the steps: once frozen, after each step up to the switch, never before the freeze', async () => {
    const s = scripted();
    const beats: string[] = [];
    await runCutover(s.steps, plan, { ...s.hooks, progress: (step) => beats.push(`${step}@${s.calls.length}`) });
    const at = (name: string) => s.calls.indexOf(name) + 1;
    expect(beats[0]).toBe(`frozen@${at('freeze')}`);
    expect(beats.map((b) => b.split('@')[0])).toEqual([
      'frozen',
      'fenced',
      'applied',
      'delta read',
      'blobs',
      'rows',
      'compared',
      'sequences',
      'pinned',
      'switched',
    ]);
  });

  it('stop when a step hangs: nothing beats while the fence point is never reached', async () => {
    const s = scripted();
    let release!: () => void;
    s.steps.applyToFencePoint = () => new Promise((r) => (release = () => r({ ok: false, reason: 'released' })));
    const beats: string[] = [];
    const run = runCutover(s.steps, plan, { ...s.hooks, progress: (step) => beats.push(step) });
    await new Promise((r) => setTimeout(r, 50));
    expect(beats).toEqual(['frozen', 'fenced']);
    release();
    await run;
  });
});

describe('the dry-run twin', () => {
  it('says, in the live order, what the cutover would do, with one marked point of no return', async () => {
    const p: CutoverPlan = { ...plan, fenceLock: { waitMs: 150, retries: 3 } };
    const dry = dryRunCutoverSteps(p, { tables: ['public.accounts'], longWrites: { longWriteMs: 50, longWriteMaxWaitMs: 15000 } });
    const r = await runCutover(dry.steps, p, { faultPoint: async () => {}, now: () => 0 });
    expect(r.ok).toBe(true);
    const order = [
      'check the directory',
      'open the final catch-up',
      'copy the blob delta',
      'wait, before the freeze',
      'freeze:',
      'raise the fence',
      'start the final blob sync',
      'apply slot',
      'compare:',
      'advance sequences',
      'measure where reverse',
      'pin the freeze',
      POINT_OF_NO_RETURN_MARK,
      'finish the old owner',
    ];
    expect(dry.log.map((l) => order.findIndex((o) => l.startsWith(o)))).toEqual(order.map((_, i) => i));
    expect(dry.log.filter((l) => l.includes(POINT_OF_NO_RETURN_MARK))).toHaveLength(1);
    expect(dry.log.join('\n')).toContain('epoch 4');
    expect(dry.log.find((l) => l.startsWith('raise the fence'))).toContain('waiting at most 150 ms for in-flight writers; if they hold it longer, unfreeze');
  });
});
