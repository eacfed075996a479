// A bucketed dataset of its own for an e2e file: a schema with an `events` table (bucket, key, n)
// on every shard, the dataset in config (optionally with a jobs table), shards prepared, every
// bucket placed on shard-a (`dataset init`), a worker on a task queue of its own and a Temporal
// client; torn down with the schema and the dataset's blob index table. bucket-move,
// bucket-blob-index and bucket-jobs share it.
import { expect } from 'vitest';
import { randomBytes } from 'node:crypto';
import { testConfig, closePools, shardPool, directoryPool, uniq } from './stack';
import * as H from './move';
import { prepareAllShards } from '../../lib/shard/prepare';
import { initDataset } from '../../lib/datasets';
import { bucketOf } from '../../lib/buckets/hash';
import { startWorker } from '../../worker';
import type { Config } from '../../lib/config';
import type { DatasetConfig as Dataset } from '../../lib/unit-rows';

const SHARDS = ['shard-a', 'shard-b', 'shard-c'];

export interface BucketDatasetOptions {
  /** Names start with it: `<prefix>_<hex>` for the schema, `<datasetPrefix ?? prefix>_<hex>` for the dataset. */
  prefix: string;
  datasetPrefix?: string;
  buckets: number;
  /** More columns of `events` after (bucket, key, n), e.g. `payload text`. */
  eventsColumns?: string;
  /** A jobs table `<schema>.jobs` in the dataset (config.datasets[].jobsTable), created by `jobsTableSql`. */
  jobs?: (table: string, ds: Dataset) => string;
}

export interface BucketDataset {
  schema: string;
  dataset: string;
  config: Config;
  worker: Awaited<ReturnType<typeof startWorker>>;
  t: Awaited<ReturnType<typeof H.temporal>>;
  tq: string;
  init: Awaited<ReturnType<typeof initDataset>>;
}

/** The names, before any server is touched (files build their constants from them). */
export function bucketDatasetNames(o: Pick<BucketDatasetOptions, 'prefix' | 'datasetPrefix'>): { schema: string; dataset: string } {
  return { schema: `${o.prefix}_${randomBytes(4).toString('hex')}`, dataset: `${o.datasetPrefix ?? o.prefix}_${randomBytes(4).toString('hex')}` };
}

export async function setUpBucketDataset(o: BucketDatasetOptions, names: { schema: string; dataset: string }): Promise<BucketDataset> {
  const { schema, dataset } = names;
  await H.prepareStack();
  const base = testConfig();
  const jobsTable = o.jobs ? `${schema}.jobs` : undefined;
  const ds: Dataset = {
    name: dataset,
    column: 'key',
    buckets: o.buckets,
    bucketColumn: 'bucket',
    tables: [`${schema}.events`, ...(jobsTable ? [jobsTable] : [])],
    ...(jobsTable ? { jobsTable } : {}),
  };
  const config: Config = { ...base, tenant: { ...base.tenant, schemas: [...base.tenant.schemas, schema] }, datasets: [ds] };
  const extra = o.eventsColumns ? `, ${o.eventsColumns}` : '';
  for (const s of SHARDS) {
    await shardPool(s).query(`create schema ${schema};
      create table ${schema}.events (bucket int not null, key text not null, n int not null${extra},
        primary key (bucket, key, n), check (bucket = shardctl.bucket_of(key, ${o.buckets})));
      ${jobsTable && o.jobs ? o.jobs(jobsTable, ds) : ''}`);
  }
  const res = await prepareAllShards(config, shardPool, {});
  expect(res.filter((r) => r.error)).toEqual([]);
  expect(res.flatMap((r) => r.problems).filter((p) => p.includes(schema) || p.includes(dataset))).toEqual([]);
  const init = await initDataset({ directory: directoryPool(), shardPool, config }, { dataset, shard: 'shard-a', actor: 'test' });
  const tq = uniq(o.prefix);
  const worker = await startWorker(config, { taskQueue: tq });
  const t = await H.temporal();
  return { schema, dataset, config, worker, t, tq, init };
}

export async function tearDownBucketDataset(names: { schema: string; dataset: string }, d: Partial<BucketDataset> | undefined): Promise<void> {
  await d?.t?.close();
  await d?.worker?.shutdown();
  for (const s of SHARDS)
    await shardPool(s)
      .query(`drop schema if exists ${names.schema} cascade; drop table if exists shardctl.blob_index_${names.dataset}`)
      .catch(() => {});
  await closePools();
}

/** The first `count` keys `<prefix>-<i>` that hash into `bucket` of B. */
export function keysOfBucket(buckets: number, bucket: number, count: number, prefix: string): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < count; i++) if (bucketOf(`${prefix}-${i}`, buckets) === bucket) out.push(`${prefix}-${i}`);
  return out;
}
