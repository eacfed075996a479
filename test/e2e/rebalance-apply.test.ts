// `rebalance apply --plan FILE` and failure isolation, on the real stack (a fleet of each test's
// own: test/helpers/fleet.ts). A plan saved by `rebalance plan --json` that the directory no longer
// allows is refused (exit 4), naming each bad move, and starts nothing; once it holds again it runs
// exactly its moves: the one made to fail (its target already holds a stray row of its tenant, a
// per-unit precondition the planner does not see) is reported and never replaced, the others
// complete, and no move outside the file starts. A failed move blocks only itself: in a drain
// (planned by the run itself) the moves after it start while the move beside it is still copying,
// and a move that waits for its approval holds only its own slot while the others start and end.
import { describe, it, expect, beforeEach, afterEach, afterAll } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ownFleet, moveExists, strayRow, waitForRebalance, type Fleet } from '../helpers/fleet';
import { closePools } from '../helpers/stack';
import { configFile, jsonError, runCli } from '../helpers/cli';
import { getPlacement } from '../../lib/directory/placements';
import { moveWorkflowId } from '../../lib/ids';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import { rebalanceStatusQuery, type RebalanceStatus } from '../../workflows/rebalance-messages';
import * as M from '../../workflows/messages';
import * as H from '../helpers/move';

let fleet: Fleet;

beforeEach(async () => {
  fleet = await ownFleet('rbapply');
});
afterEach(async () => {
  await fleet?.close();
});
afterAll(async () => {
  await closePools();
});

/** When the move workflow of `unit` started and ended (Temporal's own record of it). */
async function spanOf(unit: string): Promise<{ start: number; end: number }> {
  const d = await fleet.t.client.workflow.getHandle(moveWorkflowId(unit)).describe();
  return { start: d.startTime.getTime(), end: d.closeTime?.getTime() ?? Infinity };
}

