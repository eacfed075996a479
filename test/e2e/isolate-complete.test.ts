// A `tenant isolate` that completes (issue 13), on the real stack and through the CLI: `tenant
// isolate --tenant T --to S --wait` moves T onto the empty shard S while T is being written
// through the router, leaves S dedicated to T (directory and `shards list`), every row of T and
// every acknowledged write on S (none on its old shard after the soak, no refused write anywhere),
// and a following `rebalance plan` of an unbalanced fleet never places another unit on S. A fleet
// of its own (test/helpers/fleet.ts), its CLI config naming the fleet's worker task queue.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomUUID } from 'node:crypto';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { closePools, shardPool } from '../helpers/stack';
import { runCli, configFile } from '../helpers/cli';
import * as H from '../helpers/move';
import { getShard } from '../../lib/directory/shards';
import { getPlacement } from '../../lib/directory/placements';
import { Router } from '../../lib/router';

let fleet: Fleet;
let file: { file: string; remove: () => void };

beforeAll(async () => {
  fleet = await ownFleet('isodone');
  file = configFile({ ...fleet.config, temporal: { ...fleet.config.temporal, taskQueue: fleet.tq } });
}, 120_000);
afterAll(async () => {
  file?.remove();
  await fleet?.close();
  await closePools();
});

const cli = (args: string[], timeoutMs = 60_000) => runCli(['--config', file.file, ...args], { env: { SHARDCTL_ACTOR: 'iso-test' }, timeoutMs });
const eventIds = async (shard: string, tenant: string) =>
  new Set((await shardPool(shard).query(`select id::text from public.events where tenant_id = $1`, [tenant])).rows.map((r) => r.id as string));

describe('a completed tenant isolate', () => {
  it(
    'moves its tenant onto the empty shard under writes, leaves the shard dedicated to it, and no later plan places another unit there',
    { timeout: 400_000 },
    async () => {
      const tenant = await fleet.tenant('shard-a', { rows: 300, load: 5, prefix: 'iso' });
      // An unbalanced rest: heavy tenants on shard-a, nothing on shard-b, so a plan wants moves.
      const heavy: string[] = [];
      for (let i = 0; i < 3; i++) heavy.push(await fleet.tenant('shard-a', { rows: 5, load: 20, prefix: 'heavy' }));
      const rowsBefore = await H.rowCount('shard-a', tenant);
      expect(rowsBefore).toBeGreaterThan(0);

      const router = await Router.create(fleet.config);
      const acked: string[] = [];
      const refused: string[] = [];
      let writing = true;
      const writer = (async () => {
        while (writing) {
          const id = randomUUID();
          try {
            await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
              tx.query(`insert into public.events(tenant_id, id, kind) values ($1, $2, 'iso-live')`, [tenant, id]),
            );
            acked.push(id);
          } catch {
            refused.push(id);
          }
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
      let isolate;
      try {
        isolate = await cli(['tenant', 'isolate', '--tenant', tenant, '--to', 'shard-c', '--soak', '1s', '--yes', '--wait'], 300_000);
      } finally {
        writing = false;
        await writer;
      }
      expect(isolate.code, isolate.stderr + isolate.stdout).toBe(0);
      // The next write goes to the new owner and succeeds.
      const after = randomUUID();
      await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
        tx.query(`insert into public.events(tenant_id, id, kind) values ($1, $2, 'iso-after')`, [tenant, after]),
      );
      await router.close();
      expect(acked.length).toBeGreaterThan(10);

      // The directory: T on shard-c at the next epoch, shard-c dedicated to T and holding it alone.
      expect(await getPlacement(fleet.directory, tenant)).toMatchObject({ shard: 'shard-c', epoch: 2, state: 'active', moveId: null });
      expect(await getShard(fleet.directory, 'shard-c')).toMatchObject({ dedicatedTo: tenant, status: 'open', units: 1 });
      const list = await cli(['shards', 'list', '--rate-window', '0', '--json']);
      expect(list.code, list.stderr).toBe(0);
      expect(JSON.parse(list.stdout).find((r: { name: string }) => r.name === 'shard-c')).toMatchObject({ dedicatedTo: tenant, units: 1 });

      // Every row and every acknowledged write on shard-c, none refused there, nothing left on shard-a.
      const onC = await eventIds('shard-c', tenant);
      expect(acked.filter((id) => !onC.has(id))).toEqual([]);
      expect(refused.filter((id) => onC.has(id))).toEqual([]);
      expect(onC.has(after)).toBe(true);
      expect(await H.rowCount('shard-c', tenant)).toBe(rowsBefore + acked.length + 1);
      expect(await H.rowCount('shard-a', tenant)).toBe(0);

      // The rest of the fleet is unbalanced: a plan moves units, never onto shard-c.
      const plan = await cli(['rebalance', 'plan', '--json']);
      expect(plan.code, plan.stderr).toBe(0);
      const moves: { unit: string; to: string }[] = JSON.parse(plan.stdout).moves;
      expect(moves.length).toBeGreaterThan(0);
      expect(moves.filter((m) => m.to === 'shard-c')).toEqual([]);
      expect(moves.every((m) => heavy.includes(m.unit))).toBe(true);
    },
  );
});
