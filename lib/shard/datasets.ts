// A shard's side of bucketed datasets: the bucket count B each dataset was created with
// (recorded once in shardctl.settings as `dataset.<name>.buckets`, never changed: a new B would
// give every key another bucket), and a check that the shard's routing hash is Node's.
import type { Pool, PoolClient } from 'pg';
import { ShardctlError } from '../errors';
import { stableHash64 } from '../buckets/hash';
import type { BucketDataset } from '../buckets/units';
import { quoteIdent, type TenantTable } from './tables';
import { bucketCheckSql, type DatasetConfig } from '../unit-rows';

const settingKey = (dataset: string) => `dataset.${dataset}.buckets`;

/**
 * Records each dataset's B on first sight and refuses (PreconditionFailed, nothing written: the
 * caller's transaction rolls back) when the shard already holds a different B for a dataset.
 */
export async function recordDatasetBuckets(c: PoolClient, datasets: readonly BucketDataset[]): Promise<void> {
  for (const d of datasets) {
    await c.query(`insert into shardctl.settings(key, value) values ($1, $2) on conflict (key) do nothing`, [settingKey(d.name), String(d.buckets)]);
    const r = await c.query(`select value from shardctl.settings where key = $1`, [settingKey(d.name)]);
    if (r.rows[0].value !== String(d.buckets)) {
      throw new ShardctlError(
        'PreconditionFailed',
        `dataset ${d.name} was created with ${r.rows[0].value} buckets on this shard; the config says ${d.buckets}: B is fixed at creation (a new B would give every key another bucket)`,
        { dataset: d.name, recorded: Number(r.rows[0].value), configured: d.buckets },
      );
    }
  }
}

/** Keys whose hashes the shard must reproduce: empty, ASCII, 2-, 3- and 4-byte UTF-8. */
export const ROUTING_HASH_PROBES = ['', 'tenant-42', 'Grüße', '東京', '🦀 emoji'];

/** Refuses (PreconditionFailed) when shardctl.stable_hash on this shard disagrees with Node's. */
export async function checkRoutingHash(db: Pool | PoolClient): Promise<void> {
  const r = await db.query(`select k, shardctl.stable_hash(k)::text as h from unnest($1::text[]) k`, [ROUTING_HASH_PROBES]);
  for (const row of r.rows) {
    const want = stableHash64(row.k).toString();
    if (row.h !== want) {
      throw new ShardctlError(
        'PreconditionFailed',
        `shardctl.stable_hash(${JSON.stringify(row.k)}) is ${row.h} on this shard, ${want} in Node: its keys would route to the wrong bucket`,
      );
    }
  }
}

/**
 * Why a dataset table cannot be moved by bucket (empty when it can): its primary key must lead
 * with the bucket column (the move's filter, the copy's and validation's key order, the apply's
 * row address), and a CHECK must bind the bucket column to the key's hash, so every row sits in
 * the bucket the router names for its key (lib/unit-rows.ts says why not a generated column).
 */
export async function bucketTableProblems(db: Pool | PoolClient, t: TenantTable, ds: DatasetConfig): Promise<string[]> {
  const out: string[] = [];
  if (t.primaryKey[0] !== ds.bucketColumn) {
    out.push(
      `${t.qualified} (dataset ${ds.name}) primary key (${t.primaryKey.join(', ') || 'none'}) does not lead with ${ds.bucketColumn}: ` +
        `use PRIMARY KEY (${ds.bucketColumn}, ${ds.column}, ...)`,
    );
  }
  const r = await db.query(`select pg_get_constraintdef(oid) as def from pg_constraint where conrelid = $1::regclass and contype = 'c' and convalidated`, [
    t.qualified,
  ]);
  const ident = (s: string) => `(?:${s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}|"${s.replace(/"/g, '""').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}")`;
  const want = new RegExp(`^CHECK \\(\\(${ident(ds.bucketColumn)} = shardctl\\.bucket_of\\(\\(?${ident(ds.column)}\\)?(?:::text)?, ${ds.buckets}\\)\\)\\)$`);
  if (!r.rows.some((x) => want.test(x.def))) {
    out.push(`${t.qualified} (dataset ${ds.name}) has no validated ${bucketCheckSql(ds)}: add it (ALTER TABLE ${t.qualified} ADD ${bucketCheckSql(ds)})`);
  }
  if (t.replicaIdentity !== 'default' && t.replicaIdentity !== 'full') {
    out.push(
      `${t.qualified} (dataset ${ds.name}) has REPLICA IDENTITY ${t.replicaIdentity.toUpperCase()}; use DEFAULT (primary key led by ${ds.bucketColumn})`,
    );
  }
  return out;
}

/**
 * Why a dataset's jobs table (config.datasets[].jobsTable) would not move with its buckets (empty
 * when it would): it must be one of the dataset's tables (`tables`: their quoted qualified names
 * on this shard), so its rows are fenced per bucket unit and carried, validated and retired with
 * the bucket's rows (lib/jobs/queue.ts).
 */
export function jobsTableProblems(ds: { name: string; jobsTable?: string }, tables: readonly string[]): string[] {
  if (!ds.jobsTable) return [];
  const [schema, table] = ds.jobsTable.split('.');
  if (tables.includes(`${quoteIdent(schema)}.${quoteIdent(table)}`)) return [];
  return [
    `jobs table ${ds.jobsTable} of dataset ${ds.name} is not one of its tables on this shard (missing, without its key and bucket columns, or not in datasets[].tables): its bucket units' jobs would be neither fenced nor moved with them`,
  ];
}
