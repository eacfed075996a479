// The blob index of a bucket unit on a real shard (issue 13, "blobs follow the unit that owns
// them"): a dataset's index is shardctl.blob_index_<dataset>, one of its tables, keyed by bucket,
// key and name. Under withKey the route's write/read/stat/unlink name the key's blobs there; its
// rows are fenced per bucket unit like any dataset row; the collector works per bucket unit and
// never deletes an object a live index row names.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes, createHash } from 'node:crypto';
import { testConfig, closePools, shardPool, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { prepareShard, fenceStatus } from '../../lib/shard/prepare';
import { initDataset } from '../../lib/datasets';
import { bucketOf } from '../../lib/buckets/hash';
import { bucketUnitName } from '../../lib/buckets/units';
import { shardByName, type Config } from '../../lib/config';
import { Router } from '../../lib/router';
import { s3ClientFor } from '../../lib/s3';
import { hashObject, listBlobs, unitBlobPrefix } from '../../lib/blobs';
import { collectTenantBlobs, type GcDeps } from '../../lib/blobs/gc';
import { collectableUnits } from '../../lib/blobs/gc-loop';
import type { S3Client } from '@aws-sdk/client-s3';
import { runCli, configFile } from '../helpers/cli';

const SHARD = 'shard-c';
const B = 8;
const schema = `bbi_${randomBytes(4).toString('hex')}`;
const dataset = `bbi_${randomBytes(4).toString('hex')}`;
const indexTable = `shardctl.blob_index_${dataset}`;
let config: Config;
let prepared: Awaited<ReturnType<typeof prepareShard>>;
let s3: S3Client;
const grant = { tenants: [] as string[], datasets: [dataset] };
const unitOf = (n: number) => bucketUnitName(dataset, n, B);

function keysIn(bucket: number, count: number, prefix: string): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < count; i++) if (bucketOf(`${prefix}${i}`, B) === bucket) out.push(`${prefix}${i}`);
  return out;
}

beforeAll(async () => {
  await H.prepareStack();
  const base = testConfig();
  config = {
    ...base,
    tenant: { ...base.tenant, schemas: [...base.tenant.schemas, schema] },
    datasets: [{ name: dataset, column: 'key', buckets: B, bucketColumn: 'bucket', tables: [`${schema}.events`] }],
  };
  await shardPool(SHARD).query(`create schema ${schema};
    create table ${schema}.events (bucket int not null, key text not null, v int, primary key (bucket, key), check (bucket = shardctl.bucket_of(key, ${B})))`);
  prepared = await prepareShard(shardPool(SHARD), config);
  await initDataset({ directory: directoryPool(), shardPool, config }, { dataset, shard: SHARD, actor: 'test' });
  s3 = s3ClientFor(config, SHARD);
}, 60_000);

afterAll(async () => {
  s3?.destroy();
  await shardPool(SHARD)
    .query(`drop schema if exists ${schema} cascade; drop table if exists ${indexTable}`)
    .catch(() => {});
  await closePools();
});

const bucketName = () => shardByName(config, SHARD).bucket;
const gcDeps = (): GcDeps => ({
  tenantColumn: config.tenant.column,
  datasets: config.datasets,
  directoryPool,
  shardPool,
  bucketOf: (s) => ({ shard: s, s3, bucket: shardByName(config, s).bucket }),
});

