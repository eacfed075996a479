// The rebalancer: plans from the directory (an activity), then runs the plan's moves as child
// move workflows (id `move-<unit>`: never two moves of one unit), at most maxConcurrent at once
// and perShardLimit out of and into each shard. A failed move is never retried, and it blocks only
// itself: the plan's other moves go on starting within the limits (a move that blocks, waiting
// for approval say, holds only its own slot). Once nothing of the plan is left to start and the
// running moves have ended, the rest (the failed units excluded) is planned again from the
// directory as it is then. A run given its plan (`rebalance apply --plan`, input.planned) runs
// exactly those moves, once checkPlannedMoves finds the directory still allows each (else it
// starts none): it never plans, and a failure never adds a move.
// Pause stops starting moves; cancel also cancels the running ones (before their switch; a move
// past it finishes). A drain ends by closing its shard, once the directory shows nothing left on
// it (closeDrainedShard); otherwise the summary says why it stays draining. A cancelled or failed
// isolate undoes the dedication it made when nothing took hold (its tenant never got there, or
// nothing was moved off yet), else says what it left and how to undo it (undoIsolateDedication).
// Children are abandoned, not terminated, if this workflow ends: a move is
// never cut short by its parent. Resumable by replay; no state outside the history.
// History stays small with any number of children: once it passes a bound (or Temporal suggests
// it), no new move starts, the running ones finish, and the run continues as new carrying its
// whole state (plan, every move's state and result, paused, operators). A child's completion is
// delivered to the run that started it, so a run never continues while it has children running.
import {
  proxyActivities,
  setHandler,
  condition,
  startChild,
  getExternalWorkflowHandle,
  ParentClosePolicy,
  ChildWorkflowCancellationType,
  ActivityFailure,
  ChildWorkflowFailure,
  allHandlersFinished,
  patched,
  continueAsNew,
  workflowInfo,
} from '@temporalio/workflow';
import type { RetryPolicy } from '@temporalio/common';
import { TypedSearchAttributes, WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { Activities } from '../activities';
import * as R from './rebalance-messages';
import { cancelSignal, type Operator } from './messages';
import { moveTenantWorkflow } from './move';
import { SA } from './search-attributes';
import { moveStaticDetails, moveStaticSummary } from '../lib/moves/web-ui';
import { moveWorkflowId } from '../lib/ids';
import { PERMANENT_ERROR_TYPES } from '../lib/errors';
import type { RebalancePlan } from '../lib/rebalance/plan';

const retry: RetryPolicy = { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30s', nonRetryableErrorTypes: [...PERMANENT_ERROR_TYPES] };
const quick = proxyActivities<Activities>({ startToCloseTimeout: '2 minutes', heartbeatTimeout: '10 seconds', retry });

const requireActor = (op: Operator) => {
  if (!op || typeof op.actor !== 'string' || !op.actor.trim()) throw new Error('an operator identity (actor) is required');
};

export async function rebalanceWorkflow(input: R.RebalanceInput): Promise<R.RebalanceStatus> {
  const carried = input.carried;
  const st: R.RebalanceStatus = carried?.status ?? {
    phase: 'planning',
    scope: input.scope,
    paused: false,
    maxConcurrent: input.maxConcurrent,
    perShardLimit: input.perShardLimit,
    plans: 0,
    moves: [],
    shards: [],
    problems: [],
    balanced: false,
    marked: [],
    lastError: '',
    operators: { startedBy: input.requestedBy },
    continuedAsNew: 0,
  };
  let cancelRequested = false;
  let failedSincePlan = carried?.failedSincePlan ?? false;
  // patched: a run recorded while one failure held back every new start (until the running moves
  // ended and a re-plan dropped what was pending) replays that way.
  const failureBlocksOnlyItself = !!input.planned || patched('rebalance-failure-blocks-only-itself');
  /** Whether a failure holds back the plan's other moves (only in runs recorded before the patch). */
  const failureStalls = () => failedSincePlan && !failureBlocksOnlyItself;
  // patched: a run recorded before continue-as-new existed replays without it.
  const mayContinue = patched('rebalance-continue-as-new');
  const bound = input.historyEventBound ?? R.DEFAULT_HISTORY_EVENT_BOUND;
  // Work done in this run (a plan, a started move): a run that has done none never continues, so
  // a bound below one run's own overhead still makes progress.
  let workThisRun = 0;
  const historyFull = () => mayContinue && workThisRun > 0 && (workflowInfo().continueAsNewSuggested || workflowInfo().historyLength >= bound);
  const running = () => st.moves.filter((m) => m.state === 'running');
  const terminal = (p: R.RebalancePhase) => p === 'done' || p === 'cancelled' || p === 'failed';

  // patched: a run recorded before its verbs were audited replays without their entries. The
  // handlers stay synchronous (an update completes in the task that accepted it, as recorded);
  // the run does not end while an entry is still being written.
  let auditsInFlight = 0;
  const record = (action: 'start' | 'pause' | 'resume' | 'cancel', op: Operator): Promise<void> => {
    if (!patched('rebalance-verbs-audited')) return Promise.resolve();
    auditsInFlight++;
    const done = () => void auditsInFlight--;
    return quick
      .recordRebalanceEvent({ action, actor: op.actor, reason: op.reason, workflowId: workflowInfo().workflowId, scope: input.scope })
      .then(done, done);
  };
  const settled = () => allHandlersFinished() && auditsInFlight === 0;

  setHandler(R.rebalanceStatusQuery, () => st);
  setHandler(
    R.rebalancePauseUpdate,
    (op) => {
      st.paused = true;
      st.operators.pausedBy = op.actor;
      void record('pause', op);
      return `paused: no new move starts; ${running().length} running move(s) go on`;
    },
    {
      validator: (op) => {
        requireActor(op);
        if (terminal(st.phase) || st.phase === 'cancelling') throw new Error(`the rebalance is ${st.phase}; nothing to pause`);
        if (st.paused) throw new Error('the rebalance is already paused');
      },
    },
  );
  setHandler(
    R.rebalanceResumeUpdate,
    (op) => {
      st.paused = false;
      st.operators.pausedBy = undefined;
      void record('resume', op);
      return 'resumed';
    },
    {
      validator: (op) => {
        requireActor(op);
        if (!st.paused) throw new Error('the rebalance is not paused');
      },
    },
  );
  setHandler(
    R.rebalanceCancelUpdate,
    (op) => {
      cancelRequested = true;
      st.operators.cancelledBy = op.actor;
      void record('cancel', op);
      return `cancelling: ${st.moves.filter((m) => m.state === 'pending').length} pending move(s) dropped, ${running().length} running move(s) asked to cancel`;
    },
    {
      validator: (op) => {
        requireActor(op);
        if (terminal(st.phase) || st.phase === 'cancelling') throw new Error(`the rebalance is ${st.phase}; nothing to cancel`);
      },
    },
  );

  const adopt = (plan: RebalancePlan) => {
    st.plans++;
    st.shards = plan.shards;
    st.problems = plan.problems;
    st.balanced = plan.balanced;
    if (plan.dedicate) st.dedicate = plan.dedicate;
    for (const m of plan.moves) st.moves.push({ ...m, workflowId: moveWorkflowId(m.unit), state: 'pending', plan: st.plans });
  };
  /** A plan given by the operator (`rebalance apply --plan`), checked by the CLI and again by checkPlannedMoves. */
  const adoptGiven = (given: NonNullable<R.RebalanceInput['planned']>) => {
    st.fromPlanFile = true;
    adopt({
      scope: input.scope,
      moves: given.moves.map((m) => ({
        unit: m.unit,
        from: m.from,
        to: m.to,
        load: m.load ?? 0,
        bytes: m.bytes ?? 0,
        reason: m.reason ?? 'in the given plan',
      })),
      shards: [],
      balanced: false,
      problems: [],
    });
  };
  const plan = async () => {
    // Units this run moved or failed to move are never planned again in it.
    const exclude = st.moves.filter((m) => m.state !== 'dropped' && m.state !== 'pending').map((m) => m.unit);
    // --max-moves bounds the run, not each plan: a re-plan gets what the moves started so far left.
    const maxMoves = input.maxMoves === undefined ? undefined : input.maxMoves - exclude.length;
    if (maxMoves !== undefined && maxMoves <= 0) {
      st.problems = [...st.problems, `stopped at the run's limit of ${input.maxMoves} move(s) (--max-moves): plan again for the rest`];
      return;
    }
    workThisRun++;
    const p = await quick.planRebalance({ scope: input.scope, tolerance: input.tolerance, maxMoves, exclude, units: input.units });
    st.marked.push(...(await quick.markPlanShards({ plan: p, actor: input.requestedBy })));
    adopt(p);
  };

  /** The next pending move the limits allow now, in plan order. */
  const nextStartable = (): R.RebalanceMoveEntry | undefined => {
    const run = running();
    if (run.length >= input.maxConcurrent) return undefined;
    const out = (s: string) => run.filter((m) => m.from === s).length;
    const into = (s: string) => run.filter((m) => m.to === s).length;
    return st.moves.find((m) => m.state === 'pending' && out(m.from) < input.perShardLimit && into(m.to) < input.perShardLimit);
  };

  const runMove = async (m: R.RebalanceMoveEntry) => {
    m.state = 'running';
    workThisRun++;
    try {
      const moveInput = { ...input.move, moveId: '', unit: m.unit, tenant: m.unit, target: m.to, requestedBy: input.requestedBy };
      const child = await startChild(moveTenantWorkflow, {
        workflowId: m.workflowId,
        args: [moveInput],
        // User metadata of the start command: not compared on replay, so running rebalances replay unchanged.
        staticSummary: moveStaticSummary(moveInput, m.from),
        staticDetails: moveStaticDetails(moveInput, { source: m.from, via: `${input.scope.kind} run ${workflowInfo().workflowId}` }),
        parentClosePolicy: ParentClosePolicy.ABANDON,
        cancellationType: ChildWorkflowCancellationType.ABANDON,
        typedSearchAttributes: new TypedSearchAttributes([
          { key: SA.unit, value: m.unit },
          { key: SA.target, value: m.to },
          { key: SA.phase, value: 'plan' },
        ]),
      });
      // A cancel requested while the child was starting reaches it now.
      if (cancelRequested) await cancelChild(m);
      const r = await child.result();
      m.result = r.phase === 'done' ? 'done' : `${r.phase}${r.lastError ? `: ${r.lastError}` : ''}`.slice(0, 500);
      m.state = r.phase === 'done' ? 'done' : r.phase === 'cancelled' && cancelRequested ? 'cancelled' : 'failed';
    } catch (err) {
      m.state = 'failed';
      if (err instanceof WorkflowExecutionAlreadyStartedError) m.result = `a move of ${m.unit} is already running (${m.workflowId}); left alone`;
      else if (err instanceof ChildWorkflowFailure) m.result = `move workflow ended ${err.cause?.message ?? err.message}`.slice(0, 500);
      else throw err;
    }
    if (m.state === 'failed') {
      st.lastError = `${m.unit}: ${m.result}`;
      // A given plan is never re-planned: its failed move is reported, nothing replaces it.
      if (!input.planned) failedSincePlan = true;
    }
  };
  const cancelChild = (m: R.RebalanceMoveEntry) =>
    getExternalWorkflowHandle(m.workflowId)
      .signal(cancelSignal, { actor: st.operators.cancelledBy ?? input.requestedBy, reason: 'rebalance cancelled' })
      .catch(() => undefined);

  /** An isolate that did not finish: its dedication undone when nothing took hold, else what it left (undoIsolateDedication). */
  const endIsolate = async (ended: 'cancelled' | 'failed') => {
    const { shard, tenant } = st.dedicate!;
    const r = await quick.undoIsolateDedication({
      shard,
      tenant,
      ended,
      dedicatedByRun: st.marked.includes(`${shard} dedicated to ${tenant}`),
      started: st.moves.filter((m) => m.from === shard && m.state !== 'pending' && m.state !== 'dropped').map((m) => m.unit),
      run: `${workflowInfo().workflowId}/${workflowInfo().firstExecutionRunId}`,
      actor: ended === 'cancelled' ? (st.operators.cancelledBy ?? input.requestedBy) : input.requestedBy,
    });
    st.isolate = { shard, tenant, ...r };
  };

  if (!carried) {
    try {
      await record('start', { actor: input.requestedBy, reason: input.reason });
      if (input.planned) {
        // Checked again here, in the run (the CLI checked before starting it): a plan the
        // directory no longer allows starts nothing, and the run ends failed saying why.
        workThisRun++;
        const problems = await quick.checkPlannedMoves({ moves: input.planned.moves });
        adoptGiven(input.planned);
        if (problems.length) {
          for (const m of st.moves) m.state = 'dropped';
          st.problems = [`the plan no longer holds, nothing started: ${problems.length} problem(s)`, ...problems];
          st.phase = 'failed';
          await condition(settled);
          return st;
        }
      } else await plan();
    } catch (err) {
      const cause: any = err instanceof ActivityFailure ? err.cause : err;
      st.lastError = `plan: ${cause?.message ?? String(err)}`.slice(0, 500);
      st.phase = 'failed';
      return st;
    }
    st.phase = 'running';
  }
  const children: Promise<void>[] = [];
  const maxReplans = input.maxReplans ?? 5;
  for (;;) {
    await condition(
      () =>
        cancelRequested ||
        (running().length === 0 && (failureStalls() || historyFull() || !st.moves.some((m) => m.state === 'pending'))) ||
        (!st.paused && !failureStalls() && !historyFull() && !!nextStartable()),
    );
    if (cancelRequested) break;
    if (running().length === 0 && historyFull() && (failedSincePlan || st.moves.some((m) => m.state === 'pending'))) {
      // Nothing running, work left: continue as new with the whole state (a re-plan, if one is
      // due, happens in the next run). Accepted updates finish here first.
      await condition(settled);
      if (!cancelRequested) {
        st.continuedAsNew++;
        await continueAsNew<typeof rebalanceWorkflow>({ ...input, carried: { status: st, failedSincePlan } });
      }
      continue;
    }
    if (running().length === 0 && failedSincePlan && (failureStalls() || !st.moves.some((m) => m.state === 'pending'))) {
      // A failure, and nothing of the plan left to start (before the patch: at once, dropping what
      // the old plan still had pending): plan again from the directory now.
      for (const m of st.moves) if (m.state === 'pending') m.state = 'dropped';
      failedSincePlan = false;
      if (st.plans > maxReplans) {
        st.problems = [...st.problems, `gave up after ${st.plans} plans: the last failure was ${st.lastError}`];
        st.phase = 'failed';
        await condition(settled);
        return st;
      }
      await plan();
      continue;
    }
    if (running().length === 0 && !st.moves.some((m) => m.state === 'pending')) break;
    for (let m = nextStartable(); m && !st.paused && !failureStalls() && !historyFull(); m = nextStartable()) children.push(runMove(m));
  }
  if (cancelRequested) {
    st.phase = 'cancelling';
    for (const m of st.moves) if (m.state === 'pending') m.state = 'dropped';
    await Promise.all(running().map(cancelChild));
    await condition(() => running().length === 0);
    await Promise.all(children);
    // patched: an isolate cancelled before this existed replays leaving its dedication, as it did.
    if (input.scope.kind === 'isolate' && st.dedicate && patched('isolate-cancel-undoes-dedication')) await endIsolate('cancelled');
    st.phase = 'cancelled';
    if (input.scope.kind === 'drain') {
      // Left draining (nothing new goes there) until an operator says otherwise: the summary says how.
      const shard = input.scope.shard;
      st.drain = {
        shard,
        closed: false,
        reasons: [
          'the drain was cancelled',
          `${shard} stays draining, so nothing new is placed there: \`shardctl shards set-status ${shard} open\` reopens it`,
        ],
      };
    }
  } else {
    await Promise.all(children);
    // patched: a drain run recorded before drains closed their shard replays (a query of it) unchanged.
    if (input.scope.kind === 'drain' && patched('drain-closes-shard')) {
      const shard = input.scope.shard;
      const r = await quick.closeDrainedShard({ shard, actor: input.requestedBy });
      st.drain = { shard, ...r };
      if (!r.closed) st.problems = [...st.problems, `${shard} stays draining, not closed: ${r.reasons.join('; ')}`];
    }
    const failed = st.moves.some((m) => m.state === 'failed') || st.problems.length > 0;
    // patched: an isolate that failed before this existed replays leaving its dedication, as it did.
    if (input.scope.kind === 'isolate' && st.dedicate && failed && patched('isolate-failed-undoes-dedication')) await endIsolate('failed');
    st.phase = failed ? 'failed' : 'done';
  }
  await condition(settled);
  return st;
}
