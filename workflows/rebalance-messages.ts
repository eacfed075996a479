// The rebalance workflow's messages and status: one module the CLI imports too.
import { defineQuery, defineUpdate } from '@temporalio/workflow';
import type { Operator, MoveInput } from './messages';
import type { PlanScope, PlannedMove, ShardSummary } from '../lib/rebalance/plan';

/** The one rebalance run of the fleet at a time: a drain or an isolate is a rebalance too. */
export const REBALANCE_WORKFLOW_ID = 'rebalance';

export type RebalancePhase = 'planning' | 'running' | 'cancelling' | 'done' | 'cancelled' | 'failed';
export type PlannedMoveState = 'pending' | 'running' | 'done' | 'failed' | 'cancelled' | 'dropped';

export interface RebalanceMoveEntry extends PlannedMove {
  /** The move workflow's id, derived from the unit (one move per unit at a time). */
  workflowId: string;
  state: PlannedMoveState;
  /** Which plan of this run proposed it (1 = the first; later ones are re-plans after a failure). */
  plan: number;
  /** How it ended: the move's final phase, or why it failed. */
  result?: string;
}

/** A move of a given plan: what `rebalance plan --json` prints of it (load and reason optional). */
export interface PlannedInputMove {
  unit: string;
  from: string;
  to: string;
  load?: number;
  /** The plan's measured bytes of the unit (`rebalance plan`), shown by status; 0 when absent. */
  bytes?: number;
  reason?: string;
}

export interface RebalanceInput {
  scope: PlanScope;
  requestedBy: string;
  /** Why the operator started it (the `rebalance.start` audit entry's reason). */
  reason?: string;
  maxConcurrent: number;
  /** Moves out of and into one shard at a time (each direction counted apart). */
  perShardLimit: number;
  tolerance?: number;
  maxMoves?: number;
  /** Only these units may move (the others count for load); default every tenant unit. */
  units?: string[];
  /** Re-plans after failed moves before the run gives up; default 5. */
  maxReplans?: number;
  /**
   * The run continues as new once its history has this many events (or Temporal suggests it),
   * after its running moves finish; default DEFAULT_HISTORY_EVENT_BOUND. Tests set it low.
   */
  historyEventBound?: number;
  /**
   * The moves to run, exactly (`rebalance apply --plan FILE`, checked against the directory before
   * the start): the run never plans, and a failed move is reported, never replaced. Unit and shard
   * names only.
   */
  planned?: { moves: PlannedInputMove[] };
  /** Set by the run itself when it continues as new: its state so far. */
  carried?: { status: RebalanceStatus; failedSincePlan: boolean };
  /** Every child move's input but its unit, target and id. */
  move: Omit<MoveInput, 'moveId' | 'unit' | 'tenant' | 'target' | 'requestedBy' | 'resume'>;
}

export interface RebalanceStatus {
  phase: RebalancePhase;
  scope: PlanScope;
  paused: boolean;
  maxConcurrent: number;
  perShardLimit: number;
  plans: number;
  moves: RebalanceMoveEntry[];
  /** Load per shard as the latest plan expected it before and after. */
  shards: ShardSummary[];
  /** What the latest plan could not do. */
  problems: string[];
  balanced: boolean;
  /** Shards marked for this run (draining, dedicated). */
  marked: string[];
  lastError: string;
  /** For an isolate: the shard its plan dedicates to the tenant. */
  dedicate?: { shard: string; tenant: string };
  /**
   * A cancelled isolate's end: its dedication undone (and why), or the state it left and the
   * command that undoes it.
   */
  isolate?: { shard: string; tenant: string; undone: boolean; why?: string; state?: string[]; undoCommand?: string };
  /** A drain's end: whether its shard was closed, and if not why (units or unfinished moves left). */
  drain?: { shard: string; closed: boolean; reasons: string[] };
  operators: { startedBy: string; pausedBy?: string; cancelledBy?: string };
  /** The run was given its plan (`rebalance apply --plan`): it never plans or re-plans. */
  fromPlanFile?: boolean;
  /** How many times the run has continued as new (its history restarted, its state carried). */
  continuedAsNew: number;
}

/** Far below Temporal's limits (50k events), above a run of a few dozen moves. */
export const DEFAULT_HISTORY_EVENT_BOUND = 2000;

export const rebalanceStatusQuery = defineQuery<RebalanceStatus>('rebalanceStatus');
export const rebalancePauseUpdate = defineUpdate<string, [Operator]>('rebalancePause');
export const rebalanceResumeUpdate = defineUpdate<string, [Operator]>('rebalanceResume');
export const rebalanceCancelUpdate = defineUpdate<string, [Operator]>('rebalanceCancel');
