// The cutover as a sequence of named verbs (Vitess's traffic switcher, Ghostferry's Run()):
//   openFinalApply → preSyncBlobs → awaitQuietWriters → freeze → raiseFence → startFinalBlobSync → applyToFencePoint → compare → advanceSequences → pinFreeze → switchOwner → finishOldOwner
// `runCutover` is the one sequence; `CutoverSteps` has a live implementation (live.ts) and a
// dry-run twin (dry-run.ts) that only reports what it would do, so `move plan` and the real
// move cannot drift apart. `switchOwner` is the point of no return: before it, any failure
// unfreezes (directory first, then the guarded fence) and returns a reason; after it the
// cutover is only completed, never undone. The owner's freeze is a lease (lib/cutover/lease.ts):
// a worker cut off from the owner cannot hold the unit frozen past it, and `pinFreeze` makes it
// permanent, while it still runs, right before the switch. Pure orchestration: no I/O of its own.
import type { FreezeLease } from './lease';

export type Direction = 'forward' | 'reverse';

export interface CutoverPlan {
  unit: string;
  moveId: string;
  /** The shard that owns the unit now, and the one that will. */
  owner: string;
  next: string;
  /** The epoch the owner holds; the switch makes it epoch + 1. */
  epoch: number;
  direction: Direction;
  fenceBudgetMs: number;
  /** The owner's freeze lease and the directory's switch deadline (freezeLease(fenceBudgetMs, ...)). */
  lease: FreezeLease;
  actor: string;
  /**
   * The fence raise's wait for in-flight writers on every try but the last: past `waitMs` the
   * attempt unfreezes, waits for those writers outside the pause (awaitQuietWriters) and freezes
   * again, at most `retries` times; the last try waits the whole fence budget, as one try without
   * this does. A write running long at the freeze then costs the tenant `waitMs`, not its length.
   */
  fenceLock?: { waitMs: number; retries: number };
}

/** Where the unit stands when an attempt begins (a redelivery may find any of these). */
export type Standing =
  | { kind: 'open' } // active on the owner: a fresh attempt
  | { kind: 'frozen-by-this-move'; token?: string } // an earlier attempt of this move froze it (and died or stalled)
  | { kind: 'switched' } // a previous delivery already switched
  | { kind: 'foreign'; reason: string }; // someone else's: not ours to touch

/** A step that may decline; `reason` is for the operator. */
export type StepAnswer = { ok: true } | { ok: false; reason: string };
/** The fence raise's answer: `writersHeld` when in-flight writers outlasted its lock budget (nothing was raised). */
export type RaiseAnswer = { ok: true } | { ok: false; reason: string; writersHeld?: boolean };

/**
 * The parts of `compare` that end on their own (the blob sync and the fingerprints run side by
 * side). The blob part is 'blobs via index' when it was the bounded delta of the blob index rows
 * the stream changed, 'blobs' when it was the whole-prefix sync.
 */
export type ComparePart = 'delta read' | 'blobs' | 'blobs via index' | 'rows';

export type UnfreezeOutcome = 'unfrozen' | 'switched' | 'lost';

/** What the frozen window's final blob delta was: which way, how many objects it looked at and copied. */
export interface WindowBlobSync {
  /** 'index': the objects of the blob index rows the stream changed; 'prefix': the whole prefix listed on both sides. */
  via: 'index' | 'prefix';
  /** Index names changed since the last comparison ('index'), or source objects listed ('prefix'). */
  objects: number;
  copied: number;
  /** S3 requests made ('index' only: the prefix sync does not count them). */
  requests?: number;
}

