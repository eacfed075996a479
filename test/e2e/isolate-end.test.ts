// A `tenant isolate` that does not finish leaves no shard silently dedicated, on the real stack:
// cancelled (or failed) before its tenant got to the shard, or before anything was moved off its
// home, the dedication the run made is undone (audited, by the operator who cancelled); when the
// isolation half took hold (a unit already moved off, another still there), the dedication stays
// and `rebalance status` says exactly what is where and prints the command that undoes it, which
// works. Isolation: a fleet of its own (test/helpers/fleet.ts).
import { describe, it, expect, beforeEach, afterEach, afterAll } from 'vitest';
import { ownFleet, strayRow, waitForRebalance, type Fleet } from '../helpers/fleet';
import { closePools } from '../helpers/stack';
import { runCli } from '../helpers/cli';
import * as H from '../helpers/move';
import { getShard } from '../../lib/directory/shards';
import { getPlacement } from '../../lib/directory/placements';
import { readAudit } from '../../lib/directory/audit';
import { moveWorkflowId } from '../../lib/ids';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import type { PlanScope } from '../../lib/rebalance/plan';
import * as R from '../../workflows/rebalance-messages';
import * as M from '../../workflows/messages';

let fleet: Fleet;

beforeEach(async () => {
  fleet = await ownFleet('isocancel');
});
afterEach(async () => {
  await fleet?.close();
});
afterAll(async () => {
  await closePools();
});

const cli = (args: string[]) => runCli(['--config', fleet.configFile, ...args], { env: { SHARDCTL_ACTOR: 'cli-test' } });
const movePhase = (unit: string) =>
  fleet.t.client.workflow
    .getHandle(moveWorkflowId(unit))
    .query(M.statusQuery)
    .then((s) => s.phase as string)
    .catch(() => '');
async function untilPhase(unit: string, phase: string, timeoutMs = 120_000) {
  const deadline = Date.now() + timeoutMs;
  while ((await movePhase(unit)) !== phase && Date.now() < deadline) await new Promise((r) => setTimeout(r, 300));
  expect(await movePhase(unit), unit).toBe(phase);
}
/** Starts the isolate with every move's copy at 20 rows a second (a 600-row tenant copies for half a minute). */
async function startIsolate(scope: PlanScope) {
  const base = rebalanceInputFor(fleet.config, { scope, requestedBy: 'starter', maxConcurrent: 2, perShardLimit: 1, soakSeconds: 1 });
  const input = { ...base, move: { ...base.move, rowsPerSecond: 20, copyBatchRows: 20 } };
  return startRebalance(fleet.t.client, fleet.tq, input, fleet.config.temporal.rebalanceWorkflowId);
}
const dedicationAudit = async () =>
  (await readAudit(fleet.directory, { sinceMs: 3_600_000, limit: 1000 })).entries.filter((e) => e.action === 'shard.dedicate');

