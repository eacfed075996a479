// Every operator verb on a move writes its audit entry, on the real stack through the CLI (issue
// 12: "every verb records the operator in the audit log"): `move pause` and `move resume` when
// accepted (`move.pause`, `move.resume`), `move cancel` and `move rollback` with their outcome
// (`move.cancelled`, `move.rolled-back`), each naming the operator (--actor, else $SHARDCTL_ACTOR)
// and the --reason given when the verb was sent. `move throttle`, `approve`, `extend-soak` and
// `retire` are in test/e2e/cli-ops.test.ts.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { runCli } from '../helpers/cli';
import { closePools, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { readAudit, type AuditEntry } from '../../lib/directory/audit';
import type { MoveStatus } from '../../workflows/messages';

let env: Awaited<ReturnType<typeof H.moveEnv>>;
let cli: (args: string[], actor?: string) => ReturnType<typeof runCli>;

beforeAll(async () => {
  env = await H.moveEnv('vaud');
  // $SHARDCTL_ACTOR is the operator of a verb sent without --actor.
  cli = (args, actor = 'env-operator') => runCli(args, { env: { SHARDCTL_TASK_QUEUE: env.tq, SHARDCTL_ACTOR: actor }, timeoutMs: 120_000 });
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

/** The tenant's `move.*` audit entries, oldest first. */
async function moveEntries(tenant: string): Promise<AuditEntry[]> {
  const page = await readAudit(directoryPool(), { unit: tenant, sinceMs: 3_600_000, limit: 1000 });
  return page.entries.filter((e) => e.action.startsWith('move.'));
}
const who = (e: AuditEntry) => ({ action: e.action, actor: e.actor, reason: e.reason });

describe('move verbs are audited with their operator and reason', () => {
  it(
    'pause, resume and cancel each append their entry (move.pause, move.resume, move.cancelled) with the actor and the reason',
    { timeout: 240_000 },
    async () => {
      const tenant = await H.newTenant('shard-a', 'vaudc');
      await H.seed(tenant, 400, 0);
      // A copy of 5 rows a second: the move is still copying while the verbs are sent.
      const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { rowsPerSecond: 5, copyBatchRows: 10 }));
      await H.waitFor(h, (s) => s.phase === 'copy', 90_000);

      const paused = await cli(['move', 'pause', tenant, '--actor', 'sre-pause', '--reason', 'OPS-1 peak traffic']);
      expect(paused.code, paused.stderr).toBe(0);
      await H.waitFor(h, (s) => s.paused, 30_000);
      const resumed = await cli(['move', 'resume', tenant]);
      expect(resumed.code, resumed.stderr).toBe(0);
      const cancelled = await cli(['move', 'cancel', tenant, '--actor', 'sre-cancel', '--reason', 'wrong target shard']);
      expect(cancelled.code, cancelled.stderr).toBe(0);
      const end: MoveStatus = await h.result();
      expect(end.phase).toBe('cancelled');

      const entries = await moveEntries(tenant);
      expect(entries.filter((e) => ['move.pause', 'move.resume', 'move.cancelled'].includes(e.action)).map(who)).toEqual([
        { action: 'move.pause', actor: 'sre-pause', reason: 'OPS-1 peak traffic' },
        { action: 'move.resume', actor: 'env-operator', reason: null },
        { action: 'move.cancelled', actor: 'sre-cancel', reason: 'wrong target shard' },
      ]);
      expect(entries.every((e) => e.detail.moveId === end.moveId)).toBe(true);
    },
  );

  it('rollback appends move.rolled-back with the actor and the reason, after the switch it undoes', { timeout: 240_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'vaudr');
    await H.seed(tenant, 50, 0);
    const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 3600 }));
    await H.waitPhase(h, 'soak', 180_000);

    const rolledBack = await cli(['move', 'rollback', tenant, '--reason', 'p99 regressed on shard-b'], 'sre-rollback');
    expect(rolledBack.code, rolledBack.stderr).toBe(0);
    const end: MoveStatus = await h.result();
    expect(end.phase).toBe('rolled-back');

    const entries = await moveEntries(tenant);
    const rb = entries.filter((e) => e.action === 'move.rolled-back');
    expect(rb.map(who)).toEqual([{ action: 'move.rolled-back', actor: 'sre-rollback', reason: 'p99 regressed on shard-b' }]);
    expect(rb[0].detail).toMatchObject({ moveId: end.moveId, epoch: end.epoch });
    const actions = entries.map((e) => e.action);
    expect(actions.indexOf('move.switched')).toBeLessThan(actions.indexOf('move.rolled-back'));
  });
});
