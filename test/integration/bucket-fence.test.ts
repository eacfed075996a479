// A bucketed dataset's tables on a real shard: prepare fences them per bucket unit (the unit
// built from the bucket column), the CHECK binds a row's bucket to its key, replica-role writes
// are audited under the bucket's unit, prepare names a table a move could not select by bucket,
// and `dataset init` places every bucket once (a re-run changes nothing).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { testConfig, closePools, shardPool, directoryPool } from '../helpers/stack';
import { prepareStack } from '../helpers/move';
import { prepareShard, fenceStatus } from '../../lib/shard/prepare';
import { initDataset } from '../../lib/datasets';
import { bucketOf } from '../../lib/buckets/hash';
import { bucketUnitName } from '../../lib/buckets/units';
import { bucketUnitSqlExpr } from '../../lib/unit-rows';
import { getPlacement } from '../../lib/directory/placements';
import type { Config } from '../../lib/config';
import { Router } from '../../lib/router';
import { runCli, configFile } from '../helpers/cli';
import * as H from '../helpers/move';

const SHARD = 'shard-c';
const B = 16;
const schema = `bf_${randomBytes(4).toString('hex')}`;
const dataset = `bf_${randomBytes(4).toString('hex')}`;
let config: Config;
let prepared: Awaited<ReturnType<typeof prepareShard>>;
const unitOf = (n: number) => bucketUnitName(dataset, n, B);

function keyIn(bucket: number, prefix = 'k'): string {
  for (let i = 0; ; i++) if (bucketOf(`${prefix}${i}`, B) === bucket) return `${prefix}${i}`;
}

beforeAll(async () => {
  await prepareStack();
  const base = testConfig();
  config = {
    ...base,
    tenant: { ...base.tenant, schemas: [...base.tenant.schemas, schema] },
    datasets: [{ name: dataset, column: 'key', buckets: B, bucketColumn: 'bucket', tables: [`${schema}.events`, `${schema}.loose`] }],
  };
  await shardPool(SHARD).query(`create schema ${schema};
    create table ${schema}.events (bucket int not null, key text not null, v int, primary key (bucket, key), check (bucket = shardctl.bucket_of(key, ${B})));
    create table ${schema}.loose (key text primary key, bucket int not null)`);
  prepared = await prepareShard(shardPool(SHARD), config);
  await initDataset({ directory: directoryPool(), shardPool, config }, { dataset, shard: SHARD, actor: 'test' });
}, 60_000);

afterAll(async () => {
  await shardPool(SHARD)
    .query(`drop schema if exists ${schema} cascade; drop table if exists shardctl.blob_index_${dataset}`)
    .catch(() => {});
  await closePools();
});

/** Runs `sql` on SHARD in a transaction opened for `unit` at `epoch` (as the router opens one): 'ok' or the SQLSTATE. */
const inUnitTx = (unit: string | null, epoch: number, sql: string, params: unknown[] = []) => H.inUnitTx(SHARD, unit, epoch, sql, params);

