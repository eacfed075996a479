// The tenant move: one workflow per unit (id `move-<unit>`), phases plan → copy → catchup →
// validate → fence → switch → soak → retire. Orchestration only: every side effect is an
// idempotent activity resuming from a checkpoint stored next to the data. Before the switch a
// cancel undoes everything; after it the move only goes forward or rolls back by a second switch.
import { COPY_TABLE_LANES, inLanes } from '../lib/copy/lanes';
import {
  proxyActivities,
  setHandler,
  condition,
  sleep,
  workflowInfo,
  continueAsNew,
  CancellationScope,
  ActivityCancellationType,
  isCancellation,
  ActivityFailure,
  patched,
  allHandlersFinished,
} from '@temporalio/workflow';
import type { RetryPolicy } from '@temporalio/common';
import type { Activities } from '../activities';
import * as M from './messages';
import { Phase, refuseVerb, pastPointOfNoReturn, sameApproverRefusal, isTerminal } from './phases';
import { MoveState, noteAbortedPause } from './move-state';
import { PERMANENT_ERROR_TYPES, isPermanentErrorType } from '../lib/errors';
import { copyEtaSeconds, copyProgress } from '../lib/move-progress';

const retry: RetryPolicy = {
  initialInterval: '500ms',
  backoffCoefficient: 2,
  maximumInterval: '10s',
  maximumAttempts: 4,
  nonRetryableErrorTypes: [...PERMANENT_ERROR_TYPES],
};
// Every activity heartbeats each second while it runs: a killed worker is noticed in seconds.
const quick = proxyActivities<Activities>({ startToCloseTimeout: '5 minutes', heartbeatTimeout: '10 seconds', retry });
const long = proxyActivities<Activities>({ startToCloseTimeout: '2 hours', heartbeatTimeout: '10 seconds', retry });
// A cancelled table copy is waited for until it has stopped: the cancel's clean-up must not run
// while it can still commit a batch on the target (it did: rows left behind after a cancel).
const copying = proxyActivities<Activities>({
  startToCloseTimeout: '2 hours',
  heartbeatTimeout: '10 seconds',
  retry,
  cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
});
// The cutover holds the write pause: a killed worker must be noticed within seconds.
const cut = proxyActivities<Activities>({ startToCloseTimeout: '2 minutes', heartbeatTimeout: '5 seconds', retry });

