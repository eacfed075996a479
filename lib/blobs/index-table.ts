// The blob index (DESIGN.md §2): the authority on which object holds each of a unit's blobs. A
// tenant's rows are in shardctl.blob_index (tenant column leading the primary key); a bucketed
// dataset D's in shardctl.blob_index_<D> (bucket column, key column, name: one of D's tables, its
// bucket leading the primary key and bound to the key by the dataset's CHECK). Each is fenced by
// `shards prepare` like the application's tables and moved by copy, catch-up and validate with its
// unit's rows, written only inside a fenced router transaction, so a blob write counts exactly
// when its row commits. Objects are immutable: each version has a key of its own
// (`tenants/<id>/<name>@<version>`, `datasets/<D>/<n>/~<key>/<name>@<version>`), and a superseded or
// deleted version's object is left to the collector (./gc), which deletes only version keys no
// committed row names. This module holds every statement against these tables.
import { randomBytes } from 'node:crypto';
import type { PoolClient } from 'pg';
import { ShardctlError } from '../errors';
import { quoteIdent } from '../shard/tables';
import { unitBlobPrefix } from './prefix';
import { parseUnit } from '../buckets/units';
import { bucketBlobIndexTable } from '../unit-rows';

export const BLOB_INDEX_SCHEMA = 'shardctl';
export const BLOB_INDEX_TABLE = 'blob_index';
export const BLOB_INDEX_QUALIFIED = `${BLOB_INDEX_SCHEMA}.${BLOB_INDEX_TABLE}`;

/**
 * A put takes this lock shared (per unit, transaction-scoped) before it uploads, and holds it
 * until its row commits or rolls back; the collector takes it exclusively before its last look at
 * the index, so it never deletes an object whose row is about to commit.
 */
export const BLOB_INDEX_LOCK_CLASS = 4214;

/** `<name>@<version>`: a version is 10 base-36 digits of milliseconds, a dash, 16 hex digits of randomness. */
const VERSION_SUFFIX_RE = /@([0-9a-z]{8,11}-[0-9a-f]{16})$/;

/** The table, its tenant column named as the config names it (idempotent; run inside prepare's transaction). */
export function blobIndexDdl(tenantColumn: string): string {
  const col = quoteIdent(tenantColumn);
  return `
create table if not exists shardctl.blob_index (
  ${col} text not null,
  name text not null,
  object_key text not null,
  version text not null,
  size bigint not null check (size >= 0),
  sha256 text not null check (sha256 ~ '^[0-9a-f]{64}$'),
  -- 'live' is the only state a row has: a deleted blob has no row (its object is the collector's).
  state text not null default 'live' check (state in ('live')),
  content_type text,
  updated_at timestamptz not null default now(),
  primary key (${col}, name)
);`;
}

/**
 * The index table of a bucketed dataset (idempotent; run inside prepare's transaction): one of the
 * dataset's tables, so its fence triggers check each row's bucket unit and a bucket's move carries it.
 */
export function bucketBlobIndexDdl(ds: { name: string; column: string; bucketColumn: string; buckets: number }): string {
  const b = quoteIdent(ds.bucketColumn);
  const k = quoteIdent(ds.column);
  return `
create table if not exists ${bucketBlobIndexTable(ds.name)} (
  ${b} int not null,
  ${k} text not null,
  name text not null,
  object_key text not null,
  version text not null,
  size bigint not null check (size >= 0),
  sha256 text not null check (sha256 ~ '^[0-9a-f]{64}$'),
  state text not null default 'live' check (state in ('live')),
  content_type text,
  updated_at timestamptz not null default now(),
  primary key (${b}, ${k}, name),
  check (${b} = shardctl.bucket_of(${k}, ${Number(ds.buckets)}))
);`;
}

/**
 * Which index rows a statement addresses: the table and the leading key columns with their values —
 * a tenant (tenant column), a bucket unit (bucket column), or one key of a bucket (bucket and key
 * columns: where a blob's name lives).
 */
export interface IndexScope {
  table: string;
  /** Quoted column names, leading the table's primary key in order. */
  columns: string[];
  values: unknown[];
}