describe('bucketed dataset tables on a shard', () => {
  it("the fence's row-unit expression names each bucket exactly as the router does (B = 1, 10, 1024)", async () => {
    for (const buckets of [1, 10, 1024]) {
      const ds = { name: 'events', buckets, bucketColumn: 'bucket' };
      const r = await shardPool(SHARD).query(
        `select r.bucket, ${bucketUnitSqlExpr(ds, 'r')} as unit from (select g as bucket from generate_series(0, $1 - 1) g) r`,
        [buckets],
      );
      expect(r.rows.map((x) => x.unit)).toEqual(r.rows.map((x) => bucketUnitName('events', x.bucket, buckets)));
    }
  });

  it('prepare fences the dataset tables and names the one a move could not select by bucket', () => {
    expect(prepared.tables).toEqual(expect.arrayContaining([`${schema}.events`, `${schema}.loose`]));
    const mine = prepared.problems.filter((p) => p.includes(schema));
    expect(mine.some((p) => p.includes('loose') && p.includes('does not lead with bucket'))).toBe(true);
    expect(mine.some((p) => p.includes('loose') && p.includes('shardctl.bucket_of'))).toBe(true);
    expect(mine.filter((p) => p.includes('"events"'))).toEqual([]);
  });

  it('fenceStatus counts the dataset tables as fenced, so plan and cutover accept them', async () => {
    const s = await fenceStatus(shardPool(SHARD), config);
    expect(s.fenced).toEqual(expect.arrayContaining([`${schema}.events`, `${schema}.loose`]));
  });

  it('a write is checked per bucket unit: its own bucket passes, another bucket is SC403, a stale epoch SC421, no epoch SC428', async () => {
    const k3 = keyIn(3);
    const ins = `insert into ${schema}.events(bucket, key, v) values ($1, $2, 1)`;
    expect(await inUnitTx(unitOf(3), 1, ins, [3, k3])).toBe('ok');
    expect(await inUnitTx(unitOf(4), 1, ins, [3, k3])).toBe('SC403');
    expect(await inUnitTx(unitOf(3), 2, ins, [3, k3])).toBe('SC421');
    expect(await inUnitTx(null, 1, ins, [3, k3])).toBe('SC428');
    // A row in a bucket its key does not hash to is refused by the CHECK, whatever the route.
    expect(await inUnitTx(unitOf(4), 1, ins, [4, k3])).toBe('23514');
  });

  it("updates and deletes of another bucket's rows are refused (the old-rows trigger)", async () => {
    const k5 = keyIn(5, 'u');
    const c = await shardPool(SHARD).connect();
    try {
      await c.query('begin');
      await c.query('call shardctl.open_unit_write($1, 1)', [unitOf(5)]);
      await c.query(`insert into ${schema}.events(bucket, key, v) values (5, $1, 1)`, [k5]);
      await c.query('commit');
    } finally {
      c.release();
    }
    expect(await inUnitTx(unitOf(6), 1, `delete from ${schema}.events where key = $1`, [k5])).toBe('SC403');
    expect(await inUnitTx(unitOf(6), 1, `update ${schema}.events set v = 2 where key = $1`, [k5])).toBe('SC403');
    expect(await inUnitTx(unitOf(5), 1, `update ${schema}.events set v = 2 where key = $1`, [k5])).toBe('ok');
  });

  it("a replica-role write by a foreign session is audited under the bucket's unit name", async () => {
    const k7 = keyIn(7, 'a');
    const c = await shardPool(SHARD).connect();
    try {
      await c.query(`set application_name = 'manual-fix'`);
      await c.query(`set session_replication_role = replica`);
      await c.query(`insert into ${schema}.events(bucket, key, v) values (7, $1, 1)`, [k7]);
      await c.query(`reset session_replication_role`);
    } finally {
      c.release();
    }
    const r = await shardPool(SHARD).query(`select unit, owned from shardctl.unowned_writes where table_name = $1 order by id desc limit 1`, [
      `${schema}.events`,
    ]);
    expect(r.rows[0]).toEqual({ unit: unitOf(7), owned: true });
  });

  it("the router routes a key to its bucket's owner with the bucket's epoch, hands over the bucket, keeps its blobs under its own prefix, and refuses a grant without the dataset and the blob index on a bucket's route without a key", async () => {
    const router = await Router.create(config);
    try {
      const key = keyIn(9, 'r');
      const grant = { tenants: [] as string[], datasets: [dataset] };
      const seen = await router.withKey(dataset, key, grant, 'write', async (tx, route) => {
        await tx.query(`insert into ${schema}.events(bucket, key, v) values ($1, $2, 1)`, [route.bucket, key]);
        return { unit: route.unit, shard: route.shard, epoch: route.epoch, bucket: route.bucket };
      });
      expect(seen).toEqual({ unit: unitOf(9), shard: SHARD, epoch: 1, bucket: 9 });
      await expect(router.withKey(dataset, key, { tenants: '*' }, 'read', async () => 1)).rejects.toMatchObject({ type: 'Forbidden' });
      // A bucket unit's objects live under datasets/<dataset>/<n>/ (put/get/delete); its index keeps names per key,
      // so a route opened for the bucket without a key (withBucket) refuses the index calls before any I/O.
      const put = await router.withKey(dataset, key, grant, 'write', (_tx, route) => route.blobs.put('x', 'y'));
      expect(put.key).toBe(`datasets/${dataset}/09/x`);
      expect((await router.withKey(dataset, key, grant, 'read', (_tx, route) => route.blobs.get('x')))?.toString()).toBe('y');
      await router.withKey(dataset, key, grant, 'write', (_tx, route) => route.blobs.delete('x'));
      for (const call of [(b: any) => b.write('x', 'y'), (b: any) => b.read('x'), (b: any) => b.stat('x'), (b: any) => b.unlink('x')])
        await expect(router.withBucket(dataset, 9, grant, 'write', (_tx, route) => call(route.blobs))).rejects.toThrow(
          /keeps names per key: use route.blobs under router.withKey/,
        );
      await expect(router.withKey('nope', key, grant, 'read', async () => 1)).rejects.toThrow(/unknown dataset/);
    } finally {
      await router.close();
    }
  });

  it('dataset init placed every bucket once, as a bucket unit at epoch 1; a re-run changes nothing', async () => {
    for (const n of [0, B - 1])
      expect(await getPlacement(directoryPool(), unitOf(n))).toMatchObject({ kind: 'bucket', shard: SHARD, epoch: 1, state: 'active' });
    const again = await initDataset({ directory: directoryPool(), shardPool, config }, { dataset, shard: SHARD, actor: 'test' });
    expect(again).toMatchObject({ buckets: B, created: 0, present: B, elsewhere: [] });
  });

  it(
    'the CLI: dataset init re-run is a no-op, move plan --unit names why a bucket cannot move, and bad unit options are refused before any I/O',
    { timeout: 60_000 },
    async () => {
      const f = configFile(config);
      const env = { SHARDCTL_CONFIG: f.file };
      try {
        const init = await runCli(['dataset', 'init', dataset, '--shard', SHARD, '--json'], { env });
        expect(init.code).toBe(0);
        expect(JSON.parse(init.stdout)).toMatchObject({ dataset, buckets: B, created: 0, present: B });
        const plan = await runCli(['move', 'plan', '--unit', unitOf(3), '--to', 'shard-b', '--json'], { env });
        expect(plan.code).toBe(4);
        const p = JSON.parse(plan.stdout);
        expect(p).toMatchObject({ ok: false, source: SHARD, epoch: 1 });
        expect(p.reasons.some((r: string) => r.includes(`${schema}.events is missing on the target`))).toBe(true);
        expect(p.reasons.some((r: string) => r.includes('loose') && r.includes('does not lead with bucket'))).toBe(true);
        const both = await runCli(['move', 'plan', '--tenant', 'acme', '--unit', unitOf(3), '--to', 'shard-b'], { env });
        expect(both.code).toBe(2);
        expect(both.stderr).toMatch(/exactly one of --tenant <id> and --unit <unit>/);
        const padded = await runCli(['move', 'start', '--unit', `bucket:${dataset}:3`, '--to', 'shard-b'], { env });
        expect(padded.code).toBe(2);
        expect(padded.stderr).toMatch(/not a bucket of/);
      } finally {
        f.remove();
      }
    },
  );
});