export async function moveTenantWorkflow(input: M.MoveInput): Promise<M.MoveStatus> {
  const state = new MoveState(input);
  const { carried, st } = state;
  let rowsPerSecond = input.rowsPerSecond;
  /** The highest throttle any table copy ran under (set or changed during the copy included). */
  let copyThrottle = 0;
  let preSwitch: CancellationScope | undefined;
  let soakScope: CancellationScope | undefined;
  const wfId = workflowInfo().workflowId;
  state.showDetails();
  const enter = (p: Phase) => state.enter(p);
  const block = (reason: string) => state.block(reason);
  const ref = () => state.ref();
  const record = (action: string, actor: string, reason?: string, detail?: Record<string, unknown>) =>
    quick.recordMoveEvent.executeWithOptions({ summary: `audit: ${action} by ${actor}` }, [
      { ...ref(), workflowId: wfId, action, actor, status: st.phase, reason, detail },
    ]);

  // ---- messages: validators refuse what the current phase cannot do, with a reason
  const opts = () => ({ paused: st.paused, awaitingApproval: st.awaitingApproval });
  const guard = (verb: Parameters<typeof refuseVerb>[0]) => (op: M.Operator) => {
    if (!op || typeof op.actor !== 'string' || !op.actor.trim()) throw new Error('an operator identity (actor) is required');
    const why = refuseVerb(verb, st.phase, opts());
    if (why) throw new Error(why);
  };
  setHandler(M.statusQuery, () => st);
  setHandler(
    M.pauseUpdate,
    (op) => {
      st.paused = true;
      state.showDetails();
      void record('pause', op.actor, op.reason);
      return 'paused';
    },
    { validator: guard('pause') },
  );
  setHandler(
    M.resumeUpdate,
    (op) => {
      st.paused = false;
      state.showDetails();
      void record('resume', op.actor, op.reason);
      return 'resumed';
    },
    { validator: guard('resume') },
  );
  // Cancel, rollback and retire are audited when they end (with their outcome), so the reason
  // given when they were asked is kept until then, across continue-as-new.
  const keepReason = (verb: 'cancel' | 'rollback' | 'retire', op: M.Operator) => {
    carried.reasons = { ...carried.reasons, [verb]: op.reason };
  };
  /** The reason to record for `verb`; patched: an end recorded before reasons were kept replays without one. */
  const reasonOf = (verb: 'cancel' | 'rollback' | 'retire') => (patched('operator-reasons-audited') ? carried.reasons?.[verb] : undefined);
  const requestCancel = (op: M.Operator) => {
    carried.cancelRequested = true;
    st.operators.cancelledBy = op.actor;
    keepReason('cancel', op);
    // During the fence the cutover finishes (or aborts) first; it is never interrupted mid-way.
    if (st.phase !== 'fence') preSwitch?.cancel();
    return 'cancelling';
  };
  setHandler(M.cancelUpdate, requestCancel, { validator: guard('cancel') });
  // A signal has no validator: the same refusal is checked here, and a refused cancel changes nothing.
  setHandler(M.cancelSignal, (op) => {
    if (!op?.actor?.trim() || refuseVerb('cancel', st.phase, opts())) return;
    requestCancel(op);
  });
  setHandler(
    M.approveUpdate,
    (op) => {
      carried.approved = true;
      st.operators.approvedBy = op.actor;
      // patched: an approval or soak extension accepted before they were audited replays without its entry.
      if (patched('approve-extend-audited')) void record('approve', op.actor, op.reason);
      return 'approved';
    },
    {
      validator: (op) => {
        guard('approve')(op);
        const why = input.requireDistinctApprover ? sameApproverRefusal(op.actor, input.requestedBy) : undefined;
        if (why) throw new Error(why);
      },
    },
  );
  setHandler(
    M.rollbackUpdate,
    (op) => {
      carried.rollbackRequested = true;
      st.operators.rolledBackBy = op.actor;
      keepReason('rollback', op);
      soakScope?.cancel();
      return 'rolling back';
    },
    { validator: guard('rollback') },
  );
  setHandler(
    M.retireNowUpdate,
    (op) => {
      carried.retireNowRequested = true;
      st.operators.retiredBy = op.actor;
      keepReason('retire', op);
      soakScope?.cancel();
      return 'retiring';
    },
    { validator: guard('retire-now') },
  );
  setHandler(
    M.extendSoakUpdate,
    (op) => {
      carried.soakEndsAtMs = (carried.soakEndsAtMs ?? Date.now()) + op.seconds * 1000;
      st.soakEndsAt = new Date(carried.soakEndsAtMs).toISOString();
      if (patched('approve-extend-audited')) void record('extend-soak', op.actor, op.reason, { seconds: op.seconds, soakEndsAt: st.soakEndsAt });
      return `soak ends at ${st.soakEndsAt}`;
    },
    {
      validator: (op) => {
        guard('extend-soak')(op);
        if (!Number.isInteger(op.seconds) || op.seconds <= 0 || op.seconds > 30 * 86400) throw new Error('seconds must be a positive integer up to 30 days');
      },
    },
  );
  setHandler(
    M.throttleUpdate,
    (op) => {
      rowsPerSecond = op.rowsPerSecond;
      // A running table copy takes it up: that copy's wall time measures the throttle too.
      if (st.phase === 'copy') copyThrottle = Math.max(copyThrottle, op.rowsPerSecond);
      // patched: a throttle accepted before throttles were audited replays without its audit entry.
      if (patched('throttle-audited')) void record('throttle', op.actor, op.reason, { rowsPerSecond: op.rowsPerSecond });
      return `throttle ${op.rowsPerSecond} rows/s`;
    },
    {
      validator: (op) => {
        if (!op || typeof op.actor !== 'string' || !op.actor.trim()) throw new Error('an operator identity (actor) is required');
        if (isTerminal(st.phase)) throw new Error(`the move is ${st.phase}; nothing to throttle`);
        if (!Number.isInteger(op.rowsPerSecond) || op.rowsPerSecond < 0) throw new Error('rowsPerSecond must be a non-negative integer (0 = unlimited)');
      },
    },
  );

  /** Runs a step; on a transient failure shows the reason (search attribute) and retries with backoff. */
  async function step<T>(name: string, fn: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        const r = await fn();
        if (st.blockedReason.startsWith(`${name}:`)) block('');
        return r;
      } catch (err) {
        if (isCancellation(err)) throw err;
        const cause: any = err instanceof ActivityFailure ? err.cause : err;
        const msg = `${name}: ${cause?.message ?? String(err)}`.slice(0, 500);
        st.lastError = msg;
        if (isPermanentErrorType(cause?.type)) throw err;
        block(msg);
        await sleep(Math.min(30_000, 1000 * 2 ** Math.min(attempt, 5)));
      }
    }
  }
  const waitIfPaused = () => condition(() => !st.paused || carried.cancelRequested);
  const maybeContinueAsNew = async () => {
    if (workflowInfo().continueAsNewSuggested || workflowInfo().historyLength > 2000) {
      await condition(allHandlersFinished);
      await continueAsNew<typeof moveTenantWorkflow>({ ...input, rowsPerSecond, resume: carried });
    }
  };

  // ---------------------------------------------------------------- before the switch
  async function catchUpUntilLagBelow(): Promise<void> {
    for (;;) {
      await waitIfPaused();
      const r = await step('catch-up', () =>
        long.catchUp.executeWithOptions({ summary: 'catch-up forward' }, [
          { ...ref(), direction: 'forward', maxDurationMs: 30_000, mode: 'now', rowsPerSecond },
        ]),
      );
      st.lagBytes = r.lagBytes;
      // A round applies what the source had when it began: the time it took to stream and apply
      // that is the lag in time. Its sessions' set-up is not lag (seconds on a slow link); results
      // recorded before lagMs existed carry only the round's duration.
      const lagMs = r.lagMs ?? r.durationMs;
      st.lagSeconds = Math.round(lagMs / 100) / 10;
      state.showDetails();
      if (r.caughtUp && lagMs <= input.lagThresholdMs) {
        if (st.blockedReason.startsWith('catch-up:')) block('');
        return;
      }
      if (r.retentionWarning) block(`catch-up: ${r.retentionWarning}`);
      else if (r.caughtUp || lagMs > 5_000) block(`catch-up: lag ${st.lagSeconds} s > ${input.lagThresholdMs / 1000} s`);
      await maybeContinueAsNew();
    }
  }

  async function beforeSwitch(): Promise<boolean> {
    if (st.phase === 'plan') {
      const plan = await step('plan', () =>
        quick.planMove.executeWithOptions({ summary: `plan: preflight checks for ${input.tenant} → ${input.target}` }, [
          { unit: input.unit, target: input.target },
        ]),
      );
      st.source = plan.source;
      st.epoch = plan.epoch;
      st.moveId = plan.moveId;
      if (!plan.ok) {
        block(`plan: ${plan.reasons[0]}`);
        st.lastError = plan.reasons.join('; ');
        enter('failed');
        return false;
      }
      // The target's headroom for this unit, held until the move ends (released with its end event).
      if (patched('headroom-reservation')) {
        const held = await step('reserve', () =>
          quick.reserveHeadroom.executeWithOptions({ summary: `reserve headroom on ${input.target}` }, [
            {
              moveId: st.moveId,
              unit: input.unit,
              source: st.source,
              target: input.target,
              epoch: st.epoch,
              workflowId: wfId,
              actor: input.requestedBy,
            },
          ]),
        );
        if (!held.ok) {
          block(`plan: ${held.reasons[0]}`);
          st.lastError = held.reasons.join('; ');
          enter('failed');
          return false;
        }
      }
      st.tables = plan.tables.map((t) => ({ table: t.table, rowsCopied: 0, rowsEstimated: t.rowsEstimated, done: false }));
      await record('start', input.requestedBy, undefined, { epoch: st.epoch, soakSeconds: input.soakSeconds, approveCutover: input.approveCutover });
      enter('copy');
    }
    if (st.phase === 'copy') {
      await step('setup', () =>
        quick.setupReplication.executeWithOptions({ summary: `set up forward replication (slot and publication on ${st.source})` }, [
          { ...ref(), direction: 'forward' },
        ]),
      );
      const t0 = Date.now();
      let copying_ = 0;
      let copiedBytes = 0;
      // Whether the copy's wall time measures the fleet: no table throttled (copyThrottle), none held by a pause.
      let copyPaused = false;
      const copyOne = async (t: (typeof st.tables)[number], lanes: boolean) => {
        if (st.paused) copyPaused = true;
        await waitIfPaused();
        // A throttle set meanwhile is per table copy: a lane starts only while no other copies.
        if (lanes) await condition(() => !rowsPerSecond || copying_ === 0);
        copying_++;
        let r: { rowsCopied: number; bytesCopied?: number };
        try {
          // Batches are sized in bytes by the copy; copyBatchRows (tests) only caps their rows.
          const batchRows = input.copyBatchRows;
          copyThrottle = Math.max(copyThrottle, rowsPerSecond);
          r = await step(`copy ${t.table}`, () =>
            copying.copyTable.executeWithOptions({ summary: `copy table ${t.table}` }, [
              { ...ref(), table: t.table, ...(batchRows ? { batchRows } : {}), rowsPerSecond },
            ]),
          );
        } finally {
          copying_--;
        }
        t.rowsCopied = r.rowsCopied;
        t.done = true;
        copiedBytes += r.bytesCopied ?? 0;
        // Rows written during the copy raise the total (lib/move-progress): the ETA never goes negative.
        st.etaSeconds = copyEtaSeconds(copyProgress(st.tables), (Date.now() - t0) / 1000);
        state.showDetails();
      };
      const left = st.tables.filter((t) => !t.done);
      // COPY_TABLE_LANES tables at once (one when throttled: the rate is per table copy); a history
      // recorded before the lanes copies one table at a time, as it did then.
      if (patched('parallel-table-copy')) await inLanes(left, rowsPerSecond ? 1 : COPY_TABLE_LANES, (t) => copyOne(t, true));
      else for (const t of left) await copyOne(t, false);
      // What this copy measured (the tables it copied, wall time, its throttle): `move plan`
      // estimates later copies from these entries. patched: a history recorded before replays without it.
      if (left.length && patched('copy-measured'))
        await record('copied', input.requestedBy, undefined, {
          rows: left.reduce((n, t) => n + t.rowsCopied, 0),
          bytes: copiedBytes,
          seconds: (Date.now() - t0) / 1000,
          tables: left.length,
          rowsPerSecond: copyThrottle,
          ...(copyPaused ? { paused: true } : {}),
        });
      const b = await step('copy blobs', () =>
        long.copyBlobs.executeWithOptions({ summary: `copy blobs ${st.source} → ${st.target}` }, [{ ...ref(), direction: 'forward' }]),
      );
      st.blobs = { copied: b.copied, total: b.total, bytes: b.bytes };
      st.etaSeconds = 0;
      enter('catchup');
    }
    for (;;) {
      if (st.phase === 'catchup') {
        await catchUpUntilLagBelow();
        enter('validate');
      }
      if (st.phase === 'validate') {
        // Each validation the move asks for has its own name: its retries (a new scheduling by step()
        // too) resume the ranges it recorded on the target; a later one (after a mismatch was fixed,
        // after a wait for approval) compares everything again. patched: older histories send none.
        const validation = patched('validation-progress-row') ? `v${(carried.validations = (carried.validations ?? 0) + 1)}` : undefined;
        const v = await step('validate', () =>
          long.validateMove.executeWithOptions({ summary: 'validate every row and blob, both directions' }, [
            { ...ref(), direction: 'forward', ...(validation ? { validation } : {}) },
          ]),
        );
        st.validation = { ok: v.ok, mismatches: v.mismatches };
        st.deltaToken = v.deltaToken;
        if (!v.ok) {
          // A mismatch blocks the move; the operator fixes and resumes (re-validates) or cancels.
          block(`validate: ${v.mismatches[0] ?? 'mismatch'}`);
          st.paused = true;
          state.showDetails();
          await condition(() => !st.paused || carried.cancelRequested);
          block('');
          enter('catchup');
          continue;
        }
        enter('fence');
      }
      if (st.phase === 'fence') {
        if (input.approveCutover === 'manual' && !carried.approved) {
          st.awaitingApproval = true;
          block('fence: waiting for operator approval of the cutover');
          await condition(() => carried.approved || carried.cancelRequested);
          st.awaitingApproval = false;
          block('');
          if (carried.cancelRequested) return false;
          // The cutover compares only what the stream changed since the last full validation
          // (lib/cdc/delta.ts); anything else that happened to the target while we waited (hours,
          // perhaps) is found by catching up and validating again now, before any freeze.
          if (patched('revalidate-after-approval')) {
            enter('catchup');
            continue;
          }
        }
        await step('setup reverse', () =>
          quick.setupReplication.executeWithOptions({ summary: `set up reverse replication (slot and publication on ${st.target})` }, [
            { ...ref(), direction: 'reverse' },
          ]),
        );
        await catchUpUntilLagBelow();
        st.cutoverAttempts++;
        const r = await CancellationScope.nonCancellable(() =>
          step('cutover', () =>
            cut.cutover.executeWithOptions({ summary: `cutover ${st.source} → ${st.target}: freeze, fence, apply, compare, switch` }, [
              {
                ...ref(),
                direction: 'forward',
                epoch: st.epoch,
                fenceBudgetMs: input.fenceBudgetMs,
                actor: input.requestedBy,
                deltaToken: st.deltaToken,
              },
            ]),
          ),
        );
        // Tries the attempt unfroze to wait for long writers (then froze again): pauses too.
        for (const p of r.abortedPausesMs ?? []) noteAbortedPause(st, p);
        if (r.writersWaitedMs) st.cutoverWritersWaitedMs = (st.cutoverWritersWaitedMs ?? 0) + r.writersWaitedMs;
        if (r.ok) {
          // The switching attempt's pause; an aborted one's is kept in cutoverAbortedPausesMs.
          st.cutoverPauseMs = r.pauseMs;
          st.epoch = r.newEpoch;
          st.cutoverSteps = r.steps;
          if (r.blobSync) st.cutoverBlobSync = r.blobSync;
          return true;
        }
        noteAbortedPause(st, r.pauseMs);
        st.lastError = `cutover attempt ${st.cutoverAttempts}: ${r.reason}`;
        if (carried.cancelRequested) return false;
        carried.cutoverAbortsInRow = (carried.cutoverAbortsInRow ?? 0) + 1;
        const maxAborts = input.maxCutoverAborts ?? 3;
        if (carried.cutoverAbortsInRow >= maxAborts) {
          // Every attempt froze the tenant: stop hurting it on a timer and wait for the operator.
          carried.approved = false;
          st.awaitingApproval = true;
          block(
            `fence: ${carried.cutoverAbortsInRow} cutover attempts aborted in a row (last: ${r.reason}); the tenant is not frozen — fix the cause, then \`shardctl move approve\` to try again, or cancel`.slice(
              0,
              500,
            ),
          );
          await condition(() => carried.approved || carried.cancelRequested);
          st.awaitingApproval = false;
          block('');
          carried.cutoverAbortsInRow = 0;
          if (carried.cancelRequested) return false;
        }
        enter('catchup');
        await sleep(Math.min(60_000, 2000 * st.cutoverAttempts));
        await maybeContinueAsNew();
      }
    }
  }

  // ---------------------------------------------------------------- main
  if (!pastPointOfNoReturn(st.phase)) {
    let switched = false;
    preSwitch = new CancellationScope();
    let failure = '';
    try {
      switched = await preSwitch.run(() => beforeSwitch());
    } catch (err) {
      const cause: any = err instanceof ActivityFailure ? err.cause : err;
      if (isCancellation(err) && carried.cancelRequested) {
        /* cancel requested: undo below */
      } else if (isPermanentErrorType(cause?.type)) {
        // A permanent failure before the switch (e.g. a TRUNCATE in the stream) must not leave a
        // slot holding WAL or half a copy behind: undo like a cancel, then report the failure.
        failure = `${st.phase}: ${cause?.message ?? String(err)}`.slice(0, 500);
      } else {
        throw err;
      }
    }
    if (st.phase === 'failed') return st;
    if (!switched) {
      // Cancel: undo everything; the source stays authoritative and exactly as it was.
      enter('cancelling');
      const actor = st.operators.cancelledBy ?? input.requestedBy;
      await CancellationScope.nonCancellable(() =>
        step('cancel', () =>
          quick.cancelMove.executeWithOptions({ summary: `cancel: undo the move, ${st.source || '?'} stays the owner` }, [
            { ...ref(), epoch: st.epoch, actor },
          ]),
        ),
      );
      if (failure) {
        st.lastError = failure;
        await record('failed', input.requestedBy, failure);
        enter('failed');
        block(`failed: ${failure}`.slice(0, 200));
        return st;
      }
      await record('cancelled', actor, reasonOf('cancel'));
      enter('cancelled');
      block('');
      return st;
    }
    if (carried.cancelRequested) st.lastError = 'cancel arrived after the switch completed; use rollback during soak';
    enter('switch');
    await step('drop forward replication', () =>
      quick.dropReplication.executeWithOptions({ summary: 'drop forward replication' }, [{ ...ref(), direction: 'forward' }]),
    );
    await record('switched', input.requestedBy, undefined, {
      epoch: st.epoch,
      cutoverPauseMs: st.cutoverPauseMs,
      cutoverAttempts: st.cutoverAttempts,
      cutoverAbortedPausesMs: st.cutoverAbortedPausesMs ?? [],
    });
    enter('soak');
    carried.soakEndsAtMs = Date.now() + input.soakSeconds * 1000;
    st.soakEndsAt = new Date(carried.soakEndsAtMs).toISOString();
  }

  /**
   * After the switch nothing may end the workflow while it still owns slots: a permanent failure
   * (e.g. a column added on one side during soak) blocks with the reason, keeps the old owner
   * fenced, and waits for the operator to fix it and `resume` (or `retire` / `rollback` in soak).
   */
  async function holdOnPermanent<T>(name: string, fn: () => Promise<T>, canLeave: () => boolean = () => false): Promise<T | undefined> {
    try {
      return await step(name, fn);
    } catch (err) {
      const cause: any = err instanceof ActivityFailure ? err.cause : err;
      if (isCancellation(err) || !isPermanentErrorType(cause?.type)) throw err;
      block(
        `${name} stopped: ${cause?.message ?? String(err)} — fix the cause, then \`shardctl move resume\`${st.phase === 'soak' ? ' (or retire / rollback)' : ''}`.slice(
          0,
          500,
        ),
      );
      st.paused = true;
      state.showDetails();
      await condition(() => !st.paused || canLeave());
      st.paused = false;
      block('');
      return undefined;
    }
  }
  const leaveSoak = () => carried.retireNowRequested || carried.rollbackRequested;

  while (st.phase === 'soak') {
    // Reverse replication keeps the source current, so a rollback loses nothing.
    while (!carried.rollbackRequested && !carried.retireNowRequested && Date.now() < (carried.soakEndsAtMs ?? 0)) {
      const remaining = (carried.soakEndsAtMs ?? 0) - Date.now();
      soakScope = new CancellationScope();
      try {
        await soakScope.run(async () => {
          const r = await holdOnPermanent(
            'reverse replication',
            () =>
              long.catchUp.executeWithOptions({ summary: `reverse replication ${st.target} → ${st.source} (soak)` }, [
                { ...ref(), direction: 'reverse', mode: 'continuous', maxDurationMs: Math.max(1000, Math.min(60_000, remaining)) },
              ]),
            leaveSoak,
          );
          // The reverse slot holds WAL on the new owner until applied: say so before its disk fills.
          if (r?.retentionWarning) block(`soak: ${r.retentionWarning}`);
          else if (r && st.blockedReason.startsWith('soak: ')) block('');
          if (patched('reverse-blob-sync'))
            await holdOnPermanent(
              'reverse blobs',
              () => long.copyBlobs.executeWithOptions({ summary: `sync blobs ${st.target} → ${st.source} (soak)` }, [{ ...ref(), direction: 'reverse' }]),
              leaveSoak,
            );
        });
      } catch (err) {
        if (!isCancellation(err)) throw err;
      }
      soakScope = undefined;
      await maybeContinueAsNew();
    }
    if (carried.rollbackRequested) {
      enter('rolling-back');
      for (;;) {
        const r = await CancellationScope.nonCancellable(() =>
          step('rollback cutover', () =>
            cut.cutover.executeWithOptions({ summary: `rollback cutover ${st.target} → ${st.source}` }, [
              {
                ...ref(),
                direction: 'reverse',
                epoch: st.epoch,
                fenceBudgetMs: input.fenceBudgetMs,
                actor: st.operators.rolledBackBy ?? input.requestedBy,
              },
            ]),
          ),
        );
        for (const p of r.abortedPausesMs ?? []) noteAbortedPause(st, p);
        if (r.writersWaitedMs) st.cutoverWritersWaitedMs = (st.cutoverWritersWaitedMs ?? 0) + r.writersWaitedMs;
        if (r.ok) {
          st.epoch = r.newEpoch;
          st.cutoverPauseMs = r.pauseMs;
          break;
        }
        noteAbortedPause(st, r.pauseMs);
        st.lastError = `rollback cutover: ${r.reason}`;
        await holdOnPermanent('reverse catch-up', () =>
          long.catchUp.executeWithOptions({ summary: 'catch-up reverse (rollback)' }, [{ ...ref(), direction: 'reverse', maxDurationMs: 20_000, mode: 'now' }]),
        );
      }
      await step('rollback cleanup', () =>
        quick.cleanupAfterRollback.executeWithOptions({ summary: 'clean up after rollback' }, [
          { ...ref(), epoch: st.epoch, actor: st.operators.rolledBackBy ?? input.requestedBy },
        ]),
      );
      await record('rolled-back', st.operators.rolledBackBy ?? input.requestedBy, reasonOf('rollback'), { epoch: st.epoch });
      enter('rolled-back');
      return st;
    }
    enter('retire');
    const actor = st.operators.retiredBy ?? input.requestedBy;
    try {
      await step('retire', () =>
        long.retireSource.executeWithOptions({ summary: `retire: delete ${st.tenant}'s copy on ${st.source}` }, [{ ...ref(), epoch: st.epoch, actor }]),
      );
    } catch (err) {
      const cause: any = err instanceof ActivityFailure ? err.cause : err;
      if (isCancellation(err) || !isPermanentErrorType(cause?.type)) throw err;
      // Deleting is irreversible: a refused (or permanently failed) retire waits, in soak, for the
      // operator to reconcile and say `retire` again, or to roll back. The source stays the way back.
      enter('soak');
      block(`retire refused: ${cause.message}`.slice(0, 500));
      carried.retireNowRequested = false;
      await condition(() => carried.retireNowRequested || carried.rollbackRequested);
      block('');
      continue;
    }
    await record('retired', actor, carried.retireNowRequested ? (reasonOf('retire') ?? 'retire now (operator)') : 'soak ended', { epoch: st.epoch });
    enter('done');
  }
  return st;
}
