// The routing hash on real shards: shardctl.stable_hash / bucket_of (installed by `shards
// prepare`) agree with Node on 100k random keys — non-ASCII, empty and very long ones included —
// serve as a generated bucket column and a publication's row filter, and a dataset's B cannot
// change once a shard has recorded it.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool } from 'pg';
import { testConfig, uniq, shardPool, closePools } from '../helpers/stack';
import { randomKeys } from '../helpers/keys';
import { bucketOf, stableHash64 } from '../../lib/buckets/hash';
import { prepareShard } from '../../lib/shard/prepare';
import { checkRoutingHash } from '../../lib/shard/datasets';
import { Config } from '../../lib/config';
import { ShardctlError } from '../../lib/errors';

const SHARD = 'shard-a';
const BUCKET_COUNTS = [1024, 7, 65536];
let pool: Pool;
const schemas: string[] = [];
const datasets: string[] = [];

/** A config whose tenant tables are a schema of this test's own, with one bucketed dataset. */
async function ownConfig(buckets: number, name = uniq('rh').replace(/-/g, '_')): Promise<{ config: Config; schema: string; dataset: string }> {
  const schema = uniq('rh').replace(/-/g, '_');
  await pool.query(`create schema ${schema}`);
  schemas.push(schema);
  datasets.push(name);
  const base = testConfig();
  return {
    schema,
    dataset: name,
    config: {
      ...base,
      tenant: { ...base.tenant, schemas: [schema], tables: undefined },
      datasets: [{ name, column: 'device_id', buckets, bucketColumn: 'bucket' }],
    },
  };
}

beforeAll(async () => {
  pool = shardPool(SHARD);
  await prepareShard(pool, (await ownConfig(1024)).config);
});

afterAll(async () => {
  for (const s of schemas) await pool.query(`drop schema if exists ${s} cascade`);
  await pool.query(`delete from shardctl.settings where key = any($1)`, [datasets.map((d) => `dataset.${d}.buckets`)]);
  await closePools();
});

