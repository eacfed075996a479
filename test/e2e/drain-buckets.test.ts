// `shards drain` of a shard holding the buckets of a bucket-routed dataset (issue 13), on the real
// stack, on a fleet of the test's own (its own directory database: test/helpers/fleet.ts). The
// dataset's B buckets are placed on shard-c by `dataset init`, rows written through the router by
// key; the drain plans a move per bucket (the planner reads bucket units as it reads tenants),
// spreads them over shard-a and shard-b, runs each with the real move workflow, and closes
// shard-c. Asserted: every bucket's rows are on its new owner exactly as written, none left on
// shard-c, each bucket at epoch 2, and the router writes each key on the new owner.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli, configFile } from '../helpers/cli';
import { closePools, shardPool } from '../helpers/stack';
import { prepareAllShards } from '../../lib/shard/prepare';
import { initDataset } from '../../lib/datasets';
import { bucketOf } from '../../lib/buckets/hash';
import { bucketUnitName } from '../../lib/buckets/units';
import { getPlacement } from '../../lib/directory/placements';
import { getShard } from '../../lib/directory/shards';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import { planFromDirectory } from '../../lib/rebalance/fleet';
import { Router } from '../../lib/router';
import { startWorker } from '../../worker';
import type { Config } from '../../lib/config';
import type { RebalanceStatus } from '../../workflows/rebalance-messages';

const B = 4;
const schema = `dbk_${randomBytes(4).toString('hex')}`;
const dataset = `dr_${randomBytes(4).toString('hex')}`;
const SHARDS = ['shard-a', 'shard-b', 'shard-c'];
let fleet: Fleet;
let config: Config;
let file: { file: string; remove: () => void };
let worker: Awaited<ReturnType<typeof startWorker>> | undefined;
const grant = { tenants: [] as string[], datasets: [dataset] };
const unitOf = (bucket: number) => bucketUnitName(dataset, bucket, B);
const keys = Array.from({ length: 40 }, (_, i) => `k${i}-é-${randomBytes(2).toString('hex')}`);

async function rowsOn(shard: string, bucket: number): Promise<string[]> {
  const r = await shardPool(shard).query(`select key || ':' || n || ':' || payload as row from ${schema}.events where bucket = $1 order by 1`, [bucket]);
  return r.rows.map((x) => x.row);
}

beforeAll(async () => {
  fleet = await ownFleet('dbk', { worker: false });
  config = {
    ...fleet.config,
    tenant: { ...fleet.config.tenant, schemas: [...fleet.config.tenant.schemas, schema] },
    datasets: [{ name: dataset, column: 'key', buckets: B, bucketColumn: 'bucket', tables: [`${schema}.events`] }],
  };
  file = configFile(config);
  for (const s of SHARDS) {
    await shardPool(s).query(`create schema ${schema};
      create table ${schema}.events (bucket int not null, key text not null, n int not null, payload text,
        primary key (bucket, key, n), check (bucket = shardctl.bucket_of(key, ${B})))`);
  }
  const res = await prepareAllShards(config, shardPool, {});
  expect(res.filter((r) => r.error)).toEqual([]);
  const init = await initDataset({ directory: fleet.directory, shardPool, config }, { dataset, shard: 'shard-c', actor: 'test' });
  expect(init).toMatchObject({ buckets: B, created: B });
  const router = await Router.create(config);
  try {
    for (const [i, key] of keys.entries()) {
      await router.withKey(dataset, key, grant, 'write', (tx, route) =>
        tx.query(`insert into ${schema}.events(bucket, key, n, payload) values ($1, $2, $3, $4)`, [route.bucket, key, i, `p${i}`]),
      );
    }
  } finally {
    await router.close();
  }
  worker = await startWorker(config, { taskQueue: fleet.tq });
}, 180_000);

afterAll(async () => {
  await worker?.shutdown();
  await fleet?.close();
  file?.remove();
  for (const s of SHARDS)
    await shardPool(s)
      .query(`drop schema if exists ${schema} cascade; drop table if exists shardctl.blob_index_${dataset}`)
      .catch(() => {});
  await closePools();
});

describe('shards drain of a shard holding buckets', () => {
  it('`rebalance plan` and the drain plan count bucket units: a drain plans one move per bucket, spread over the open shards', async () => {
    const plan = await planFromDirectory(fleet.directory, config, { kind: 'drain', shard: 'shard-c' });
    expect(plan.problems).toEqual([]);
    expect(plan.moves.map((m) => [m.unit, m.from]).sort()).toEqual([0, 1, 2, 3].map((n) => [unitOf(n), 'shard-c']));
    expect(plan.moves.filter((m) => m.to === 'shard-a')).toHaveLength(2);
    expect(plan.moves.filter((m) => m.to === 'shard-b')).toHaveLength(2);
    const cli = await runCli(['--config', file.file, 'rebalance', 'plan', '--json']);
    expect(cli.code, cli.stderr).toBe(0);
    const rb = JSON.parse(cli.stdout);
    expect(rb.shards.find((s: { name: string }) => s.name === 'shard-c').unitsBefore).toBe(B);
  });

  it('moves every bucket off shard-c with the real move workflow, row for row, and ends with shard-c closed', { timeout: 300_000 }, async () => {
    const written = new Map<number, string[]>();
    for (let n = 0; n < B; n++) written.set(n, await rowsOn('shard-c', n));
    expect([...written.values()].flat()).toHaveLength(keys.length);
    const input = rebalanceInputFor(config, { scope: { kind: 'drain', shard: 'shard-c' }, requestedBy: 'test', soakSeconds: 1 });
    const h = await startRebalance(fleet.t.client, fleet.tq, input, config.temporal.rebalanceWorkflowId);
    const st: RebalanceStatus = await h.result();
    expect(st.problems).toEqual([]);
    expect(st.phase).toBe('done');
    expect(st.moves.map((m) => [m.unit, m.from, m.state]).sort()).toEqual([0, 1, 2, 3].map((n) => [unitOf(n), 'shard-c', 'done']));
    expect(st.drain).toEqual({ shard: 'shard-c', closed: true, reasons: [] });
    expect(await getShard(fleet.directory, 'shard-c')).toMatchObject({ status: 'closed', units: 0 });
    for (let n = 0; n < B; n++) {
      const m = st.moves.find((x) => x.unit === unitOf(n))!;
      expect(await getPlacement(fleet.directory, unitOf(n))).toMatchObject({ kind: 'bucket', shard: m.to, epoch: 2, state: 'active' });
      expect(await rowsOn(m.to, n), `bucket ${n} on ${m.to}`).toEqual(written.get(n));
      expect(await rowsOn('shard-c', n), `bucket ${n} retired on shard-c`).toEqual([]);
    }
    const router = await Router.create(config);
    try {
      for (const key of keys.slice(0, 8)) {
        const shard = await router.withKey(dataset, key, grant, 'write', async (tx, route) => {
          await tx.query(`insert into ${schema}.events(bucket, key, n, payload) values ($1, $2, 1000, 'after')`, [route.bucket, key]);
          return route.shard;
        });
        expect(shard).toBe(st.moves.find((x) => x.unit === unitOf(bucketOf(key, B)))!.to);
      }
    } finally {
      await router.close();
    }
  });
});
