// `rebalance start --max-moves K` bounds the whole run, re-plans included (issue 13), on the real
// stack: a fleet of the test's own wants more than K moves; the first move the run starts fails
// at its own plan (the target already holds a stray row of its tenant: a per-unit precondition
// the rebalance planner does not see). The failure blocks only itself: the plan's other moves
// start and complete; then the run would plan again for what the failure left, but the budget is
// spent, so it plans nothing and says so. Counted from Temporal (the child starts in the run's
// history, and which move workflows exist) and from the directory, never from the run's own
// status: the run started exactly K moves in all, and nothing past it.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, moveExists, runsOf, strayRow, type Fleet } from '../helpers/fleet';
import { closePools } from '../helpers/stack';
import { getPlacement } from '../../lib/directory/placements';
import { planFromDirectory } from '../../lib/rebalance/fleet';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import type { RebalanceStatus } from '../../workflows/rebalance-messages';

const K = 3;
let fleet: Fleet;

beforeAll(async () => {
  fleet = await ownFleet('rbudget');
}, 60_000);
afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('rebalance --max-moves across re-plans', () => {
  it(`a run whose first move fails re-plans within what is left of its budget: ${K} moves started in all, the re-plan none`, { timeout: 400_000 }, async () => {
    const tenants: string[] = [];
    for (let i = 0; i < 6; i++) tenants.push(await fleet.tenant('shard-a', { rows: 5, load: 100, prefix: `bud${i}` }));
    // Unbounded, balancing six equal tenants over three shards takes four moves: more than K.
    const unbounded = await planFromDirectory(fleet.directory, fleet.config, { kind: 'rebalance' });
    expect(unbounded.moves).toHaveLength(4);
    const first = (await planFromDirectory(fleet.directory, fleet.config, { kind: 'rebalance' }, { maxMoves: K })).moves;
    expect(first).toHaveLength(K);
    // The first move of the plan cannot pass its own preflight, whichever shard it targets.
    const victim = first[0].unit;
    await strayRow('shard-b', victim);
    await strayRow('shard-c', victim);

    const input = rebalanceInputFor(fleet.config, {
      scope: { kind: 'rebalance' },
      requestedBy: 'test',
      maxConcurrent: 1,
      maxMoves: K,
      soakSeconds: 1,
      units: tenants,
    });
    const h = await startRebalance(fleet.t.client, fleet.tq, input, fleet.config.temporal.rebalanceWorkflowId);
    const st: RebalanceStatus = await h.result();

    // From Temporal: the child moves the run's history started (every run of it), and the move
    // workflows that exist for the fleet's tenants.
    const runs = await runsOf(fleet.t.client, h.workflowId, h.firstExecutionRunId);
    const started = runs.flatMap((r) =>
      (r.history.events ?? []).flatMap((e) => {
        const a = e.startChildWorkflowExecutionInitiatedEventAttributes;
        return a?.workflowId ? [a.workflowId] : [];
      }),
    );
    const withMove: string[] = [];
    for (const t of tenants) if (await moveExists(fleet.t.client, t)) withMove.push(t);
    expect(started, 'child moves started by the run').toHaveLength(K);
    expect(new Set(started).size).toBe(K);
    expect(withMove.sort(), 'tenants with a move workflow').toHaveLength(K);
    expect(withMove).toContain(victim);

    // The victim failed at its plan and stays where it was; the others started moved, the rest did not.
    const victimMove = await fleet.t.client.workflow.getHandle(started[0]).result();
    expect(victimMove.phase).toBe('failed');
    expect(victimMove.lastError).toMatch(/already holds 1 rows of .* in public\.events/);
    expect(await getPlacement(fleet.directory, victim)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active' });
    const placements = await Promise.all(tenants.map(async (t) => [t, await getPlacement(fleet.directory, t)] as const));
    const movedOff = placements.filter(([, p]) => p!.shard !== 'shard-a').map(([t]) => t);
    expect(movedOff.sort()).toEqual(withMove.filter((t) => t !== victim).sort());
    for (const [t, p] of placements) expect(p, t).toMatchObject({ state: 'active', epoch: movedOff.includes(t) ? 2 : 1 });

    // The first plan's other moves (K - 1) went on after the failure and completed; what was left
    // of the budget for a re-plan was nothing, so no plan was asked for again.
    const plansStarted = runs.flatMap((r) =>
      (r.history.events ?? []).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'planRebalance'),
    );
    expect(plansStarted).toHaveLength(1);
    expect(st.phase).toBe('failed');
    expect(st.moves.filter((m) => m.plan === 1 && m.state === 'done')).toHaveLength(K - 1);
    expect(st.problems).toContain(`stopped at the run's limit of ${K} move(s) (--max-moves): plan again for the rest`);
  });
});