export interface CutoverSteps {
  standing(): Promise<Standing>;
  /** Copies blobs right before the freeze (the final catch-up already open), so the delta under the fence is only the last moments'. */
  preSyncBlobs(): Promise<void>;
  /**
   * Opens the final catch-up before the freeze (its sessions set up, the stream caught up while
   * writes continue), so the frozen window holds only the last changes and none of the set-up;
   * `applyToFencePoint` then uses it. Best effort: when it cannot open, the apply opens its own.
   */
  openFinalApply(): Promise<void>;
  /** Ends an opened final apply that was not used (or is done), without waiting for its tear-down. */
  closeFinalApply(): void;
  /**
   * Directory compare-and-set active → moving under this attempt's unique freeze token; when an
   * earlier attempt of this move left it frozen, takes that freeze over (a new token), so the
   * earlier attempt, should it wake up, can no longer unfreeze or switch.
   */
  freeze(standing: Standing): Promise<StepAnswer>;
  /**
   * Before a freeze, outside the pause: waits (bounded) until no writer has held the unit's write
   * lock on the owner long, so the fence does not hold every write of the unit behind one long one.
   * Resolves to how long it waited (0: quiet at once).
   */
  awaitQuietWriters(): Promise<number>;
  /** The owner's fence refuses writes; waits for in-flight writers at most `lockBudgetMs`. */
  raiseFence(lockBudgetMs: number): Promise<RaiseAnswer>;
  /**
   * Right after the fence: starts the final blob delta when it needs nothing from the stream (a
   * unit not written only through the blob index gets the whole-prefix sync), so it runs beside
   * the final catch-up; `compare` waits for it and `unfreeze` stops it. Nothing otherwise.
   */
  startFinalBlobSync(): void;
  /** Applies the stream up to the owner's WAL position after the fence; returns that position. */
  applyToFencePoint(budgetMs: number): Promise<{ ok: true; fenceLsn: string } | { ok: false; reason: string }>;
  /**
   * The final blob delta and the per-table fingerprints; returns the differences (empty = equal).
   * Calls `mark` as each part ends ('delta read', 'blobs' or 'blobs via index', 'rows'), so a slow window says which part held it.
   */
  compare(mark: (part: ComparePart) => void): Promise<string[]>;
  /** This attempt's window blob delta, once compare has run it (undefined before, or when it did not end). */
  windowBlobSync?(): WindowBlobSync | undefined;
  /**
   * The next owner's sequences that feed the moved tables go past every value the unit holds
   * there (never backwards), so its first insert after the switch cannot hit a duplicate key.
   * Both directions: a rollback advances the old owner's sequences the same way.
   */
  advanceSequences(): Promise<StepAnswer>;
  /** Forward only: where reverse replication (next → owner) will start, the next owner's WAL position now. */
  reverseStartLsn(): Promise<string>;
  /**
   * The owner's freeze stops expiring, refused once its lease ran out (writes may have passed since
   * the fence point): after a switch nothing but a disown may change the old owner's fence.
   */
  pinFreeze(): Promise<StepAnswer>;
  /**
   * POINT OF NO RETURN: the next owner accepts epoch + 1 and the directory moves to it (only from
   * this attempt's freeze), with the reverse start in the same directory transaction. Throws if lost.
   */
  switchOwner(fenceLsn: string, reverseStartLsn: string | null): Promise<void>;
  /** The old owner refuses every write of the unit at the new epoch and below. */
  finishOldOwner(): Promise<void>;
  /** Undoes a freeze of this move: directory first, then the guarded fence. */
  unfreeze(reason: string): Promise<UnfreezeOutcome>;
  /** The whole write pause as the directory's clock saw it (freeze → switch), when known. */
  measuredPauseMs(): Promise<number | null>;
  /** How long this move's freeze has held the unit so far, on the directory's clock (null when unknown). */
  frozenForMs(): Promise<number | null>;
}

/**
 * `abortedPausesMs`: the pauses of tries this attempt unfroze to wait for long writers (then froze
 * again); write pauses too. `writersWaitedMs`: what it waited, outside the pause, for long writers.
 */
