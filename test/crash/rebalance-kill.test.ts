// The worker killed (SIGKILL) in the middle of a rebalance run, with two moves copying under live
// writes: a new worker picks the run and its child moves up from Temporal's history, the run ends
// `done` with every unit on its planned shard, and DESIGN.md §5 holds for each moved tenant
// (assertInvariants: the whole unit verified against the traffic log, one owner at epoch 2, the
// old owner refusing every epoch, no slot, publication or leftover, the bystander undisturbed).
// The run is given its plan (input.planned, as `rebalance apply --plan`), so the shared stack's
// other tenants never change what it does; its workflow id is its own.
import { describe, it, expect } from 'vitest';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';
import { waitForRebalance } from '../helpers/fleet';
import { testConfig } from '../helpers/stack';
import { moveWorkflowId } from '../../lib/ids';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import type { RebalanceStatus } from '../../workflows/rebalance-messages';
import type { MoveStatus } from '../../workflows/messages';

const suite = C.crashSuite();

describe('a rebalance run survives its worker', () => {
  it(
    'killed with SIGKILL while two moves copy, a new worker finishes the run: done, every unit on its planned shard, invariants clean',
    { timeout: 400_000 },
    async () => {
      const tq = C.uniq('rbkill');
      const first = C.spawnWorker(tq);
      await first.ready;
      const t1 = await H.newTenant('shard-a', 'rk');
      const t2 = await H.newTenant('shard-a', 'rk');
      const bystander = await H.newTenant('shard-a', 'rkb');
      await H.seed(t1, 400, 2);
      await H.seed(t2, 400, 2);
      await H.seed(bystander, 40, 1);
      const baselines = await Promise.all([t1, t2, bystander].map((t) => C.baselineOf(t)));
      const planned = [
        { unit: t1, from: 'shard-a', to: 'shard-b' },
        { unit: t2, from: 'shard-a', to: 'shard-c' },
      ];
      const traffic = await C.startTraffic(`rebalance-kill-${t1}`, [t1, t2, bystander], 30);
      let second: C.ChildWorker | undefined;
      try {
        const base = rebalanceInputFor(testConfig(), { scope: { kind: 'rebalance' }, requestedBy: 'test', maxConcurrent: 2, perShardLimit: 2, soakSeconds: 2 });
        // 40 rows a second: each copy takes about ten seconds, long enough to kill the worker in it.
        const input = { ...base, planned: { moves: planned }, move: { ...base.move, rowsPerSecond: 40, copyBatchRows: 20 } };
        const h = await startRebalance(suite.client, tq, input, C.uniq('rebalance-kill'));
        const both = await waitForRebalance(h, (s) => s.moves.filter((m) => m.state === 'running').length === 2);
        expect(both.phase).toBe('running');
        // Mid-copy: some of t1's rows already on its target, not all.
        const deadline = Date.now() + 60_000;
        while ((await H.rowCount('shard-b', t1)) === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        const copied = await H.rowCount('shard-b', t1);
        expect(copied).toBeGreaterThan(0);
        expect(copied, 'the copy finished before the kill').toBeLessThan(400);

        first.proc.kill('SIGKILL');
        expect(await first.exited).toEqual({ code: null, signal: 'SIGKILL' });
        // Not ended at the kill: the run's history has no completion yet.
        expect((await h.describe()).status.name).toBe('RUNNING');

        second = C.spawnWorker(tq);
        await second.ready;
        const st: RebalanceStatus = await h.result();
        await new Promise((r) => setTimeout(r, 1000));
        await traffic.stop();

        expect(st.lastError).toBe('');
        expect(st).toMatchObject({ phase: 'done', plans: 1, fromPlanFile: true, problems: [] });
        expect(st.moves.map((m) => [m.unit, m.to, m.state])).toEqual(planned.map((m) => [m.unit, m.to, 'done']));

        // Both workers ran the run's workflow tasks: the second one finished what the first began.
        const identities = new Set(
          ((await h.fetchHistory()).events ?? []).flatMap((e) =>
            e.workflowTaskStartedEventAttributes?.identity ? [e.workflowTaskStartedEventAttributes.identity] : [],
          ),
        );
        expect(identities.size, [...identities].join(', ')).toBeGreaterThanOrEqual(2);

        for (const m of planned) {
          const status: MoveStatus = await suite.client.workflow.getHandle(moveWorkflowId(m.unit)).result();
          expect(status.phase).toBe('done');
          await C.assertInvariants({
            tenant: m.unit,
            bystanders: [bystander],
            source: m.from,
            target: m.to,
            status,
            expectOwner: m.to,
            expectEpoch: 2,
            traffic,
            baselines,
          });
        }
      } finally {
        await traffic.stop();
        await C.stopWorker(second);
        await C.stopWorker(first);
      }
    },
  );
});
