// The operator's side of a chaos iteration (test/chaos/): steers a started move down its drawn
// path (rollback asked for in soak, cancel at the approval gate) and waits for its end.
import type { WorkflowHandle } from '@temporalio/client';
import * as H from './move';
import * as M from '../../workflows/messages';
import { isTerminal, phaseReached, type Phase } from '../../workflows/phases';
import { END_PHASE, type ChaosPath } from './chaos-draws';

/**
 * Resolves with the move's end status on `path` within `timeoutMs`. With `approveBlocked`, a
 * move that stopped for the operator after repeated cutover aborts (the workflow's own rail) is
 * approved again, as an operator would once the cause is gone; `onApprove` hears each time.
 */
export async function driveToEnd(
  h: WorkflowHandle,
  path: ChaosPath,
  o: { actor: string; timeoutMs: number; approveBlocked?: boolean; onApprove?: (s: M.MoveStatus) => void },
): Promise<M.MoveStatus> {
  const deadline = Date.now() + o.timeoutMs;
  const left = () => Math.max(1, deadline - Date.now());
  const reblocked = (s: M.MoveStatus) => o.approveBlocked === true && path !== 'cancel' && s.awaitingApproval;
  const reach = async (goal: Phase, until: (s: M.MoveStatus) => boolean = (s) => phaseReached(s.phase, goal)) => {
    for (;;) {
      const s = await H.waitFor(
        h,
        (x) => {
          if (until(x)) return true;
          if (isTerminal(x.phase)) throw new Error(`move ended in ${x.phase} before ${goal}: ${x.lastError}`);
          return reblocked(x);
        },
        left(),
      );
      if (until(s)) return s;
      const r = await h.executeUpdate(M.approveUpdate, { args: [{ actor: o.actor, reason: 'approved again after repeated cutover aborts' }] }).then(
        () => undefined,
        (e: Error) => e,
      );
      // Between the query and the update the move may have moved on: only that refusal is expected.
      if (r && !/not waiting for cutover approval/.test(r.message)) throw r;
      if (!r) o.onApprove?.(s);
    }
  };
  if (path === 'rollback') {
    await reach('soak');
    await h.executeUpdate(M.rollbackUpdate, { args: [{ actor: o.actor }] });
  }
  if (path === 'cancel') {
    await reach('fence', (s) => s.awaitingApproval);
    await h.executeUpdate(M.cancelUpdate, { args: [{ actor: o.actor }] });
  }
  return reach(END_PHASE[path]);
}