type CutoverExtras = { steps?: Record<string, number>; blobSync?: WindowBlobSync; abortedPausesMs?: number[]; writersWaitedMs?: number };
export type CutoverResult =
  | ({ ok: true; newEpoch: number; pauseMs: number; fenceLsn: string; alreadyDone: boolean } & CutoverExtras)
  | ({ ok: false; reason: string; pauseMs: number; mismatches: string[] } & CutoverExtras);

export interface CutoverHooks {
  /** Named fault points for the crash suite. */
  faultPoint(name: string): Promise<void>;
  now(): number;
  /**
   * Called once the unit is frozen and after each step inside the frozen window: the activity's
   * heartbeat comes from here there, never from a timer that would keep beating while a step hangs.
   */
  progress?(step: string): void;
}

export const CUTOVER_FAULT_POINTS = {
  /** The final catch-up is open and caught up, the unit not frozen yet. */
  finalApplyOpened: (d: Direction) => (d === 'forward' ? 'after-final-apply-opened' : 'rollback-after-final-apply-opened'),
  fenceRaised: (d: Direction) => (d === 'forward' ? 'after-fence-raised' : 'mid-rollback'),
  beforeSwitch: (d: Direction) => (d === 'forward' ? 'before-switch' : 'rollback-before-switch'),
  /** Inside switchOwner: the next owner accepts the new epoch, the directory does not yet say so. */
  afterAcceptEpoch: (d: Direction) => (d === 'forward' ? 'after-accept-epoch' : 'rollback-after-accept-epoch'),
  /** After the directory's switch transaction (and its NOTIFY) committed, before the old owner is finished. */
  afterSwitch: (d: Direction) => (d === 'forward' ? 'after-switch-committed' : 'rollback-after-switch-committed'),
} as const;

/** The one cutover sequence, over either implementation of the steps. */
export async function runCutover(s: CutoverSteps, plan: CutoverPlan, hooks: CutoverHooks): Promise<CutoverResult> {
  const newEpoch = plan.epoch + 1;
  const standing = await s.standing();
  if (standing.kind === 'switched') {
    // Redelivered after the switch committed: finish the owner's side and report done.
    await s.finishOldOwner();
    return { ok: true, newEpoch, pauseMs: (await s.measuredPauseMs()) ?? 0, fenceLsn: '', alreadyDone: true };
  }
  if (standing.kind === 'foreign') return { ok: false, reason: standing.reason, pauseMs: 0, mismatches: [] };
  const resumed = standing.kind === 'frozen-by-this-move';
  await s.openFinalApply();
  try {
    // After the final catch-up is open (it streams on meanwhile) and right before the freeze:
    // the blob delta left for the frozen window is only what changed during this copy.
    if (!resumed) await s.preSyncBlobs();
    await hooks.faultPoint(CUTOVER_FAULT_POINTS.finalApplyOpened(plan.direction));
    const retries = plan.fenceLock && plan.fenceLock.waitMs < plan.fenceBudgetMs ? Math.max(0, plan.fenceLock.retries) : 0;
    const abortedPausesMs: number[] = [];
    let writersWaitedMs = 0;
    const extras = () => ({ ...(abortedPausesMs.length ? { abortedPausesMs } : {}), ...(writersWaitedMs > 0 ? { writersWaitedMs } : {}) });
    let now: Standing = standing;
    for (let i = 0; ; i++) {
      // A takeover is frozen already: waiting here would only lengthen its pause.
      if (now.kind === 'open') writersWaitedMs += await s.awaitQuietWriters();
      const lockBudgetMs = i < retries ? plan.fenceLock!.waitMs : plan.fenceBudgetMs;
      const { writersHeld, ...r } = await frozenWindow(s, plan, hooks, now, i === 0 && resumed, lockBudgetMs);
      if (r.ok || !writersHeld || i >= retries) return { ...r, ...extras() };
      // Unfrozen with nothing raised: the writers that held the fence up are waited for before
      // the next freeze, so the tenant's writes are not held behind them.
      now = await s.standing();
      if (now.kind === 'open') {
        abortedPausesMs.push(r.pauseMs);
        continue;
      }
      // Another delivery of this move took the unit meanwhile: its answer, as after a lost freeze.
      if (now.kind === 'switched') {
        abortedPausesMs.push(r.pauseMs);
        await s.finishOldOwner();
        return { ok: true, newEpoch: plan.epoch + 1, pauseMs: (await s.measuredPauseMs()) ?? 0, fenceLsn: '', alreadyDone: true, ...extras() };
      }
      return { ...r, ...(now.kind === 'foreign' ? { reason: now.reason } : {}), ...extras() };
    }
  } finally {
    s.closeFinalApply();
  }
}

