// The rebalance run's history stays small: with a low history bound it continues as new (between
// moves, never with one running) carrying its plan, every move's state and the paused flag; the
// status query and pause/resume reach whichever run is current; the run ends with the summary of
// all its moves, and every recorded run's history replays against the current workflow code.
// Isolation: a fleet of its own (test/helpers/fleet.ts) — own directory, rebalance id, task queue.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import path from 'node:path';
import { Worker } from '@temporalio/worker';
import { ownFleet, waitForRebalance, moveExists, runsOf, type Fleet } from '../helpers/fleet';
import { closePools } from '../helpers/stack';
import { getShard } from '../../lib/directory/shards';
import { getPlacement } from '../../lib/directory/placements';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import * as R from '../../workflows/rebalance-messages';

let fleet: Fleet;

beforeAll(async () => {
  fleet = await ownFleet('rbcan');
});
afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('rebalance continue-as-new', () => {
  it(
    'with a history bound of 12 events it continues as new between moves, keeps paused across it, and ends with all three moves in its summary; every run replays',
    { timeout: 400_000 },
    async () => {
      const tenants: string[] = [];
      for (let i = 0; i < 3; i++) tenants.push(await fleet.tenant('shard-c', { rows: 20, prefix: `can${i}` }));
      const input = {
        ...rebalanceInputFor(fleet.config, { scope: { kind: 'drain', shard: 'shard-c' }, requestedBy: 'test', maxConcurrent: 1, soakSeconds: 1 }),
        historyEventBound: 12,
      };
      const id = fleet.config.temporal.rebalanceWorkflowId;
      const h = await startRebalance(fleet.t.client, fleet.tq, input, id);
      // Paused before any move starts: the first run plans, passes its bound, and continues paused.
      expect(await h.executeUpdate(R.rebalancePauseUpdate, { args: [{ actor: 'pauser' }] })).toMatch(/^paused/);
      const paused = await waitForRebalance(h, (s) => s.continuedAsNew >= 1);
      expect(paused).toMatchObject({ paused: true, phase: 'running', plans: 1, operators: { pausedBy: 'pauser' } });
      expect(paused.moves.map((m) => m.state)).toEqual(['pending', 'pending', 'pending']);
      await new Promise((r) => setTimeout(r, 3000));
      for (const t of tenants) expect(await moveExists(fleet.t.client, t), `${t} started while paused`).toBe(false);

      // The update goes to the current run (the continued one) and the carried state goes on.
      expect(await h.executeUpdate(R.rebalanceResumeUpdate, { args: [{ actor: 'resumer' }] })).toBe('resumed');
      const st: R.RebalanceStatus = await h.result();

      expect(st.problems).toEqual([]);
      expect(st.phase).toBe('done');
      expect(st.plans).toBe(1);
      expect(st.moves.map((m) => m.unit).sort()).toEqual([...tenants].sort());
      expect(st.moves.every((m) => m.state === 'done' && m.from === 'shard-c' && m.plan === 1)).toBe(true);
      expect(st.drain).toEqual({ shard: 'shard-c', closed: true, reasons: [] });
      expect(st.operators).toEqual({ startedBy: 'test' });
      // One run planned, one run per move (a move starts, the bound is passed, it finishes, the run continues).
      expect(st.continuedAsNew).toBe(3);
      for (const t of tenants) expect(await getPlacement(fleet.directory, t)).toMatchObject({ state: 'active', epoch: 2 });
      expect(await getShard(fleet.directory, 'shard-c')).toMatchObject({ status: 'closed', units: 0 });

      const runs = await runsOf(fleet.t.client, id, h.firstExecutionRunId);
      expect(runs.length).toBe(st.continuedAsNew + 1);
      const ends = runs.map((r) => r.history.events!.at(-1)!);
      expect(ends.slice(0, -1).every((e) => !!e.workflowExecutionContinuedAsNewEventAttributes)).toBe(true);
      expect(ends.at(-1)!.workflowExecutionCompletedEventAttributes).toBeTruthy();
      // Small histories: each run's is a few dozen events, whatever the number of moves.
      for (const r of runs) expect(r.history.events!.length).toBeLessThan(80);
      // Continued runs never have a child running: each starts at most as many as it saw finish.
      for (const r of runs) {
        const started = r.history.events!.filter((e) => e.startChildWorkflowExecutionInitiatedEventAttributes).length;
        const ended = r.history.events!.filter((e) => e.childWorkflowExecutionCompletedEventAttributes || e.childWorkflowExecutionFailedEventAttributes).length;
        expect(ended).toBe(started);
      }

      const errors: string[] = [];
      let replayed = 0;
      for await (const r of Worker.runReplayHistories(
        { workflowsPath: path.join(__dirname, '..', '..', 'workflows', 'index.ts'), replayName: 'rebalance-can' },
        runs.map((x) => ({ history: x.history, workflowId: id })),
      )) {
        replayed++;
        if (r.error) errors.push(`${r.workflowId}: ${r.error.message}`);
      }
      expect(errors).toEqual([]);
      expect(replayed).toBe(runs.length);
    },
  );
});
