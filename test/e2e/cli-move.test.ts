// The move verbs' exit codes and --json shapes through the real `shardctl` against a real
// worker: a refused verb exits 4, a wait that runs out exits 6, a move that ends cancelled
// exits 7 (and a verb sent after it ended, 3); status, list and wait print documented JSON.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { runCli, jsonError } from '../helpers/cli';
import { closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { moveWorkflowId } from '../../lib/ids';

let env: Awaited<ReturnType<typeof H.moveEnv>>;
let cli: (...args: string[]) => ReturnType<typeof runCli>;

beforeAll(async () => {
  env = await H.moveEnv('cli');
  cli = (...args) => runCli(args, { env: { SHARDCTL_TASK_QUEUE: env.tq } });
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

const MOVE_LIST_KEYS = ['blockedReason', 'closeTime', 'phase', 'runId', 'source', 'startTime', 'status', 'target', 'tenant', 'workflowId'];

describe('shardctl move: exit codes and --json', () => {
  it(
    'exits 4 for a refused verb, 6 when a wait times out, 7 when the move ends cancelled, 3 once it is over; status, list and wait print JSON',
    { timeout: 240_000 },
    async () => {
      const tenant = await H.newTenant('shard-a', 'clim');
      await H.seed(tenant, 60, 1);
      const started = await cli(
        'move',
        'start',
        '--tenant',
        tenant,
        '--to',
        'shard-b',
        '--approve-cutover',
        'manual',
        '--soak',
        '2s',
        '--yes',
        '--actor',
        'sre-cli',
      );
      expect(started.code, started.stderr).toBe(0);
      const h = env.t.client.workflow.getHandle(moveWorkflowId(tenant));
      // The Web UI's one line for the move: the CLI read the source from the directory at start.
      expect(await (await h.describe()).staticSummary()).toBe(`move ${tenant}: shard-a → shard-b, started by sre-cli`);
      try {
        // A manual cutover holds the move before the switch: `done` cannot come within 2 s.
        const timedOut = await cli('move', 'wait', tenant, '--phase', 'done', '--timeout', '2s');
        expect(timedOut.code, timedOut.stderr).toBe(6);
        expect(timedOut.stderr).toMatch(/shardctl: timed out waiting for done; move is in \w+/);
        const timedOutJson = await cli('move', 'wait', tenant, '--phase', 'done', '--timeout', '1s', '--json');
        expect(timedOutJson.code).toBe(6);
        expect(jsonError(timedOutJson)).toMatchObject({ code: 'TimedOut', exitCode: 6 });

        await H.waitFor(h, (s) => s.awaitingApproval, 120_000);
        const refused = await cli('move', 'rollback', tenant, '--actor', 'sre-cli');
        expect(refused.code, refused.stderr).toBe(4);
        expect(refused.stderr.trim()).toBe('shardctl: rollback refused: rollback is possible only during soak (phase fence)');

        const status = await cli('move', 'status', tenant, '--json');
        expect(status.code, status.stderr).toBe(0);
        const s = JSON.parse(status.stdout);
        expect(s).toMatchObject({ tenant, source: 'shard-a', target: 'shard-b', phase: 'fence', awaitingApproval: true, operators: { startedBy: 'sre-cli' } });
        expect(Object.keys(s.copy).sort()).toEqual(['done', 'percent', 'rowsAddedDuringCopy', 'rowsCopied', 'rowsEstimated', 'rowsTotal']);
        expect(s.copy.done).toBe(true);

        const listed = await cli('move', 'list', '--json');
        expect(listed.code, listed.stderr).toBe(0);
        const mine = JSON.parse(listed.stdout).moves.filter((m: any) => m.workflowId === moveWorkflowId(tenant));
        expect(mine).toHaveLength(1);
        expect(Object.keys(mine[0]).sort()).toEqual(MOVE_LIST_KEYS);
        expect(mine[0]).toMatchObject({ tenant, status: 'RUNNING', target: 'shard-b', closeTime: null });

        const cancelled = await cli('move', 'cancel', tenant, '--actor', 'sre-cli', '--reason', 'cli test');
        expect(cancelled.code, cancelled.stderr).toBe(0);
        const ended = await cli('move', 'wait', tenant, '--phase', 'done', '--timeout', '2m');
        expect(ended.code, ended.stderr).toBe(7);
        expect(ended.stderr).toMatch(/shardctl: move ended in cancelled before reaching done/);
        const endedJson = await cli('move', 'wait', tenant, '--phase', 'done', '--json');
        expect(endedJson.code).toBe(7);
        expect(jsonError(endedJson)).toMatchObject({ code: 'MoveFailed', exitCode: 7 });

        const reached = await cli('move', 'wait', tenant, '--phase', 'cancelled', '--json');
        expect(reached.code, reached.stderr).toBe(0);
        expect(reached.stderr).toBe('');
        expect(JSON.parse(reached.stdout)).toMatchObject({ tenant, phase: 'cancelled', operators: { cancelledBy: 'sre-cli' } });

        // The workflow has ended: there is no running move to send a verb to.
        const again = await cli('move', 'cancel', tenant, '--actor', 'sre-cli');
        expect(again.code).toBe(3);
        expect(again.stderr.trim()).toBe(`shardctl: no running move for tenant ${tenant}`);
      } finally {
        await h.terminate('test over').catch(() => {});
      }
    },
  );
});
