// Every operator verb on a rebalance run writes its audit entry, on the real stack through the
// CLI: `shards drain` (a start verb, the same code as `rebalance start`; actor from $SHARDCTL_ACTOR, --reason), `pause`, `resume` and `cancel`
// (--actor or $SHARDCTL_ACTOR, --reason) each append one `rebalance.<verb>` row naming the actor,
// the reason and the run (its workflow id and scope), as the move verbs append `move.<verb>`.
// Isolation: a fleet of its own (test/helpers/fleet.ts); the CLI's config names its task queue.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, waitForRebalance, type Fleet } from '../helpers/fleet';
import { closePools } from '../helpers/stack';
import { runCli, configFile } from '../helpers/cli';
import { readAudit } from '../../lib/directory/audit';
import type { RebalanceStatus } from '../../workflows/rebalance-messages';

let fleet: Fleet;
let cfg: { file: string; remove: () => void };
beforeAll(async () => {
  fleet = await ownFleet('rbaudit');
  // A copy of 20 rows a second: the drain's one move is still copying while the verbs are sent.
  cfg = configFile({
    ...fleet.config,
    temporal: { ...fleet.config.temporal, taskQueue: fleet.tq },
    limits: { ...fleet.config.limits, rowsPerSecond: 20, copyBatchRows: 20 },
  });
}, 120_000);
afterAll(async () => {
  cfg?.remove();
  await fleet?.close();
  await closePools();
});

const cli = (args: string[]) => runCli(['--config', cfg.file, ...args], { env: { SHARDCTL_ACTOR: 'env-operator' } });

describe('rebalance verbs are audited', () => {
  it('start, pause, resume and cancel each append a rebalance.<verb> entry with the actor, the reason and the run', { timeout: 300_000 }, async () => {
    const tenant = await fleet.tenant('shard-c', { rows: 600, load: 2, prefix: 'rba' });
    const id = fleet.config.temporal.rebalanceWorkflowId;
    // `shards drain` is a start verb of a rebalance run (the same code as `rebalance start`).
    const started = await cli(['shards', 'drain', '--shard', 'shard-c', '--reason', 'retire the host']);
    expect(started.code, started.stderr).toBe(0);
    const h = fleet.t.client.workflow.getHandle(id);
    await waitForRebalance(h, (s) => s.moves.some((m) => m.unit === tenant && m.state === 'running'));

    for (const args of [
      ['rebalance', 'pause', '--actor', 'pauser', '--reason', 'maintenance window'],
      ['rebalance', 'resume'],
      ['rebalance', 'cancel', '--actor', 'canceller', '--reason', 'wrong plan'],
    ]) {
      const r = await cli(args);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
    }
    const st: RebalanceStatus = await h.result();
    expect(st.phase).toBe('cancelled');

    const entries = (await readAudit(fleet.directory, { sinceMs: 3_600_000, limit: 1000 })).entries.filter((e) => e.action.startsWith('rebalance.'));
    const scope = { kind: 'drain', shard: 'shard-c' };
    expect(entries.map((e) => ({ action: e.action, actor: e.actor, reason: e.reason, unit: e.unit, detail: e.detail }))).toEqual([
      { action: 'rebalance.start', actor: 'env-operator', reason: 'retire the host', unit: null, detail: { workflowId: id, scope } },
      { action: 'rebalance.pause', actor: 'pauser', reason: 'maintenance window', unit: null, detail: { workflowId: id, scope } },
      { action: 'rebalance.resume', actor: 'env-operator', reason: null, unit: null, detail: { workflowId: id, scope } },
      { action: 'rebalance.cancel', actor: 'canceller', reason: 'wrong plan', unit: null, detail: { workflowId: id, scope } },
    ]);
  });
});