describe('rebalance apply --plan', () => {
  it(
    'refuses a plan gone stale (exit 4, each bad move named, nothing started); once it holds, runs exactly its moves: the failing one is reported, the others complete, nothing is re-planned',
    { timeout: 400_000 },
    async () => {
      const tenants: string[] = [];
      for (let i = 0; i < 6; i++) tenants.push(await fleet.tenant('shard-a', { rows: 5, load: 100, prefix: `ap${i}` }));
      // The CLI's runs go to this fleet's worker.
      const cfg = configFile({ ...fleet.config, temporal: { ...fleet.config.temporal, taskQueue: fleet.tq } });
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rbapply-'));
      const planFile = path.join(dir, 'plan.json');
      const cli = (args: string[]) => runCli(['--config', cfg.file, ...args], { env: { SHARDCTL_ACTOR: 'cli-test' }, timeoutMs: 300_000 });
      try {
        const planned = await cli(['rebalance', 'plan', '--json']);
        expect(planned.code, planned.stderr).toBe(0);
        fs.writeFileSync(planFile, planned.stdout);
        const moves = JSON.parse(planned.stdout).moves as { unit: string; from: string; to: string }[];
        expect(moves.length).toBeGreaterThanOrEqual(3);
        const intoB = moves.filter((m) => m.to === 'shard-b');
        expect(intoB.length, 'the plan puts something on shard-b').toBeGreaterThan(0);

        // Stale: shard-b is draining now. Refused before anything starts, each move into it named.
        expect((await cli(['shards', 'set-status', 'shard-b', 'draining'])).code).toBe(0);
        const stale = await cli(['rebalance', 'apply', '--plan', planFile, '--concurrency', '2', '--json']);
        expect(stale.code, stale.stderr).toBe(4);
        const err = jsonError(stale);
        expect(err.code).toBe('PreconditionFailed');
        expect(err.message).toContain(`refused, nothing started: ${intoB.length} problem(s) with ${planFile}`);
        for (const m of intoB) expect(err.message).toContain(`move ${m.unit} shard-a -> shard-b: target shard-b is draining, not open`);
        for (const m of moves.filter((x) => x.to !== 'shard-b')) expect(err.message).not.toContain(`move ${m.unit} `);
        const run = await fleet.t.client.workflow
          .getHandle(fleet.config.temporal.rebalanceWorkflowId)
          .describe()
          .then(
            () => 'exists',
            () => 'none',
          );
        expect(run, 'no rebalance run was started').toBe('none');
        for (const t of tenants) expect(await moveExists(fleet.t.client, t), `${t} has a move`).toBe(false);
        for (const t of tenants) expect(await getPlacement(fleet.directory, t)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active' });

        // The plan holds again. Its first move cannot pass its own preflight on its target.
        expect((await cli(['shards', 'set-status', 'shard-b', 'open'])).code).toBe(0);
        const victim = moves[0];
        await strayRow(victim.to, victim.unit);
        const applied = await cli([
          'rebalance',
          'apply',
          '--plan',
          planFile,
          '--concurrency',
          '2',
          '--per-shard',
          '2',
          '--soak',
          '1s',
          '--yes',
          '--wait',
          '--json',
        ]);
        expect(applied.code, applied.stderr).toBe(7);
        const st = JSON.parse(applied.stdout).status as RebalanceStatus;
        expect(st).toMatchObject({ phase: 'failed', plans: 1, fromPlanFile: true, problems: [], maxConcurrent: 2 });
        expect(st.moves.map((m) => [m.unit, m.from, m.to])).toEqual(moves.map((m) => [m.unit, m.from, m.to]));
        expect(st.moves.map((m) => m.state)).toEqual(moves.map((m) => (m.unit === victim.unit ? 'failed' : 'done')));
        expect(st.moves[0].result).toMatch(/already holds 1 rows of/);
        expect(st.lastError).toContain(victim.unit);

        // Exactly the file's moves: the victim stays, the others are on their planned shard, and no
        // tenant outside the file got a move (a re-plan would have given the victim's load to one).
        for (const t of tenants) {
          const m = moves.find((x) => x.unit === t);
          expect(await moveExists(fleet.t.client, t), t).toBe(!!m);
          expect(await getPlacement(fleet.directory, t), t).toMatchObject(
            m && m !== victim ? { shard: m.to, epoch: 2, state: 'active' } : { shard: 'shard-a', epoch: 1, state: 'active' },
          );
        }
        const status = await cli(['rebalance', 'status']);
        expect(status.code, status.stderr).toBe(0);
        expect(status.stdout).toMatch(
          new RegExp(`^rebalance \\(apply a plan file\\): failed — ${moves.length - 1} done, 0 running, 0 pending, 1 failed; plans 1`),
        );
        expect(status.stdout).toContain(`  failed: ${victim.unit} (each blocked only itself; a plan file is never re-planned: plan again for these)`);
      } finally {
        cfg.remove();
        fs.rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});

describe('a given plan checked again by the run', () => {
  it(
    'a run started with a plan the directory no longer allows (not through the CLI) starts nothing and ends failed naming the bad move',
    { timeout: 120_000 },
    async () => {
      const stale = await fleet.tenant('shard-a', { rows: 5, prefix: 'gstale' });
      const fine = await fleet.tenant('shard-a', { rows: 5, prefix: 'gfine' });
      const base = rebalanceInputFor(fleet.config, { scope: { kind: 'rebalance' }, requestedBy: 'test', soakSeconds: 1 });
      const planned = [
        { unit: fine, from: 'shard-a', to: 'shard-b' },
        { unit: stale, from: 'shard-c', to: 'shard-b' },
      ];
      const h = await startRebalance(fleet.t.client, fleet.tq, { ...base, planned: { moves: planned } }, fleet.config.temporal.rebalanceWorkflowId);
      const st: RebalanceStatus = await h.result();
      expect(st.phase).toBe('failed');
      expect(st.problems).toEqual([
        'the plan no longer holds, nothing started: 1 problem(s)',
        `move ${stale} shard-c -> shard-b: ${stale} is on shard-a now, not shard-c: the plan is stale, plan again`,
      ]);
      expect(st.moves.map((m) => [m.unit, m.state])).toEqual([
        [fine, 'dropped'],
        [stale, 'dropped'],
      ]);
      for (const t of [stale, fine]) {
        expect(await moveExists(fleet.t.client, t), `${t} has a move`).toBe(false);
        expect(await getPlacement(fleet.directory, t)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active' });
      }
    },
  );
});

describe('a failed move blocks only itself', () => {
  it(
    'in a drain with 2 at once, the moves after a failed one start while the move beside it still copies; the failure is reported and the rest completes',
    { timeout: 400_000 },
    async () => {
      // Drain order is largest load first: the victim and the slow one start together.
      const victim = await fleet.tenant('shard-c', { rows: 5, load: 4, prefix: 'fvic' });
      const slow = await fleet.tenant('shard-c', { rows: 1200, load: 3, prefix: 'fslow' });
      const next1 = await fleet.tenant('shard-c', { rows: 5, load: 2, prefix: 'fnext' });
      const next2 = await fleet.tenant('shard-c', { rows: 5, load: 1, prefix: 'fnext' });
      // Wherever the victim is sent, its move's own preflight refuses it.
      await strayRow('shard-a', victim);
      await strayRow('shard-b', victim);
      const base = rebalanceInputFor(fleet.config, {
        scope: { kind: 'drain', shard: 'shard-c' },
        requestedBy: 'test',
        maxConcurrent: 2,
        perShardLimit: 2,
        soakSeconds: 1,
      });
      // 20 rows a second: the slow tenant copies for a minute, the others in a moment.
      const input = { ...base, move: { ...base.move, rowsPerSecond: 20, copyBatchRows: 20 } };
      const h = await startRebalance(fleet.t.client, fleet.tq, input, fleet.config.temporal.rebalanceWorkflowId);
      const st: RebalanceStatus = await h.result();

      // From Temporal: the victim failed while the slow move ran, and both later moves started
      // before the slow one ended (a failure that held back new starts would have them start after).
      const [v, s, n1, n2] = await Promise.all([victim, slow, next1, next2].map(spanOf));
      expect(v.end, 'the victim ended while the slow move ran').toBeLessThan(s.end);
      expect(n1.start, `${next1} started before ${slow} ended`).toBeLessThan(s.end);
      expect(n2.start, `${next2} started before ${slow} ended`).toBeLessThan(s.end);
      expect(n1.start).toBeGreaterThanOrEqual(v.end);

      const state = Object.fromEntries(st.moves.map((m) => [m.unit, m.state]));
      expect(state).toEqual({ [victim]: 'failed', [slow]: 'done', [next1]: 'done', [next2]: 'done' });
      expect(st.moves.find((m) => m.unit === victim)!.result).toMatch(/already holds 1 rows of/);
      // Each started from the first plan: none was dropped and planned again.
      expect(st.moves.map((m) => [m.unit, m.plan])).toEqual([victim, slow, next1, next2].map((u) => [u, 1]));

      // Then, nothing left to start, the run planned again (the victim excluded): nothing more to
      // move, and shard-c stays draining with the victim on it.
      expect(st.plans).toBe(2);
      expect(st.phase).toBe('failed');
      expect(st.drain?.closed).toBe(false);
      expect(await getPlacement(fleet.directory, victim)).toMatchObject({ shard: 'shard-c', epoch: 1, state: 'active' });
      for (const t of [slow, next1, next2]) expect((await getPlacement(fleet.directory, t))!.shard, t).not.toBe('shard-c');
    },
  );

  it('a move that blocks (waiting for its approval) holds only its own slot: the next move starts and completes beside it', { timeout: 400_000 }, async () => {
    // Drain order is largest load first: the blocked one and the first other start together.
    const blocked = await fleet.tenant('shard-c', { rows: 5, load: 3, prefix: 'bwait' });
    const other1 = await fleet.tenant('shard-c', { rows: 5, load: 2, prefix: 'bother' });
    const other2 = await fleet.tenant('shard-c', { rows: 5, load: 1, prefix: 'bother' });
    const input = rebalanceInputFor(fleet.config, {
      scope: { kind: 'drain', shard: 'shard-c' },
      requestedBy: 'test',
      maxConcurrent: 2,
      perShardLimit: 2,
      soakSeconds: 1,
      approveCutover: 'manual',
    });
    const h = await startRebalance(fleet.t.client, fleet.tq, input, fleet.config.temporal.rebalanceWorkflowId);
    const approve = async (unit: string) => {
      const mh = fleet.t.client.workflow.getHandle(moveWorkflowId(unit));
      await H.waitFor(mh, (s) => !!s.awaitingApproval, 180_000);
      await mh.executeUpdate(M.approveUpdate, { args: [{ actor: 'approver' }] });
    };
    await waitForRebalance(h, (s) => s.moves.filter((m) => m.state === 'running').length === 2);
    // The others are approved as they come; the blocked one is not.
    await approve(other1);
    await approve(other2);
    const both = await waitForRebalance(h, (s) => s.moves.filter((m) => m.state === 'done').length === 2, 240_000);
    expect(Object.fromEntries(both.moves.map((m) => [m.unit, m.state]))).toEqual({ [blocked]: 'running', [other1]: 'done', [other2]: 'done' });
    // It reaches its approval in its own time (it may still be validating when the others end):
    // waiting there, it holds only its slot.
    const waiting = await H.waitFor(fleet.t.client.workflow.getHandle(moveWorkflowId(blocked)), (s) => !!s.awaitingApproval, 180_000);
    expect(waiting.awaitingApproval, 'the blocked move still waits').toBe(true);
    expect((await h.query(rebalanceStatusQuery)).moves.find((m) => m.unit === blocked)?.state).toBe('running');
    const [b, n2] = await Promise.all([blocked, other2].map(spanOf));
    expect(n2.start).toBeGreaterThan(b.start);

    await approve(blocked);
    const st: RebalanceStatus = await h.result();
    expect(st.phase).toBe('done');
    expect(st.drain).toEqual({ shard: 'shard-c', closed: true, reasons: [] });
  });
});