describe('a cancelled tenant isolate', () => {
  it('whose tenant never got to its shard undoes the dedication it made, audited under the canceller', { timeout: 300_000 }, async () => {
    const tenant = await fleet.tenant('shard-a', { rows: 600, load: 5, prefix: 'iso' });
    const h = await startIsolate({ kind: 'isolate', tenant, to: 'shard-c' });
    await waitForRebalance(h, (s) => s.moves.some((m) => m.state === 'running'));
    await untilPhase(tenant, 'copy');
    // Dedicated by the run before its move started.
    expect((await getShard(fleet.directory, 'shard-c'))!.dedicatedTo).toBe(tenant);

    const cancel = await cli(['rebalance', 'cancel', '--actor', 'canceller']);
    expect(cancel.code, cancel.stderr).toBe(0);
    const st: R.RebalanceStatus = await h.result();
    expect(st.phase).toBe('cancelled');
    expect(st.moves.map((m) => [m.unit, m.to, m.state])).toEqual([[tenant, 'shard-c', 'cancelled']]);
    expect(st.isolate).toEqual({ shard: 'shard-c', tenant, undone: true, why: `${tenant} never got to shard-c (it is on shard-a)` });

    // From the directory: shard-c shared again, the tenant where it was, the undo audited.
    expect(await getShard(fleet.directory, 'shard-c')).toMatchObject({ dedicatedTo: null, status: 'open', units: 0 });
    expect(await getPlacement(fleet.directory, tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active', moveId: null });
    expect(await H.rowCount('shard-c', tenant)).toBe(0);
    const audit = await dedicationAudit();
    expect(audit.map((e) => [e.actor, e.reason, e.detail.shard, e.detail.dedicatedTo])).toEqual([
      ['starter', 'tenant isolate', 'shard-c', tenant],
      ['canceller', 'tenant isolate cancelled', 'shard-c', null],
    ]);
    expect(audit[1].detail).toMatchObject({ from: tenant, why: st.isolate!.why });

    const status = await cli(['rebalance', 'status']);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain(`  shard-c: dedication to ${tenant} undone: ${tenant} never got to shard-c (it is on shard-a)`);
  });

  it(
    'at home, cancelled before anything was moved off, undoes the dedication: the shard is shared again with the tenant and the others on it',
    { timeout: 300_000 },
    async () => {
      // No empty shard: the tenant is isolated where it is, by moving the two others off shard-b.
      await fleet.tenant('shard-a', { load: 1, prefix: 'fill' });
      await fleet.tenant('shard-c', { load: 1, prefix: 'fill' });
      const tenant = await fleet.tenant('shard-b', { rows: 5, load: 10, prefix: 'iso' });
      const first = await fleet.tenant('shard-b', { rows: 600, load: 3, prefix: 'ofirst' });
      const second = await fleet.tenant('shard-b', { rows: 5, load: 2, prefix: 'osecond' });
      const h = await startIsolate({ kind: 'isolate', tenant });
      await untilPhase(first, 'copy');
      expect((await getShard(fleet.directory, 'shard-b'))!.dedicatedTo).toBe(tenant);

      await h.executeUpdate(R.rebalanceCancelUpdate, { args: [{ actor: 'canceller' }] });
      const st: R.RebalanceStatus = await h.result();
      expect(st.phase).toBe('cancelled');
      expect(Object.fromEntries(st.moves.map((m) => [m.unit, m.state]))).toEqual({ [first]: 'cancelled', [second]: 'dropped' });
      expect(st.isolate).toEqual({ shard: 'shard-b', tenant, undone: true, why: 'nothing was moved off shard-b yet (2 other unit(s) still there)' });
      expect((await getShard(fleet.directory, 'shard-b'))!.dedicatedTo).toBeNull();
      for (const u of [tenant, first, second]) expect(await getPlacement(fleet.directory, u), u).toMatchObject({ shard: 'shard-b', epoch: 1, state: 'active' });
      expect((await dedicationAudit()).map((e) => [e.actor, e.detail.dedicatedTo])).toEqual([
        ['starter', tenant],
        ['canceller', null],
      ]);
    },
  );

  it(
    'half isolated (one unit moved off its shard, one still there) stays dedicated, says what is where and prints the undo command, which works',
    { timeout: 400_000 },
    async () => {
      // No empty shard: the tenant is isolated where it is, by moving the two others off shard-b.
      await fleet.tenant('shard-a', { load: 1, prefix: 'fill' });
      await fleet.tenant('shard-c', { load: 1, prefix: 'fill' });
      const tenant = await fleet.tenant('shard-b', { rows: 5, load: 10, prefix: 'iso' });
      const fast = await fleet.tenant('shard-b', { rows: 5, load: 3, prefix: 'ofast' });
      const slow = await fleet.tenant('shard-b', { rows: 600, load: 2, prefix: 'oslow' });
      const h = await startIsolate({ kind: 'isolate', tenant });
      // One move out of shard-b at a time: the fast one first (largest load), then the slow one.
      await waitForRebalance(h, (s) => s.moves.find((m) => m.unit === fast)?.state === 'done', 200_000);
      await untilPhase(slow, 'copy');
      expect((await getShard(fleet.directory, 'shard-b'))!.dedicatedTo).toBe(tenant);

      await h.executeUpdate(R.rebalanceCancelUpdate, { args: [{ actor: 'canceller' }] });
      const st: R.RebalanceStatus = await h.result();
      expect(st.phase).toBe('cancelled');
      expect(Object.fromEntries(st.moves.map((m) => [m.unit, m.state]))).toEqual({ [fast]: 'done', [slow]: 'cancelled' });
      expect(st.isolate).toEqual({
        shard: 'shard-b',
        tenant,
        undone: false,
        state: [
          `shard-b stays dedicated to ${tenant}, half isolated: moved off ${fast}; still there ${slow}`,
          `the next \`shardctl rebalance start\` moves the rest off (nothing but ${tenant} may stay on a shard dedicated to it)`,
        ],
        undoCommand: 'shardctl shards undedicate shard-b',
      });
      // From the directory: as the status says.
      expect((await getShard(fleet.directory, 'shard-b'))!.dedicatedTo).toBe(tenant);
      expect((await getPlacement(fleet.directory, fast))!.shard).not.toBe('shard-b');
      expect(await getPlacement(fleet.directory, slow)).toMatchObject({ shard: 'shard-b', epoch: 1, state: 'active' });
      expect((await dedicationAudit()).map((e) => e.detail.dedicatedTo)).toEqual([tenant]);

      const status = await cli(['rebalance', 'status']);
      expect(status.code, status.stderr).toBe(0);
      expect(status.stdout).toContain(`  shard-b stays dedicated to ${tenant}, half isolated: moved off ${fast}; still there ${slow}\n`);
      expect(status.stdout).toContain('  to make shard-b shared again: shardctl shards undedicate shard-b\n');

      // The printed command, as printed.
      const undo = await cli(['shards', 'undedicate', 'shard-b', '--reason', 'isolate abandoned', '--json']);
      expect(undo.code, undo.stderr).toBe(0);
      expect(JSON.parse(undo.stdout)).toEqual({ name: 'shard-b', from: tenant, dedicatedTo: null, class: 'shared' });
      expect((await getShard(fleet.directory, 'shard-b'))!.dedicatedTo).toBeNull();
      const audit = await dedicationAudit();
      expect(audit.map((e) => [e.actor, e.reason, e.detail.dedicatedTo])).toEqual([
        ['starter', 'tenant isolate', tenant],
        ['cli-test', 'isolate abandoned', null],
      ]);
      // Nothing left to undo: refused, exit 4.
      const again = await cli(['shards', 'undedicate', 'shard-b']);
      expect(again.code).toBe(4);
      expect(again.stderr).toContain('shard-b is not dedicated to a tenant: nothing to undo');
    },
  );
});

describe('a failed tenant isolate', () => {
  it('whose tenant failed at its own plan undoes the dedication it made, audited under the starter', { timeout: 300_000 }, async () => {
    const tenant = await fleet.tenant('shard-a', { rows: 20, load: 5, prefix: 'isof' });
    // The planner does not see it; the move's own preflight refuses a target that already holds the tenant's rows.
    await strayRow('shard-c', tenant);
    const h = await startIsolate({ kind: 'isolate', tenant, to: 'shard-c' });
    const st: R.RebalanceStatus = await h.result();
    expect(st.phase).toBe('failed');
    expect(st.moves.map((m) => [m.unit, m.state])).toEqual([[tenant, 'failed']]);
    expect(st.moves[0].result).toMatch(/already holds 1 rows of/);
    expect(st.isolate).toEqual({ shard: 'shard-c', tenant, undone: true, why: `${tenant} never got to shard-c (it is on shard-a)` });
    expect(await getShard(fleet.directory, 'shard-c')).toMatchObject({ dedicatedTo: null, status: 'open', units: 0 });
    expect(await getPlacement(fleet.directory, tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active' });
    expect((await dedicationAudit()).map((e) => [e.actor, e.reason, e.detail.dedicatedTo])).toEqual([
      ['starter', 'tenant isolate', tenant],
      ['starter', 'tenant isolate failed', null],
    ]);
  });
});
