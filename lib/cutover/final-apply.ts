// The cutover's final catch-up, opened before the freeze: its sessions (control, target, apply
// lock, slot check, replication connection) are set up and the stream caught up while the tenant
// still writes, so inside the frozen window the apply only streams the last changes up to this
// attempt's fence marker; its tear-down runs after the answer. Before, all of that ran inside the
// window: a dozen round trips each way, 3-4 s on a 200 ms link, tens of ms on a local one.
// The round is an ordinary applyChangesUntil (same progress, same apply lock, same resume
// contract); only its deadline moves: generous while it waits for the freeze, the fence budget
// from the moment the fence is raised. Node-only.
import { applyChangesUntil, RoundDeadline, type ApplyChangesOptions, type ApplyResult, type RoundStop } from '../cdc/apply';

/** How long an opened final apply waits for its fence before it ends on its own (the freeze comes seconds after it opens). */
export const FINAL_APPLY_OPEN_MS = 60_000;

export interface FinalApply {
  /** True once the stream was caught up with the source, false when the round ended before that. */
  readonly caughtUp: Promise<boolean>;
  /**
   * Whether `fenced` can still answer: the loop runs, or it stopped at this attempt's fence marker
   * already (the marker, written by the raise, may arrive before the apply step asks). False once
   * it ended any other way (an error, its own deadline): a fence raised then needs a round of its own.
   */
  usable(): boolean;
  /** The fence is raised: apply to its marker within `budgetMs`; resolves when the loop stops, with its progress committed. */
  fenced(budgetMs: number): Promise<RoundStop>;
  /** Also stop at this source position (the owner's WAL after the fence), should the marker not come first. */
  stopAt(lsn: string): void;
  /** Stops the round (commits what it applied) without waiting for its tear-down. */
  close(): void;
  /** The whole round, tear-down included. */
  readonly done: Promise<ApplyResult>;
}

export function openFinalApply(
  opts: Omit<ApplyChangesOptions, 'deadline' | 'onCaughtUp' | 'onStopped' | 'signal' | 'maxDurationMs' | 'untilMarker' | 'untilLsn' | 'untilSourceNow'> & {
    /** This attempt's fence marker: the round stops once the transaction carrying it is applied. */
    untilMarker: string;
    openMs?: number;
  },
): FinalApply {
  const openMs = opts.openMs ?? FINAL_APPLY_OPEN_MS;
  const deadline = new RoundDeadline(openMs);
  const abort = new AbortController();
  let setCaughtUp!: (v: boolean) => void;
  const caughtUp = new Promise<boolean>((r) => (setCaughtUp = r));
  let setStopped!: (r: RoundStop) => void;
  const stopped = new Promise<RoundStop>((r) => (setStopped = r));
  let running = true;
  let stop: RoundStop | undefined;
  const done = applyChangesUntil({
    ...opts,
    maxDurationMs: openMs,
    deadline,
    signal: abort.signal,
    onCaughtUp: () => setCaughtUp(true),
    onStopped: (r) => {
      running = false;
      stop = r;
      setStopped(r);
    },
  });
  // Every path of the round ends `running` and answers `caughtUp`; its failure is the caller's
  // through `fenced` or `done`, never an unhandled rejection of a round nobody waits for any more.
  const ended = () => {
    running = false;
    setCaughtUp(false);
  };
  done.then((r) => {
    ended();
    setStopped({ appliedLsn: r.appliedLsn, caughtUp: r.caughtUp, stopReason: r.stopReason });
  }, ended);
  return {
    caughtUp,
    usable: () => running || stop?.stopReason === 'until',
    fenced(budgetMs) {
      deadline.restart(budgetMs);
      // The loop's answer, or the round's failure (a lost session, a statement past its bound).
      return Promise.race([stopped, done.then(() => stopped)]);
    },
    stopAt(lsn) {
      deadline.untilLsn ??= lsn;
    },
    close() {
      abort.abort();
    },
    done,
  };
}
