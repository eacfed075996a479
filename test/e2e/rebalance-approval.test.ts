// Separation of duties holds for the moves a rebalance run starts, on the real stack through the
// CLI: `shards drain --approve-cutover manual --actor alice` under approvals.requireDistinctApprover
// starts moves that name alice as their operator (status, audit), wait for approval (shown by
// `rebalance status`), refuse alice's own approval with the reason — by the CLI from its config and
// by the move workflow itself for a client whose config does not ask — and take bob's, after which
// the run finishes. Isolation: a fleet of its own (test/helpers/fleet.ts); the CLI's config names its task queue.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, waitForRebalance, type Fleet } from '../helpers/fleet';
import { closePools } from '../helpers/stack';
import { runCli, configFile } from '../helpers/cli';
import * as H from '../helpers/move';
import { readAudit } from '../../lib/directory/audit';
import { moveWorkflowId } from '../../lib/ids';
import type { RebalanceStatus } from '../../workflows/rebalance-messages';

let fleet: Fleet;
let strict: { file: string; remove: () => void };
let lax: { file: string; remove: () => void };
beforeAll(async () => {
  fleet = await ownFleet('rbsod');
  const base = { ...fleet.config, temporal: { ...fleet.config.temporal, taskQueue: fleet.tq } };
  strict = configFile({ ...base, approvals: { requireDistinctApprover: true } });
  lax = configFile({ ...base, approvals: { requireDistinctApprover: false } });
}, 120_000);
afterAll(async () => {
  strict?.remove();
  lax?.remove();
  await fleet?.close();
  await closePools();
});

/** The CLI with the config that requires another approver (`strict`) or one that does not. */
const cli = (args: string[], o: { strict: boolean }) =>
  runCli(['--config', (o.strict ? strict : lax).file, ...args], { env: { SHARDCTL_ACTOR: 'env-operator' } });

describe('separation of duties for the moves of a rebalance run', () => {
  it(
    "a drain's move records the run's starter as its operator, refuses that operator's approval with the reason (CLI and workflow) and takes another's",
    { timeout: 300_000 },
    async () => {
      const tenant = await fleet.tenant('shard-c', { rows: 60, prefix: 'rbsod' });
      const started = await cli(['shards', 'drain', '--shard', 'shard-c', '--approve-cutover', 'manual', '--soak', '2s', '--yes', '--actor', 'alice'], {
        strict: true,
      });
      expect(started.code, started.stderr).toBe(0);
      const run = fleet.t.client.workflow.getHandle(fleet.config.temporal.rebalanceWorkflowId);
      await waitForRebalance(run, (s) => s.moves.some((m) => m.unit === tenant && m.state === 'running'));
      const move = fleet.t.client.workflow.getHandle(moveWorkflowId(tenant));
      const waiting = await H.waitFor(move, (s) => s.awaitingApproval, 180_000);
      expect(waiting.operators.startedBy).toBe('alice');
      expect(waiting.operators.approvedBy).toBeUndefined();

      // The run's status names the move that waits and the command that lets it go on.
      const status = await cli(['rebalance', 'status'], { strict: true });
      expect(status.code, status.stderr).toBe(0);
      const row = status.stdout.split('\n').find((l) => l.includes(` ${tenant} `));
      expect(row?.trim().split(/\s{2,}/)).toEqual([
        'running',
        tenant,
        expect.stringMatching(/^shard-c -> shard-\w+$/),
        `phase fence, waiting for \`shardctl move approve ${tenant}\``,
      ]);
      const statusJson = await cli(['rebalance', 'status', '--json'], { strict: true });
      expect(JSON.parse(statusJson.stdout).awaitingApproval).toEqual([tenant]);

      const refusal = `separation of duties (approvals.requireDistinctApprover): alice started this move, so another operator must approve it`;
      // The CLI's own check (strict config), then the workflow's (a config that does not ask).
      for (const o of [{ strict: true }, { strict: false }]) {
        const self = await cli(['move', 'approve', tenant, '--actor', 'alice'], o);
        expect(self.code, self.stderr).toBe(4);
        expect(self.stderr.trim()).toBe(`shardctl: approve refused: ${refusal}`);
        const s = await H.waitFor(move, () => true);
        expect(s.awaitingApproval).toBe(true);
        expect(s.operators.approvedBy).toBeUndefined();
      }
      const other = await cli(['move', 'approve', tenant, '--actor', 'bob', '--reason', 'CHG-7'], { strict: false });
      expect(other.code, other.stderr).toBe(0);
      expect(other.stdout.trim()).toBe(`${tenant}: approved`);

      const end: RebalanceStatus = await run.result();
      expect(end.phase).toBe('done');
      expect(end.moves.filter((m) => m.unit === tenant).map((m) => m.state)).toEqual(['done']);
      const done = await H.waitPhase(move, 'done', 60_000);
      expect(done.operators).toMatchObject({ startedBy: 'alice', approvedBy: 'bob' });

      const audit = (await readAudit(fleet.directory, { sinceMs: 3_600_000, unit: tenant, limit: 1000 })).entries;
      expect(audit.filter((e) => e.action === 'move.start').map((e) => e.actor)).toEqual(['alice']);
      expect(audit.filter((e) => e.action === 'move.approve').map((e) => ({ actor: e.actor, reason: e.reason }))).toEqual([{ actor: 'bob', reason: 'CHG-7' }]);
    },
  );
});
