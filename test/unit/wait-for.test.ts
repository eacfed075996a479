// The move tests' wait helper (test/helpers/move.ts): what its predicate throws ("the move ended
// in X", "blocked in validate") must fail the wait at once, while a status query that fails
// (the workflow not started yet, a worker restarting) is retried until the deadline.
import { describe, it, expect } from 'vitest';
import type { WorkflowHandle } from '@temporalio/client';
import { waitFor, waitPhase } from '../helpers/move';
import type { MoveStatus } from '../../workflows/messages';

/** A handle whose status query answers from a script: a status, or an error to throw. */
function scriptedHandle(script: Array<Partial<MoveStatus> | Error>): WorkflowHandle & { queries: number } {
  const h = {
    queries: 0,
    async query() {
      const step = script[Math.min(h.queries++, script.length - 1)];
      if (step instanceof Error) throw step;
      return step as MoveStatus;
    },
  };
  return h as unknown as WorkflowHandle & { queries: number };
}

describe('waitFor', () => {
  it('fails at once with what the predicate throws', async () => {
    const h = scriptedHandle([{ phase: 'copy' }, { phase: 'failed', lastError: 'boom' }]);
    const t0 = Date.now();
    await expect(waitPhase(h, 'done', 8_000)).rejects.toThrow('move ended in failed before done: boom');
    expect(Date.now() - t0).toBeLessThan(4_000);
    expect(h.queries).toBe(2);
  });

  it('retries a failing status query until it answers', async () => {
    const h = scriptedHandle([new Error('workflow not found'), new Error('workflow not found'), { phase: 'soak' }]);
    await expect(waitFor(h, (s) => s.phase === 'soak', 10_000)).resolves.toMatchObject({ phase: 'soak' });
    expect(h.queries).toBe(3);
  });

  it('times out naming the last status and the last query error', async () => {
    const h = scriptedHandle([{ phase: 'copy' }, new Error('connection refused')]);
    await expect(waitFor(h, () => false, 700)).rejects.toThrow(/timed out after 700 ms; last status \{"phase":"copy"\}; last query error: connection refused/);
  });
});
