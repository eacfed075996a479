// The one way to start a move (CLI, tests, benches): the workflow id derived from the unit, the
// input built from config defaults plus the caller's choices, and the search attributes and the
// static summary/details (tenant, source → target, who started it) set at start so the Web UI
// lists and names the move before its first workflow task runs. Node-only (client).
import { WorkflowExecutionAlreadyStartedError, type Client, type WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { TypedSearchAttributes } from '@temporalio/common';
import type { Config } from '../config';
import { moveWorkflowId } from '../ids';
import { ShardctlError } from '../errors';
import type { MoveInput } from '../../workflows/messages';
import { SA } from '../../workflows/search-attributes';
import { moveStaticDetails, moveStaticSummary } from './web-ui';

export const MOVE_WORKFLOW_TYPE = 'moveTenantWorkflow';

/** A move's input: config's limits as defaults, overridden by what the caller chose. */
export function moveInputFor(
  config: Config,
  req: { tenant: string; target: string; requestedBy: string } & Partial<Omit<MoveInput, 'tenant' | 'target' | 'requestedBy'>>,
): MoveInput {
  return {
    moveId: '',
    unit: req.tenant,
    soakSeconds: config.limits.soakSeconds,
    approveCutover: 'auto',
    lagThresholdMs: config.limits.lagThresholdMs,
    fenceBudgetMs: config.limits.fenceBudgetMs,
    rowsPerSecond: config.limits.rowsPerSecond,
    ...distinctApprover(config),
    ...req,
  };
}

/** Separation of duties, when configured, travels with the move: the workflow enforces it. */
export function distinctApprover(config: Config): Pick<MoveInput, 'requireDistinctApprover'> {
  return config.approvals.requireDistinctApprover ? { requireDistinctApprover: true } : {};
}

/**
 * Starts the move workflow; a second move of the same unit is refused, naming the running one.
 * `source`, when the caller knows it (the directory's owner now), goes into the Web UI summary;
 * the plan still decides the source from the directory.
 */
export async function startMove(
  client: Client,
  taskQueue: string,
  input: MoveInput,
  o: { source?: string } = {},
): Promise<WorkflowHandleWithFirstExecutionRunId> {
  const workflowId = moveWorkflowId(input.unit);
  try {
    return await client.workflow.start(MOVE_WORKFLOW_TYPE, {
      taskQueue,
      workflowId,
      args: [input],
      staticSummary: moveStaticSummary(input, o.source),
      staticDetails: moveStaticDetails(input, { source: o.source }),
      typedSearchAttributes: new TypedSearchAttributes([
        { key: SA.unit, value: input.unit },
        { key: SA.target, value: input.target },
        { key: SA.phase, value: 'plan' },
      ]),
    });
  } catch (e) {
    if (e instanceof WorkflowExecutionAlreadyStartedError) {
      throw new ShardctlError(
        'AlreadyExists',
        `a move of ${input.tenant} is already running: workflow ${workflowId}; see \`shardctl move status ${input.tenant}\``,
      );
    }
    throw e;
  }
}
