// The move workflow's state and its transitions (Temporal's safe-message-handlers shape): what
// survives continue-as-new (`Carried`), the status the query returns, and the only ways they
// change — `enter` (through the pure transition table) and `block` — each re-publishing the
// search attributes the Web UI filters on and the current details it shows (`showDetails`, also
// after progress). Deterministic: workflow APIs only.
import { upsertSearchAttributes, setCurrentDetails, ApplicationFailure, log } from '@temporalio/workflow';
import * as M from './messages';
import { Phase, canTransition } from './phases';
import { SA } from './search-attributes';
import { moveCurrentDetails } from '../lib/moves/web-ui';

/** Everything that must survive continue-as-new. */
export interface Carried {
  status: M.MoveStatus;
  cancelRequested: boolean;
  rollbackRequested: boolean;
  retireNowRequested: boolean;
  approved: boolean;
  soakEndsAtMs: number | null;
  /** Cutover attempts aborted since the last success or operator approval (absent in older runs). */
  cutoverAbortsInRow?: number;
  /** The operators' reasons for the verbs audited when they end, not when asked (absent in older runs). */
  reasons?: { cancel?: string; rollback?: string; retire?: string };
  /** Validations this move asked for (absent in older runs): names each, so a retried one resumes its own progress only. */
  validations?: number;
}

/** The status a move starts with (also the base of the tests' status fixtures). */
export function initialStatus(input: M.MoveInput): M.MoveStatus {
  return {
    moveId: input.moveId,
    unit: input.unit,
    tenant: input.tenant,
    source: '',
    target: input.target,
    phase: 'plan',
    epoch: 0,
    paused: false,
    awaitingApproval: false,
    blockedReason: '',
    lastError: '',
    tables: [],
    blobs: { copied: 0, total: 0, bytes: 0 },
    lagBytes: 0,
    lagSeconds: 0,
    etaSeconds: null,
    cutoverPauseMs: null,
    cutoverAttempts: 0,
    cutoverAbortedPausesMs: [],
    soakEndsAt: null,
    phaseTimes: {},
    operators: { startedBy: input.requestedBy },
    validation: { ok: null, mismatches: [] },
  };
}

/** How many aborted attempts' pauses the status keeps (the oldest are dropped). */
export const ABORTED_PAUSES_KEPT = 20;

/** Records an aborted cutover attempt's write pause on the status (deterministic: no workflow API). */
export function noteAbortedPause(st: M.MoveStatus, pauseMs: number): void {
  const kept = [...(st.cutoverAbortedPausesMs ?? []), pauseMs];
  st.cutoverAbortedPausesMs = kept.slice(-ABORTED_PAUSES_KEPT);
}

export class MoveState {
  readonly carried: Carried;
  readonly st: M.MoveStatus;

  constructor(input: M.MoveInput) {
    this.carried = (input.resume as Carried | undefined) ?? {
      status: initialStatus(input),
      cancelRequested: false,
      rollbackRequested: false,
      retireNowRequested: false,
      approved: false,
      soakEndsAtMs: null,
    };
    this.st = this.carried.status;
  }

  publish(): void {
    const st = this.st;
    upsertSearchAttributes([
      { key: SA.unit, value: st.unit },
      { key: SA.source, value: st.source || 'unknown' },
      { key: SA.target, value: st.target },
      { key: SA.phase, value: st.phase },
      { key: SA.blockedReason, value: st.blockedReason ? st.blockedReason.slice(0, 200) : null },
    ]);
    this.showDetails();
  }

  /** The Web UI's current details (phase, progress, what it waits for): not a command, so free to call on any change. */
  showDetails(): void {
    setCurrentDetails(moveCurrentDetails(this.st));
  }

  /** Moves to phase `p` if the transition table allows it; an illegal transition is a bug and fails the workflow. */
  enter(p: Phase): void {
    const st = this.st;
    if (p !== st.phase && !canTransition(st.phase, p)) throw ApplicationFailure.nonRetryable(`illegal transition ${st.phase} -> ${p}`, 'IllegalTransition');
    const from = st.phase;
    st.phase = p;
    st.phaseTimes[p] = new Date().toISOString();
    this.publish();
    // Through the worker's JSON logger (worker/instrument.ts); not repeated on replay.
    log.info('move phase', { moveId: st.moveId || null, unit: st.unit, phase: p, from, source: st.source || null, target: st.target });
  }

  /** Sets (or with '' clears) the reason the move is stuck, visible as ShardctlBlockedReason. */
  block(reason: string): void {
    if (this.st.blockedReason !== reason) {
      this.st.blockedReason = reason;
      this.publish();
      if (reason) log.warn('move blocked', { moveId: this.st.moveId || null, unit: this.st.unit, phase: this.st.phase, blockedReason: reason });
    }
  }

  /** The move reference every activity takes; `phase` only labels the activity's logs and metrics. */
  ref() {
    const st = this.st;
    return { moveId: st.moveId, unit: st.unit, source: st.source, target: st.target, phase: st.phase };
  }
}
