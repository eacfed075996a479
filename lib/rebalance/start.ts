// The one way to start a rebalance run (CLI, tests): its fixed workflow id (one run of the fleet
// at a time; a drain or an isolate is a run too), its input from config defaults plus the
// caller's choices, and the Web UI summary naming the run's scope and who started it. Node-only (client).
import { WorkflowExecutionAlreadyStartedError, type Client, type WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import type { Config } from '../config';
import { distinctApprover } from '../moves/start';
import { ShardctlError, invalidInput } from '../errors';
import { REBALANCE_WORKFLOW_ID, type RebalanceInput } from '../../workflows/rebalance-messages';
import type { PlanScope } from './plan';

export const REBALANCE_WORKFLOW_TYPE = 'rebalanceWorkflow';

export function rebalanceInputFor(
  config: Config,
  req: {
    scope: PlanScope;
    requestedBy: string;
    reason?: string;
    maxConcurrent?: number;
    perShardLimit?: number;
    tolerance?: number;
    maxMoves?: number;
    soakSeconds?: number;
    units?: string[];
    /** Each move's cutover: `manual` waits for `move approve` (by another operator under approvals.requireDistinctApprover). */
    approveCutover?: 'auto' | 'manual';
  },
): RebalanceInput {
  const maxConcurrent = req.maxConcurrent ?? 2;
  const perShardLimit = req.perShardLimit ?? 1;
  for (const [k, v] of Object.entries({ 'max-concurrent': maxConcurrent, 'per-shard': perShardLimit }))
    if (!Number.isInteger(v) || v < 1 || v > 1000) throw invalidInput(`--${k} must be an integer in 1..1000, got ${v}`);
  if (req.tolerance !== undefined && !(req.tolerance >= 0 && req.tolerance <= 10)) throw invalidInput(`--tolerance must be in 0..10, got ${req.tolerance}`);
  if (req.maxMoves !== undefined && !(Number.isInteger(req.maxMoves) && req.maxMoves >= 1 && req.maxMoves <= 100_000))
    throw invalidInput(`--max-moves must be an integer in 1..100000, got ${req.maxMoves}`);
  const approveCutover = req.approveCutover ?? 'auto';
  if (approveCutover !== 'auto' && approveCutover !== 'manual')
    throw invalidInput(`--approve-cutover must be auto or manual, got ${JSON.stringify(String(approveCutover).slice(0, 40))}`);
  return {
    scope: req.scope,
    requestedBy: req.requestedBy,
    ...(req.reason ? { reason: req.reason } : {}),
    maxConcurrent,
    perShardLimit,
    tolerance: req.tolerance,
    maxMoves: req.maxMoves,
    units: req.units,
    move: {
      soakSeconds: req.soakSeconds ?? config.limits.soakSeconds,
      approveCutover,
      lagThresholdMs: config.limits.lagThresholdMs,
      fenceBudgetMs: config.limits.fenceBudgetMs,
      rowsPerSecond: config.limits.rowsPerSecond,
      copyBatchRows: config.limits.copyBatchRows,
      ...distinctApprover(config),
    },
  };
}

/** The run's one-line Web UI summary: `drain shard-c, started by alice`; its moves carry their own. */
export function rebalanceStaticSummary(input: Pick<RebalanceInput, 'scope' | 'requestedBy'>): string {
  const s = input.scope;
  const what = s.kind === 'drain' ? `drain ${s.shard}` : s.kind === 'isolate' ? `isolate ${s.tenant}` : 'rebalance the fleet';
  return `${what}, started by ${input.requestedBy}`;
}

/**
 * Starts the run under the fleet's id (config `temporal.rebalanceWorkflowId`); a second one while
 * one runs is refused, naming it.
 */
export async function startRebalance(
  client: Client,
  taskQueue: string,
  input: RebalanceInput,
  workflowId = REBALANCE_WORKFLOW_ID,
): Promise<WorkflowHandleWithFirstExecutionRunId> {
  try {
    return await client.workflow.start(REBALANCE_WORKFLOW_TYPE, { taskQueue, workflowId, args: [input], staticSummary: rebalanceStaticSummary(input) });
  } catch (e) {
    if (e instanceof WorkflowExecutionAlreadyStartedError)
      throw new ShardctlError('AlreadyExists', `a rebalance is already running: workflow ${workflowId}; see \`shardctl rebalance status\``);
    throw e;
  }
}