/** A tenant's rows of shardctl.blob_index. */
export function tenantIndexScope(tenantColumn: string, unit: string): IndexScope {
  return { table: BLOB_INDEX_QUALIFIED, columns: [quoteIdent(tenantColumn)], values: [unit] };
}

/** A bucket's rows of its dataset's index, or only those of one key (where `write`/`read` name blobs). */
export function bucketIndexScope(ds: { name: string; column: string; bucketColumn: string }, bucket: number, key?: string): IndexScope {
  const columns = [quoteIdent(ds.bucketColumn), ...(key === undefined ? [] : [quoteIdent(ds.column)])];
  return { table: bucketBlobIndexTable(ds.name), columns, values: [bucket, ...(key === undefined ? [] : [key])] };
}

/** A unit's rows, for what reads a whole unit (the move's syncs, the collector); undefined for a sub-unit or a bucket of no configured dataset. */
export function unitIndexScope(
  config: { tenant: { column: string }; datasets: readonly { name: string; column: string; bucketColumn: string }[] },
  unit: string,
): IndexScope | undefined {
  const p = parseUnit(unit);
  if (p.kind === 'tenant') return p.path.length === 0 ? tenantIndexScope(config.tenant.column, unit) : undefined;
  const ds = config.datasets.find((d) => d.name === p.dataset);
  return ds ? bucketIndexScope(ds, p.bucket) : undefined;
}

/** `c1 = $from and c2 = $from+1 ...` over the scope's columns. */
function scopeWhere(scope: IndexScope, from = 1): string {
  return scope.columns.map((c, i) => `${c} = $${from + i}`).join(' and ');
}

export interface BlobVersion {
  name: string;
  /** The object holding this version, under `tenants/<id>/`. */
  key: string;
  version: string;
  size: number;
  sha256: string;
  contentType: string | null;
}

/** A fresh version id (never reused: a retried put uploads under a new one). */
export function newVersionId(now = Date.now()): string {
  return `${now.toString(36)}-${randomBytes(8).toString('hex')}`;
}

/**
 * The object key of one version of `name` (name already checked by blobKeyOf): under the unit's
 * prefix, and for a bucket's blob under its key's folder `~<key, URI-encoded>/` (names are per key).
 */
export function versionKeyOf(unit: string, name: string, version: string, key?: string): string {
  const folder = key === undefined ? '' : `~${encodeURIComponent(key)}/`;
  return `${unitBlobPrefix(unit)}${folder}${name}@${version}`;
}

/** True when `key` has the shape of a version object (the only objects the collector may delete). */
export function isVersionKey(key: string): boolean {
  return VERSION_SUFFIX_RE.test(key);
}

/** A name whose key would look like a version object: refused, so a plain object is never mistaken for garbage. */
export function looksLikeVersionName(name: string): boolean {
  return VERSION_SUFFIX_RE.test(name);
}

const lockSql = (shared: boolean) => `select pg_advisory_xact_lock${shared ? '_shared' : ''}(${BLOB_INDEX_LOCK_CLASS}, hashtext($1))`;

/** A put's side of the lock (see BLOB_INDEX_LOCK_CLASS). */
export async function lockIndexShared(tx: Pick<PoolClient, 'query'>, unit: string): Promise<void> {
  await tx.query(lockSql(true), [unit]);
}

/** The collector's side: waits for every put of the unit in flight, and holds new ones off until the transaction ends. */
export async function lockIndexExclusive(tx: Pick<PoolClient, 'query'>, unit: string): Promise<void> {
  await tx.query(lockSql(false), [unit]);
}

