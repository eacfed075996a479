// `shards drain` to its end on the real stack: every unit moves off the shard and the shard ends
// closed, as the directory and `shards list` show. Isolation: the fleet's directory is a database
// of this test's own (test/helpers/fleet.ts), so shard-c is closed there only; the other suites'
// directory, where shard-c stays open, is never touched.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli } from '../helpers/cli';
import * as H from '../helpers/move';
import { closePools } from '../helpers/stack';
import { getShard } from '../../lib/directory/shards';
import { getPlacement } from '../../lib/directory/placements';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import type { RebalanceStatus } from '../../workflows/rebalance-messages';

let fleet: Fleet;

beforeAll(async () => {
  fleet = await ownFleet('drain');
});
afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('shards drain', () => {
  it('moves the one small tenant off shard-c and ends with shard-c closed; `shards list` shows it closed with no unit', { timeout: 300_000 }, async () => {
    const tenant = await fleet.tenant('shard-c', { rows: 40, blobs: 1 });
    const input = rebalanceInputFor(fleet.config, { scope: { kind: 'drain', shard: 'shard-c' }, requestedBy: 'test', soakSeconds: 1 });
    const h = await startRebalance(fleet.t.client, fleet.tq, input, fleet.config.temporal.rebalanceWorkflowId);
    const st: RebalanceStatus = await h.result();

    expect(st.problems).toEqual([]);
    expect(st.phase).toBe('done');
    expect(st.moves.map((m) => [m.unit, m.from, m.state])).toEqual([[tenant, 'shard-c', 'done']]);
    expect(st.drain).toEqual({ shard: 'shard-c', closed: true, reasons: [] });
    const p = await getPlacement(fleet.directory, tenant);
    expect(p).toMatchObject({ shard: st.moves[0].to, state: 'active', epoch: 2 });
    expect(await getShard(fleet.directory, 'shard-c')).toMatchObject({ status: 'closed', units: 0 });
    // The Web UI names the run and each move it started: tenant, source → target, who started it.
    expect(await (await h.describe()).staticSummary()).toBe('drain shard-c, started by test');
    const child = await fleet.t.client.workflow.getHandle(st.moves[0].workflowId).describe();
    expect(await child.staticSummary()).toBe(`move ${tenant}: shard-c → ${st.moves[0].to}, started by test`);
    expect(await child.staticDetails()).toContain(`**started by** test (via drain run ${fleet.config.temporal.rebalanceWorkflowId})`);
    expect(await H.rowCount('shard-c', tenant), 'retired on shard-c').toBe(0);
    expect(await H.rowCount(p!.shard, tenant)).toBeGreaterThan(0);

    const status = await runCli(['--config', fleet.configFile, 'rebalance', 'status']);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(/^rebalance \(drain shard-c\): done — 1 done/);
    expect(status.stdout).toContain('  shard-c: closed');

    const list = await runCli(['--config', fleet.configFile, 'shards', 'list', '--json']);
    expect(list.code, list.stderr).toBe(0);
    const rows = JSON.parse(list.stdout) as { name: string; status: string; units: number; reachable: boolean }[];
    expect(rows.map((r) => [r.name, r.status, r.reachable])).toEqual([
      ['shard-a', 'open', true],
      ['shard-b', 'open', true],
      ['shard-c', 'closed', true],
    ]);
    expect(rows.find((r) => r.name === 'shard-c')!.units).toBe(0);
    const text = await runCli(['--config', fleet.configFile, 'shards', 'list']);
    expect(text.stdout).toMatch(/^shard-c\s+closed\s+0 unit\(s\)\s+reachable/m);
  });
});