/** From the freeze to the answer: every way out before the switch unfreezes first. */
async function frozenWindow(
  s: CutoverSteps,
  plan: CutoverPlan,
  hooks: CutoverHooks,
  standing: Standing,
  resumed: boolean,
  lockBudgetMs: number,
): Promise<CutoverResult & { writersHeld?: boolean }> {
  const newEpoch = plan.epoch + 1;
  let t0 = hooks.now();
  const elapsed = () => hooks.now() - t0;
  const left = () => plan.fenceBudgetMs - elapsed();
  // Where the write pause goes: ms since the freeze at the end of each step.
  const steps: Record<string, number> = {};
  const blobSync = () => {
    const b = s.windowBlobSync?.();
    return b ? { blobSync: b } : {};
  };
  const mark = (name: string) => {
    hooks.progress?.(name);
    return (steps[name] = elapsed());
  };
  const abort = async (reason: string, mismatches: string[] = []): Promise<CutoverResult> => {
    const u = await s.unfreeze(reason);
    // A concurrent delivery switched meanwhile: that is the answer, once the old owner is
    // finished (that delivery may have died before finishing it).
    if (u === 'switched') {
      await s.finishOldOwner();
      return { ok: true, newEpoch, pauseMs: elapsed(), fenceLsn: '', alreadyDone: true };
    }
    return {
      ok: false,
      reason: u === 'lost' ? `${reason}; and the directory changed under the move (left frozen, fail closed)` : reason,
      pauseMs: elapsed(),
      mismatches,
      // Where an aborted pause went, too (absent when it never froze).
      ...(Object.keys(steps).length ? { steps } : {}),
      ...blobSync(),
    };
  };

  // A lost freeze compare-and-set re-reads where the unit stands (another delivery of this
  // move may have frozen or switched it meanwhile) instead of walking away from it.
  let f = await s.freeze(standing);
  for (let i = 0; !f.ok && i < 3; i++) {
    const now = await s.standing();
    if (now.kind === 'switched') {
      await s.finishOldOwner();
      return { ok: true, newEpoch, pauseMs: (await s.measuredPauseMs()) ?? 0, fenceLsn: '', alreadyDone: true };
    }
    if (now.kind === 'foreign') return { ok: false, reason: now.reason, pauseMs: 0, mismatches: [] };
    resumed ||= now.kind === 'frozen-by-this-move';
    f = await s.freeze(now);
  }
  if (!f.ok) return { ok: false, reason: f.reason, pauseMs: 0, mismatches: [] };
  hooks.progress?.('frozen');
  // A takeover (an earlier delivery froze, then went silent) spends what is left of the budget
  // since the freeze, not a budget of its own: otherwise the unit could stay frozen for the time
  // to notice the silent delivery plus a whole second budget (§5.8). Past it, the steps below
  // find no budget left and the attempt unfreezes.
  if (resumed) t0 -= Math.max(0, (await s.frozenForMs().catch(() => null)) ?? 0);

  // From here to the switch the unit is frozen: every way out, an answer or an exception,
  // unfreezes first (fail open), except when the directory shows someone else's state (fail closed).
  let step = 'raise the fence';
  let fenceLsn: string;
  let reverseStart: string | null = null;
  try {
    const fence = await s.raiseFence(lockBudgetMs);
    if (!fence.ok) return { ...(await abort(fence.reason)), ...(fence.writersHeld ? { writersHeld: true } : {}) };
    mark('fenced');
    await hooks.faultPoint(CUTOVER_FAULT_POINTS.fenceRaised(plan.direction));
    s.startFinalBlobSync();

    step = 'apply to the fence point';
    // The apply bounds its own waits by the budget, but not its set-up and tear-down (a dozen round
    // trips: on a 350 ms link they held the tenant frozen 9 s against a 2 s budget). Past the budget
    // it is left to finish on its own (what it commits is the target's progress, nothing more; the
    // next round takes its apply session over), and the attempt unfreezes.
    const applyBudget = Math.max(200, left());
    const applied = await withinMs(s.applyToFencePoint(applyBudget), applyBudget + FENCE_APPLY_GRACE_MS);
    mark('applied');
    if (applied === TIMED_OUT) return await abort(`final catch-up did not finish within the fence budget of ${plan.fenceBudgetMs} ms`);
    if (!applied.ok) return await abort(applied.reason);
    fenceLsn = applied.fenceLsn;

    step = 'compare';
    // Bounded by what is left of the budget: a slow comparison must not hold the tenant frozen.
    const diff = await withinMs(
      s.compare((part) => mark(part)),
      Math.max(1, left()),
    );
    mark('compared');
    if (diff === TIMED_OUT) return await abort(`comparison did not finish within the fence budget of ${plan.fenceBudgetMs} ms`);
    if (diff.length) return await abort(`target differs from source at the fence: ${diff.join('; ')}`, diff);

    step = 'advance sequences';
    const seq = await s.advanceSequences();
    mark('sequences');
    if (!seq.ok) return await abort(seq.reason);

    step = 'measure the reverse start';
    if (plan.direction === 'forward') reverseStart = await s.reverseStartLsn();
    if (elapsed() > plan.fenceBudgetMs) return await abort(`fence took longer than its budget of ${plan.fenceBudgetMs} ms; unfenced, will retry`);
    step = 'pin the freeze';
    const pin = await s.pinFreeze();
    mark('pinned');
    if (!pin.ok) return await abort(pin.reason);
    step = 'before the switch';
    await hooks.faultPoint(CUTOVER_FAULT_POINTS.beforeSwitch(plan.direction));
  } catch (e: any) {
    const why = `${step} failed inside the frozen window: ${e?.message ?? String(e)}`.slice(0, 400);
    let r: CutoverResult;
    try {
      r = await abort(`${why}; unfrozen, will retry`);
    } catch {
      // Could not even unfreeze (e.g. the directory is down): the next attempt takes over the freeze.
      throw e;
    }
    return r;
  }
  await s.switchOwner(fenceLsn, reverseStart);
  await hooks.faultPoint(CUTOVER_FAULT_POINTS.afterSwitch(plan.direction));
  const pauseMs = mark('switched');
  await s.finishOldOwner();
  // A resumed cutover reports the whole pause since the freeze, not just this attempt's share.
  const total = resumed ? await s.measuredPauseMs() : null;
  return { ok: true, newEpoch, pauseMs: total ?? pauseMs, fenceLsn, alreadyDone: false, steps, ...blobSync() };
}

const TIMED_OUT = Symbol('timed out');
/** What the final catch-up may take past its budget to end cleanly (its session's tear-down) before the attempt gives it up. */
export const FENCE_APPLY_GRACE_MS = 500;

/** The promise's value, or TIMED_OUT after ms (the promise keeps running; its result is dropped). */
async function withinMs<T>(p: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  p.catch(() => {}); // a dropped, late failure must not become an unhandled rejection
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<typeof TIMED_OUT>((resolve) => (timer = setTimeout(() => resolve(TIMED_OUT), ms)));
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}