describe('the blob index of a bucket unit', () => {
  it("prepare creates the dataset's index as one of its tables, fenced, with no problem", async () => {
    expect(prepared.tables).toEqual(expect.arrayContaining([indexTable, `${schema}.events`]));
    expect(prepared.problems.filter((p) => p.includes(dataset) || p.includes(schema))).toEqual([]);
    expect((await fenceStatus(shardPool(SHARD), config)).fenced).toContain(indexTable);
  });

  it("write, read, stat and unlink under withKey name the key's blobs in the dataset's index, objects under the key's folder", async () => {
    const router = await Router.create(config);
    try {
      const [k1, k2] = keysIn(4, 2, 'w');
      const v1 = await router.withKey(dataset, k1, grant, 'write', (_tx, route) => route.blobs.write('doc', 'one'));
      const v2 = await router.withKey(dataset, k2, grant, 'write', (_tx, route) => route.blobs.write('doc', 'two'));
      expect(v1.key).toMatch(new RegExp(`^datasets/${dataset}/4/~${k1}/doc@`));
      expect(v2.key.startsWith(`datasets/${dataset}/4/~${k2}/doc@`)).toBe(true);
      // One name under two keys of one bucket: two blobs, each read back through its own key.
      expect((await router.withKey(dataset, k1, grant, 'read', (_tx, route) => route.blobs.read('doc')))?.toString()).toBe('one');
      expect((await router.withKey(dataset, k2, grant, 'read', (_tx, route) => route.blobs.read('doc')))?.toString()).toBe('two');
      const rows = await shardPool(SHARD).query(`select bucket, key, name, object_key, sha256 from ${indexTable} where bucket = 4 order by key`);
      expect(new Set(rows.rows.map((r) => JSON.stringify(r)))).toEqual(
        new Set([
          JSON.stringify({ bucket: 4, key: k1, name: 'doc', object_key: v1.key, sha256: createHash('sha256').update('one').digest('hex') }),
          JSON.stringify({ bucket: 4, key: k2, name: 'doc', object_key: v2.key, sha256: createHash('sha256').update('two').digest('hex') }),
        ]),
      );
      expect((await hashObject(s3, bucketName(), v1.key)).sha256).toBe(v1.sha256);
      expect(await router.withKey(dataset, k1, grant, 'write', (_tx, route) => route.blobs.unlink('doc'))).toBe(true);
      expect(await router.withKey(dataset, k1, grant, 'read', (_tx, route) => route.blobs.stat('doc'))).toBeUndefined();
      expect(await router.withKey(dataset, k2, grant, 'read', (_tx, route) => route.blobs.stat('doc'))).toMatchObject({ key: v2.key });
    } finally {
      await router.close();
    }
  });

  it('an index row is fenced per bucket unit: another bucket’s transaction is SC403, a stale epoch SC421, no unit SC428', async () => {
    const [k] = keysIn(2, 1, 'f');
    const insert = `insert into ${indexTable}(bucket, key, name, object_key, version, size, sha256) values (2, $1, 'n', 'k', 'v', 0, repeat('0', 64))`;
    expect(await H.inUnitTx(SHARD, unitOf(3), 1, insert, [k])).toBe('SC403');
    expect(await H.inUnitTx(SHARD, unitOf(2), 0, insert, [k])).toBe('SC421');
    expect(await H.inUnitTx(SHARD, null, 1, insert, [k])).toBe('SC428');
    expect(await H.inUnitTx(SHARD, unitOf(2), 1, insert, [k])).toBe('ok');
  });

  it('the collector works per bucket unit: it deletes only version objects no live row names, and keeps the referenced, the young and the keys the application manages', async () => {
    const router = await Router.create(config);
    try {
      const [k1, k2] = keysIn(6, 2, 'gc');
      const first = await router.withKey(dataset, k1, grant, 'write', (_tx, route) => route.blobs.write('a', 'v1'));
      const current = await router.withKey(dataset, k1, grant, 'write', (_tx, route) => route.blobs.write('a', 'v2')); // supersedes v1
      const gone = await router.withKey(dataset, k2, grant, 'write', (_tx, route) => route.blobs.write('b', 'x'));
      await router.withKey(dataset, k2, grant, 'write', (_tx, route) => route.blobs.unlink('b'));
      const kept = await router.withKey(dataset, k2, grant, 'write', (_tx, route) => route.blobs.write('c', 'live'));
      const own = await router.withKey(dataset, k2, grant, 'write', (_tx, route) => route.blobs.put('plain', 'mine'));
      // Another bucket's superseded version: not this unit's to collect.
      const [k7] = keysIn(7, 1, 'gc');
      const other = await router.withKey(dataset, k7, grant, 'write', (_tx, route) => route.blobs.write('a', 'o1'));
      await router.withKey(dataset, k7, grant, 'write', (_tx, route) => route.blobs.write('a', 'o2'));

      expect(await collectableUnits(gcDeps())).toEqual(expect.arrayContaining([unitOf(6), unitOf(7)]));
      const dry = await collectTenantBlobs(gcDeps(), { tenant: unitOf(6), graceMs: 0, dryRun: true, operator: { actor: 'test' } });
      expect(dry.collected.sort()).toEqual([first.key, gone.key].sort());
      const young = await collectTenantBlobs(gcDeps(), { tenant: unitOf(6), graceMs: 3_600_000, operator: { actor: 'test' } });
      expect(young).toMatchObject({ collected: [], young: 2, referenced: 2, notVersions: 1 });
      const r = await collectTenantBlobs(gcDeps(), { tenant: unitOf(6), graceMs: 0, shard: SHARD, operator: { actor: 'test' } });
      expect(r.collected.sort()).toEqual([first.key, gone.key].sort());
      expect(r).toMatchObject({ referenced: 2, notVersions: 1, shard: SHARD });
      const left = (await listBlobs(s3, bucketName(), unitBlobPrefix(unitOf(6)))).map((e) => e.key).sort();
      expect(left).toEqual([current.key, kept.key, own.key].sort());
      expect((await router.withKey(dataset, k1, grant, 'read', (_tx, route) => route.blobs.read('a')))?.toString()).toBe('v2');
      expect((await router.withKey(dataset, k2, grant, 'read', (_tx, route) => route.blobs.read('c')))?.toString()).toBe('live');
      // Bucket 7's objects were not touched.
      expect((await listBlobs(s3, bucketName(), unitBlobPrefix(unitOf(7)))).map((e) => e.key)).toContain(other.key);
      // The CLI: --unit collects one bucket unit (dry run: nothing deleted); a bucket name that is not canonical, or both options, are refused.
      await router.withKey(dataset, k1, grant, 'write', (_tx, route) => route.blobs.write('a', 'v3')); // supersedes v2
      const f = configFile(config);
      try {
        const env = { SHARDCTL_CONFIG: f.file };
        const dryCli = await runCli(['blobs', 'gc', '--unit', unitOf(6), '--grace', '0s', '--dry-run', '--json'], { env });
        expect(dryCli.code, dryCli.stderr).toBe(0);
        expect(JSON.parse(dryCli.stdout)).toMatchObject({ dryRun: true, tenants: [{ tenant: unitOf(6), shard: SHARD, collected: [current.key] }] });
        expect((await listBlobs(s3, bucketName(), unitBlobPrefix(unitOf(6)))).map((e) => e.key)).toContain(current.key);
        const padded = await runCli(['blobs', 'gc', '--unit', `bucket:${dataset}:06`, '--dry-run'], { env }); // B = 8: the bucket is `6`
        expect(padded.code).toBe(2);
        expect(padded.stderr).toMatch(/not a bucket of/);
        const both = await runCli(['blobs', 'gc', '--unit', unitOf(6), '--tenant', 'acme', '--dry-run'], { env });
        expect(both.code).toBe(2);
        expect(both.stderr).toMatch(/--tenant or --unit, not both/);
      } finally {
        f.remove();
      }
      // Not on a shard that does not own the unit.
      await expect(collectTenantBlobs(gcDeps(), { tenant: unitOf(6), graceMs: 0, shard: 'shard-a', operator: { actor: 'test' } })).rejects.toMatchObject({
        type: 'PreconditionFailed',
      });
    } finally {
      await router.close();
    }
  });
});