/** Records (or replaces) the blob's current version. Its fence trigger refuses it unless the transaction may write the unit. */
export async function upsertIndexRow(tx: Pick<PoolClient, 'query'>, scope: IndexScope, v: BlobVersion): Promise<void> {
  const n = scope.columns.length;
  const cols = scope.columns.join(', ');
  const p = (i: number) => `$${n + i}`;
  await tx.query(
    `insert into ${scope.table} (${cols}, name, object_key, version, size, sha256, state, content_type, updated_at)
     values (${scope.columns.map((_, i) => `$${i + 1}`).join(', ')}, ${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(5)}, 'live', ${p(6)}, now())
     on conflict (${cols}, name) do update
       set object_key = excluded.object_key, version = excluded.version, size = excluded.size, sha256 = excluded.sha256,
           state = excluded.state, content_type = excluded.content_type, updated_at = excluded.updated_at`,
    [...scope.values, v.name, v.key, v.version, String(v.size), v.sha256, v.contentType],
  );
}

const rowToVersion = (r: any): BlobVersion => ({
  name: r.name,
  key: r.object_key,
  version: r.version,
  size: Number(r.size),
  sha256: r.sha256,
  contentType: r.content_type ?? null,
});

/** The blob's current version, or undefined when the index has none. */
export async function findIndexRow(tx: Pick<PoolClient, 'query'>, scope: IndexScope, name: string): Promise<BlobVersion | undefined> {
  const r = await tx.query(
    `select name, object_key, version, size, sha256, content_type from ${scope.table} where ${scopeWhere(scope)} and name = $${scope.columns.length + 1}`,
    [...scope.values, name],
  );
  return r.rowCount ? rowToVersion(r.rows[0]) : undefined;
}

/** The current versions of these names (names without a row are absent from the answer). */
export async function indexRowsNamed(db: Pick<PoolClient, 'query'>, scope: IndexScope, names: readonly string[]): Promise<BlobVersion[]> {
  if (names.length === 0) return [];
  const r = await db.query(
    `select name, object_key, version, size, sha256, content_type from ${scope.table} where ${scopeWhere(scope)} and name = any($${scope.columns.length + 1}::text[])`,
    [...scope.values, names],
  );
  return r.rows.map(rowToVersion);
}

/** Removes the blob's row; its object stays for the collector. True when there was one. */
export async function deleteIndexRow(tx: Pick<PoolClient, 'query'>, scope: IndexScope, name: string): Promise<boolean> {
  const r = await tx.query(`delete from ${scope.table} where ${scopeWhere(scope)} and name = $${scope.columns.length + 1}`, [...scope.values, name]);
  return (r.rowCount ?? 0) > 0;
}

/** Every object key a committed row of the scope names (as the transaction sees them). */
export async function referencedKeys(tx: Pick<PoolClient, 'query'>, scope: IndexScope): Promise<Set<string>> {
  const r = await tx.query<{ object_key: string }>(`select object_key from ${scope.table} where ${scopeWhere(scope)}`, scope.values);
  return new Set(r.rows.map((x) => x.object_key));
}

/**
 * What the index recorded at write time of each version object it names for the unit (object key
 * -> sha256 and size): a copy of one of these need not read the source to learn its hash, and a
 * version object it does not name is no blob's. Undefined on a shard without the index (nothing
 * can be told of its objects).
 */
export async function indexedObjectHashes(
  db: Pick<PoolClient, 'query'>,
  scope: IndexScope,
): Promise<Map<string, { sha256: string; size: number }> | undefined> {
  if (!(await hasBlobIndex(db, scope.table))) return undefined;
  const r = await db.query(`select object_key, sha256, size from ${scope.table} where ${scopeWhere(scope)}`, scope.values);
  return new Map(r.rows.map((x) => [x.object_key as string, { sha256: x.sha256 as string, size: Number(x.size) }]));
}

/** Whether the shard has the index table (prepared by this shardctl; a dataset's, once prepared with the dataset). */
export async function hasBlobIndex(db: Pick<PoolClient, 'query'>, table = BLOB_INDEX_QUALIFIED): Promise<boolean> {
  const r = await db.query(`select to_regclass($1) is not null as ok`, [table]);
  return r.rows[0].ok === true;
}

export function missingIndex(shard: string, table = BLOB_INDEX_QUALIFIED): ShardctlError {
  return new ShardctlError('ConfigError', `shard ${shard} has no ${table}: run \`shardctl shards prepare --shard ${shard}\``, { shard });
}
