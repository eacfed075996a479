// The move workflow's messages (signals, updates, queries): one module the CLI imports too.
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { Phase } from './phases';

export interface Operator {
  actor: string;
  reason?: string;
}

export interface TableProgress {
  table: string;
  rowsCopied: number;
  rowsEstimated: number;
  done: boolean;
}

export interface MoveStatus {
  moveId: string;
  unit: string;
  tenant: string;
  source: string;
  target: string;
  phase: Phase;
  epoch: number;
  paused: boolean;
  awaitingApproval: boolean;
  blockedReason: string;
  lastError: string;
  tables: TableProgress[];
  blobs: { copied: number; total: number; bytes: number };
  lagBytes: number;
  lagSeconds: number;
  etaSeconds: number | null;
  cutoverPauseMs: number | null;
  /** ms since the freeze at the end of each cutover step (fenced, applied, blobs, compared, switched). */
  cutoverSteps?: Record<string, number>;
  /** The switching attempt's final blob delta: via the blob index or the whole prefix, objects looked at and copied. */
  cutoverBlobSync?: { via: 'index' | 'prefix'; objects: number; copied: number; requests?: number };
  cutoverAttempts: number;
  /**
   * The write pause of each aborted cutover attempt, in order (forward and rollback; the last
   * 20): those froze the tenant's writes too, though no switch came of them. Absent in older runs.
   */
  cutoverAbortedPausesMs?: number[];
  /**
   * What the cutover attempts waited in all, before freezing (writes went on), for writers of the
   * unit holding its write lock long (lib/shard/unit-writers.ts). Absent: none waited for.
   */
  cutoverWritersWaitedMs?: number;
  soakEndsAt: string | null;
  phaseTimes: Partial<Record<Phase, string>>;
  operators: { startedBy: string; approvedBy?: string; rolledBackBy?: string; retiredBy?: string; cancelledBy?: string };
  validation: { ok: boolean | null; mismatches: string[] };
  /** The passing validation's comparison token: the cutover compares only what changed since it. */
  deltaToken?: string;
}

export const statusQuery = defineQuery<MoveStatus>('status');
export const pauseUpdate = defineUpdate<string, [Operator]>('pause');
export const resumeUpdate = defineUpdate<string, [Operator]>('resume');
export const cancelUpdate = defineUpdate<string, [Operator]>('cancel');
export const approveUpdate = defineUpdate<string, [Operator]>('approve');
export const rollbackUpdate = defineUpdate<string, [Operator]>('rollback');
export const retireNowUpdate = defineUpdate<string, [Operator]>('retireNow');
export const extendSoakUpdate = defineUpdate<string, [Operator & { seconds: number }]>('extendSoak');
/** Cancel as a signal: what a parent workflow (the rebalancer) can send; ignored when cancel is refused. */
export const cancelSignal = defineSignal<[Operator]>('cancelMove');
export const throttleUpdate = defineUpdate<string, [Operator & { rowsPerSecond: number }]>('throttle');

/** How a move's cutover is approved: `auto` goes ahead, `manual` waits for `move approve`. */
export const APPROVAL_MODES = ['auto', 'manual'] as const;
export type ApprovalMode = (typeof APPROVAL_MODES)[number];

export interface MoveInput {
  moveId: string;
  unit: string;
  tenant: string;
  target: string;
  soakSeconds: number;
  approveCutover: ApprovalMode;
  requestedBy: string;
  lagThresholdMs: number;
  fenceBudgetMs: number;
  rowsPerSecond: number;
  /** Rows per copy batch (checkpoint granularity); default 5000. */
  copyBatchRows?: number;
  /** Aborted cutover attempts in a row before the move waits for `move approve`; default 3. */
  maxCutoverAborts?: number;
  /** `approve` by `requestedBy` is refused (config approvals.requireDistinctApprover at start). */
  requireDistinctApprover?: boolean;
  /** Carried across continue-as-new. */
  resume?: unknown;
}
