// The cutover's dry-run twin (Vitess's switcherDryRun): the same verbs as live.ts, run by the
// same `runCutover`, that change nothing and only say what they would do. `move plan` prints
// it, so the plan an operator reads is the sequence the move runs. Pure.
import { replicationNames } from '../ids';
import type { CutoverPlan, CutoverSteps, Standing } from './steps';

export interface DryRunCutover {
  steps: CutoverSteps;
  /** What the live cutover would do, in order; the point of no return is marked. */
  log: string[];
}

export const POINT_OF_NO_RETURN_MARK = 'POINT OF NO RETURN';

export function dryRunCutoverSteps(
  plan: CutoverPlan,
  opts: { standing?: Standing; tables?: string[]; longWrites?: { longWriteMs: number; longWriteMaxWaitMs: number } } = {},
): DryRunCutover {
  const { unit, moveId, owner, next, epoch } = plan;
  const log: string[] = [];
  const say = (s: string) => void log.push(s);
  const names = replicationNames(moveId, plan.direction);
  const steps: CutoverSteps = {
    async standing() {
      const s = opts.standing ?? { kind: 'open' };
      say(`check the directory: ${unit} is ${s.kind === 'open' ? `active on ${owner} at epoch ${epoch}` : s.kind === 'foreign' ? s.reason : s.kind}`);
      return s;
    },
    async preSyncBlobs() {
      say(`copy the blob delta of ${unit} from ${owner} to ${next} right before the freeze, the final catch-up streaming meanwhile (writes continue)`);
    },
    async openFinalApply() {
      say(
        `open the final catch-up of slot ${names.slot} on ${next} and let it catch up before the freeze (writes continue), so the frozen window holds none of its set-up`,
      );
    },
    closeFinalApply() {},
    async freeze(standing) {
      if (standing.kind === 'frozen-by-this-move')
        say(`freeze: take over the earlier attempt's freeze of ${unit} with a new freeze token (the earlier attempt can no longer unfreeze or switch)`);
      else
        say(
          `freeze: directory compare-and-set ${unit} (${owner}, epoch ${epoch}, active) -> (${owner}, moving, move ${moveId}, a new freeze token); routers wait from here`,
        );
      return { ok: true };
    },
    async awaitQuietWriters() {
      const w = opts.longWrites;
      if (w && w.longWriteMs > 0 && w.longWriteMaxWaitMs > 0)
        say(
          `wait, before the freeze (writes continue), until no writer of ${unit} on ${owner} has held its write open ${w.longWriteMs} ms or more (at most ${w.longWriteMaxWaitMs} ms for all of the attempt's tries together, then freeze anyway)`,
        );
      return 0;
    },
    async raiseFence(lockBudgetMs) {
      const lock = plan.fenceLock;
      say(
        `raise the fence on ${owner}: refuse writes of ${unit}, waiting at most ${lockBudgetMs} ms for in-flight writers` +
          (lock && lockBudgetMs < plan.fenceBudgetMs
            ? `; if they hold it longer, unfreeze, wait for them before freezing again, and retry (at most ${lock.retries} times; the last try waits the whole fence budget of ${plan.fenceBudgetMs} ms)`
            : ''),
      );
      return { ok: true };
    },
    startFinalBlobSync() {
      say(
        `start the final blob sync of ${unit}'s whole prefix beside the final catch-up, unless the copy before the freeze found its objects all blob index versions (then the final delta is the objects its changed index rows name, after the catch-up)`,
      );
    },
    async applyToFencePoint(budgetMs) {
      say(
        `apply slot ${names.slot} (publication ${names.publication}) on ${next} up to the fence's marker in ${owner}'s change stream, within ${budgetMs} ms, on the catch-up opened before the freeze`,
      );
      return { ok: true, fenceLsn: '<fence position>' };
    },
    async compare(mark) {
      const t = opts.tables?.length ? ` (${opts.tables.join(', ')})` : '';
      say(
        `compare: the final blob delta, and per-table fingerprints of ${unit} on ${owner} and ${next}${t}: row counts plus the rows the stream changed since the validation passed (the whole unit when no delta is tracked); any difference unfreezes and retries`,
      );
      mark('delta read');
      mark('blobs');
      mark('rows');
      return [];
    },
    async advanceSequences() {
      say(`advance sequences: every sequence feeding a moved table on ${next} goes past ${unit}'s largest value there (never backwards)`);
      return { ok: true };
    },
    async reverseStartLsn() {
      say(`measure where reverse replication (${next} -> ${owner}) will start: ${next}'s WAL position now`);
      return '<reverse start>';
    },
    async pinFreeze() {
      say(
        `pin the freeze on ${owner}: it stops expiring (its lease is ${plan.lease.leaseMs} ms), refused if the lease already ran out; the directory refuses the switch ${plan.lease.switchWithinMs} ms after the freeze`,
      );
      return { ok: true };
    },
    async switchOwner() {
      say(
        `${POINT_OF_NO_RETURN_MARK}: ${next} accepts ${unit} at epoch ${epoch + 1}; directory compare-and-set (${owner}, epoch ${epoch}, moving, this freeze token) -> (${next}, epoch ${epoch + 1}, active), recording the reverse start with it`,
      );
    },
    async finishOldOwner() {
      say(`finish the old owner: ${owner} refuses ${unit} at epoch ${epoch + 1} and below (kept read-only as the way back)`);
    },
    async unfreeze(reason) {
      say(
        `unfreeze (${reason}): directory back to active on ${owner}, then lower ${owner}'s fence (after a raise that timed out on in-flight writers there is nothing to lower, and it does not wait for them)`,
      );
      return 'unfrozen';
    },
    async measuredPauseMs() {
      return null;
    },
    async frozenForMs() {
      return null;
    },
  };
  return { steps, log };
}