describe('the routing hash on a shard', () => {
  it('agrees with Node on 100k random keys, for the hash and for bucket_of at several B', async () => {
    const keys = randomKeys(100_000, 20240613);
    expect(keys).toContain('');
    expect(keys.some((k) => k.length >= 20_000)).toBe(true);
    expect(keys.filter((k) => Buffer.byteLength(k) > k.length).length).toBeGreaterThan(90_000);
    const disagree: string[] = [];
    let compared = 0;
    for (let i = 0; i < keys.length; i += 10_000) {
      const batch = keys.slice(i, i + 10_000);
      const r = await pool.query(
        `select k.ord::int as ord, shardctl.stable_hash(k.key)::text as h, ${BUCKET_COUNTS.map((b, j) => `shardctl.bucket_of(k.key, ${b}) as b${j}`).join(', ')}
           from unnest($1::text[]) with ordinality k(key, ord) order by k.ord`,
        [batch],
      );
      expect(r.rows).toHaveLength(batch.length);
      for (const row of r.rows) {
        const key = batch[row.ord - 1];
        const h = stableHash64(key);
        if (row.h !== h.toString()) disagree.push(`hash of ${JSON.stringify(key.slice(0, 40))}: sql ${row.h}, node ${h}`);
        BUCKET_COUNTS.forEach((b, j) => {
          if (row[`b${j}`] !== bucketOf(key, b))
            disagree.push(`bucket_of(${JSON.stringify(key.slice(0, 40))}, ${b}): sql ${row[`b${j}`]}, node ${bucketOf(key, b)}`);
        });
        compared++;
      }
    }
    expect(compared).toBe(100_000);
    expect(disagree.slice(0, 5)).toEqual([]);
  });

  it('is immutable: a generated bucket column holds the router’s bucket, and a publication can filter on it', async () => {
    const { schema } = await ownConfig(1024);
    await pool.query(
      `create table ${schema}.devices (id int primary key, device_id text not null, bucket int generated always as (shardctl.bucket_of(device_id, 1024)) stored)`,
    );
    const keys = [...new Set(randomKeys(2000, 7))];
    await pool.query(`insert into ${schema}.devices(id, device_id) select k.ord, k.key from unnest($1::text[]) with ordinality k(key, ord)`, [keys]);
    const r = await pool.query(`select device_id, bucket from ${schema}.devices`);
    expect(r.rows).toHaveLength(keys.length);
    expect(r.rows.filter((row) => row.bucket !== bucketOf(row.device_id, 1024))).toEqual([]);
    const pub = `${schema}_b42`;
    await pool.query(`create publication ${pub} for table ${schema}.devices where (bucket = 42)`);
    try {
      const f = await pool.query(`select rowfilter from pg_publication_tables where pubname = $1`, [pub]);
      expect(f.rows[0].rowfilter).toBe('(bucket = 42)');
    } finally {
      await pool.query(`drop publication ${pub}`);
    }
  });

  it('refuses a bucket count outside 1..65536 in SQL as in Node', async () => {
    for (const b of [0, -1, 65537])
      await expect(pool.query(`select shardctl.bucket_of('k', $1)`, [b])).rejects.toThrow(/bucket count is an integer from 1 to 65536/);
    expect((await pool.query(`select shardctl.bucket_of('k', 1) as b, shardctl.bucket_of(null, 8) as n`)).rows[0]).toEqual({ b: 0, n: null });
  });

  it('prepare refuses a shard whose stable_hash is not Node’s', async () => {
    const c = await pool.connect();
    try {
      await c.query('begin');
      await c.query(`create or replace function shardctl.stable_hash(p_key text) returns numeric language sql immutable strict
                       set search_path = pg_catalog, pg_temp as $$ select pg_catalog.length(p_key)::numeric $$`);
      const err = await checkRoutingHash(c).catch((e) => e);
      expect(err).toBeInstanceOf(ShardctlError);
      expect(err.type).toBe('PreconditionFailed');
      expect(err.message).toMatch(/stable_hash\(""\) is 0 on this shard, 16406829232824261652 in Node/);
    } finally {
      await c.query('rollback');
      c.release();
    }
    await checkRoutingHash(pool);
  });
});

describe('a dataset’s bucket count', () => {
  it('is recorded by prepare on first sight and then fixed: another B is refused and changes nothing', async () => {
    const { config, schema, dataset } = await ownConfig(256);
    await prepareShard(pool, config);
    const key = `dataset.${dataset}.buckets`;
    expect((await pool.query(`select value from shardctl.settings where key = $1`, [key])).rows).toEqual([{ value: '256' }]);

    // A new tenant table appears, then prepare runs with a changed B: it refuses before fencing it.
    await pool.query(`create table ${schema}.later (tenant_id text not null, id int not null, primary key (tenant_id, id))`);
    const changed = { ...config, datasets: [{ ...config.datasets[0], buckets: 512 }] };
    const err = await prepareShard(pool, changed).catch((e) => e);
    expect(err).toBeInstanceOf(ShardctlError);
    expect(err.type).toBe('PreconditionFailed');
    expect(err.message).toBe(
      `dataset ${dataset} was created with 256 buckets on this shard; the config says 512: B is fixed at creation (a new B would give every key another bucket)`,
    );
    expect((await pool.query(`select value from shardctl.settings where key = $1`, [key])).rows).toEqual([{ value: '256' }]);
    const triggers = await pool.query(`select 1 from pg_trigger where tgrelid = $1::regclass and not tgisinternal`, [`${schema}.later`]);
    expect(triggers.rowCount).toBe(0);

    // The same B again is an ordinary, idempotent prepare (and now fences the new table).
    expect((await prepareShard(pool, config)).changed).toEqual([`${schema}.later`]);
  });
});
