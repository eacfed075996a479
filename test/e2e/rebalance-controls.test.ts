// Pause, resume and cancel of a whole rebalance run on the real stack. Pause: no new move starts,
// the running ones go on to their end; resume: the rest start. Cancel: moves not started never
// start (dropped), a running move before its switch is cancelled and undone (the source stays the
// owner, nothing left on the target), one past its switch finishes (DESIGN.md §4.6), and the
// summary says which is which. Isolation: a fleet of its own (test/helpers/fleet.ts).
import { describe, it, expect, beforeEach, afterEach, afterAll } from 'vitest';
import { ownFleet, waitForRebalance, moveExists, type Fleet } from '../helpers/fleet';
import { closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { getShard } from '../../lib/directory/shards';
import { getPlacement } from '../../lib/directory/placements';
import { moveWorkflowId } from '../../lib/ids';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import * as R from '../../workflows/rebalance-messages';
import * as M from '../../workflows/messages';

// One fleet per test: each drains a shard holding only its own three tenants.
let fleet: Fleet;

beforeEach(async () => {
  fleet = await ownFleet('rbctl');
});
afterEach(async () => {
  await fleet?.close();
});
afterAll(async () => {
  await closePools();
});

const byState = (st: R.RebalanceStatus) => Object.fromEntries(st.moves.map((m) => [m.unit, m.state]));
const movePhase = (unit: string) =>
  fleet.t.client.workflow
    .getHandle(moveWorkflowId(unit))
    .query(M.statusQuery)
    .then((s) => s.phase as string);

describe('rebalance pause, resume, cancel', () => {
  it('pause: the two running moves go on to done while the third never starts; resume: it starts and the drain ends closed', { timeout: 400_000 }, async () => {
    // Drain order is largest load first: big, mid, then small.
    const big = await fleet.tenant('shard-c', { rows: 20, load: 3, prefix: 'pbig' });
    const mid = await fleet.tenant('shard-c', { rows: 20, load: 2, prefix: 'pmid' });
    const small = await fleet.tenant('shard-c', { rows: 20, load: 1, prefix: 'psmall' });
    const input = rebalanceInputFor(fleet.config, {
      scope: { kind: 'drain', shard: 'shard-c' },
      requestedBy: 'test',
      maxConcurrent: 2,
      perShardLimit: 2,
      soakSeconds: 4,
    });
    const id = fleet.config.temporal.rebalanceWorkflowId;
    const h = await startRebalance(fleet.t.client, fleet.tq, input, id);
    const two = await waitForRebalance(h, (s) => s.moves.filter((m) => m.state === 'running').length === 2);
    expect(byState(two)).toEqual({ [big]: 'running', [mid]: 'running', [small]: 'pending' });

    expect(await h.executeUpdate(R.rebalancePauseUpdate, { args: [{ actor: 'pauser' }] })).toBe('paused: no new move starts; 2 running move(s) go on');
    // The running moves are not held by the pause: both finish (soak and retire included).
    const bothDone = await waitForRebalance(h, (s) => s.moves.filter((m) => m.state === 'done').length === 2, 240_000);
    expect(bothDone).toMatchObject({ paused: true, phase: 'running', operators: { pausedBy: 'pauser' } });
    expect(byState(bothDone)).toEqual({ [big]: 'done', [mid]: 'done', [small]: 'pending' });
    await new Promise((r) => setTimeout(r, 3000));
    expect(await moveExists(fleet.t.client, small), 'the third move started while paused').toBe(false);
    expect(byState(await h.query(R.rebalanceStatusQuery))[small]).toBe('pending');
    expect(await getPlacement(fleet.directory, small)).toMatchObject({ shard: 'shard-c', epoch: 1, state: 'active' });

    expect(await h.executeUpdate(R.rebalanceResumeUpdate, { args: [{ actor: 'resumer' }] })).toBe('resumed');
    const st: R.RebalanceStatus = await h.result();
    expect(st.problems).toEqual([]);
    expect(st.phase).toBe('done');
    expect(byState(st)).toEqual({ [big]: 'done', [mid]: 'done', [small]: 'done' });
    expect(st.paused).toBe(false);
    expect(st.operators.pausedBy).toBeUndefined();
    expect(st.drain).toEqual({ shard: 'shard-c', closed: true, reasons: [] });
  });

  it(
    'cancel: the move past its switch finishes, the move still copying is cancelled and undone, the move not started never starts; the summary says so and shard-b stays draining',
    { timeout: 400_000 },
    async () => {
      const fast = await fleet.tenant('shard-b', { rows: 5, load: 3, prefix: 'cfast' });
      const slow = await fleet.tenant('shard-b', { rows: 600, load: 2, prefix: 'cslow' });
      const never = await fleet.tenant('shard-b', { rows: 5, load: 1, prefix: 'cnever' });
      const base = rebalanceInputFor(fleet.config, {
        scope: { kind: 'drain', shard: 'shard-b' },
        requestedBy: 'test',
        maxConcurrent: 2,
        perShardLimit: 2,
        soakSeconds: 30,
      });
      // 20 rows a second: the slow tenant's copy takes half a minute, the fast one's a moment.
      const input = { ...base, move: { ...base.move, rowsPerSecond: 20, copyBatchRows: 20 } };
      const id = fleet.config.temporal.rebalanceWorkflowId;
      const h = await startRebalance(fleet.t.client, fleet.tq, input, id);
      const two = await waitForRebalance(h, (s) => s.moves.filter((m) => m.state === 'running').length === 2);
      expect(byState(two)).toEqual({ [fast]: 'running', [slow]: 'running', [never]: 'pending' });
      const deadline = Date.now() + 120_000;
      while ((await movePhase(fast).catch(() => '')) !== 'soak' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 300));
      expect(await movePhase(fast)).toBe('soak');
      expect(await movePhase(slow)).toBe('copy');

      expect(await h.executeUpdate(R.rebalanceCancelUpdate, { args: [{ actor: 'canceller' }] })).toBe(
        'cancelling: 1 pending move(s) dropped, 2 running move(s) asked to cancel',
      );
      const st: R.RebalanceStatus = await h.result();
      expect(st.phase).toBe('cancelled');
      expect(byState(st)).toEqual({ [fast]: 'done', [slow]: 'cancelled', [never]: 'dropped' });
      expect(st.moves.find((m) => m.unit === slow)!.result).toMatch(/^cancelled/);
      expect(st.operators.cancelledBy).toBe('canceller');
      expect(st.drain).toEqual({
        shard: 'shard-b',
        closed: false,
        reasons: ['the drain was cancelled', 'shard-b stays draining, so nothing new is placed there: `shardctl shards set-status shard-b open` reopens it'],
      });

      // Past its switch: moved and retired. Cancelled: undone, the source still the owner at its epoch.
      const fastAt = await getPlacement(fleet.directory, fast);
      expect(fastAt).toMatchObject({ state: 'active', epoch: 2 });
      expect(fastAt!.shard).not.toBe('shard-b');
      const slowMove = st.moves.find((m) => m.unit === slow)!;
      expect(await getPlacement(fleet.directory, slow)).toMatchObject({ shard: 'shard-b', epoch: 1, state: 'active', moveId: null });
      expect(await H.rowCount('shard-b', slow)).toBe(600);
      expect(await H.rowCount(slowMove.to, slow)).toBe(0);
      expect(await H.tryWrite('shard-b', slow, 1)).toBe('ok');
      expect(await H.replicationLeftovers(`${slow}.e1`)).toEqual([]);
      // Never started: no move workflow, still on shard-b.
      expect(await moveExists(fleet.t.client, never)).toBe(false);
      expect(await getPlacement(fleet.directory, never)).toMatchObject({ shard: 'shard-b', epoch: 1, state: 'active' });
      expect(await getShard(fleet.directory, 'shard-b')).toMatchObject({ status: 'draining', units: 2 });
    },
  );
});
