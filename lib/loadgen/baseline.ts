// The whole unit, not only loadgen's keys: a baseline of a tenant taken on its owner before the
// load starts (every seeded row, as per-table count + md5, and every object with its sha256),
// checked against the current owner after the load. Rows with keys in the loadgen log are
// judged per key by verify.ts; every other row must be exactly the baseline's (so a lost,
// damaged or stray row shows as a count or hash difference), every baseline object must be on
// the owner with its content, and no object may be there that neither the baseline nor the
// log explains. Writes made outside loadgen can be declared with `addAcked` and must all exist.
// Blobs written through the index: the index rows of loadgen's names are judged by verify.ts, and
// every version object of those names is explained (superseded ones stay until the collector).
import type { Pool } from 'pg';
import type { S3Client } from '@aws-sdk/client-s3';
import type { Config } from '../config';
import { shardByName } from '../config';
import { listTenantTables, quoteIdent, tenantTableSelector, TenantTable } from '../shard/tables';
import { tenantBlobPrefix } from '../blobs/prefix';
import { manifestOf } from '../blobs/hash';
import { listBlobs } from '../blobs/list';
import { LOAD_TABLES, LogRecord } from './log';
import { currentPlacements } from './route';
import { STABLE_TEXT_SETTINGS_SQL } from '../copy/sql';
import { BLOB_INDEX_SCHEMA, BLOB_INDEX_TABLE, isVersionKey } from '../blobs/index-table';
import { blobNameOf } from '../blobs/fenced';

export interface TableBaseline {
  table: string;
  rows: number;
  md5: string;
}

export interface UnitBaseline {
  tenant: string;
  /** The owner the baseline was read from. */
  shard: string;
  tables: TableBaseline[];
  blobs: { key: string; sha256: string }[];
  /** Acknowledged writes made outside loadgen after the baseline: `schema.table` -> ids (must all exist). */
  acked: Record<string, string[]>;
}

export interface UnitFinding {
  tenant: string;
  shard: string;
  what: string;
}

const isLoadTable = (t: TenantTable) => t.schema === 'public' && (LOAD_TABLES as readonly string[]).includes(t.name);
const qualified = (t: TenantTable) => `${t.schema}.${t.name}`;

/** Loadgen's keys in `t` and the column holding them: the demo tables' ids, the blob index's names. */
function loggedKeys(t: TenantTable, tenant: string, mine: LogRecord[]): { column: string; keys: string[] } {
  if (isLoadTable(t)) return { column: 'id', keys: [...new Set(mine.filter((r) => `public.${r.table}` === qualified(t)).map((r) => r.key))] };
  if (t.schema === BLOB_INDEX_SCHEMA && t.name === BLOB_INDEX_TABLE)
    return { column: 'name', keys: [...new Set(mine.filter((r) => r.indexed && r.blobKey).map((r) => blobNameOf(tenant, r.blobKey!)))] };
  return { column: 'id', keys: [] };
}

/** Count and md5 of the unit's rows in `t` whose `keyColumn` is not in `exclude` (whole row text, key order). */
async function fingerprintExcept(
  pool: Pool,
  t: TenantTable,
  tenantColumn: string,
  tenant: string,
  exclude: string[],
  keyColumn = 'id',
): Promise<{ rows: number; md5: string }> {
  const order = t.primaryKey.map((c) => `x.${quoteIdent(c)}::text collate "C"`).join(', ');
  const skip = exclude.length ? ` and not (x.${quoteIdent(keyColumn)}::text = any($2::text[]))` : '';
  // Row text depends on the session (DateStyle, TimeZone, extra_float_digits, ...): the baseline
  // and the check may read two shards whose servers differ, so both pin the copy's settings.
  const c = await pool.connect();
  try {
    await c.query(`begin transaction read only; ${STABLE_TEXT_SETTINGS_SQL}`);
    const r = await c.query(
      `select count(*)::bigint as n, coalesce(md5(string_agg((x.*)::text, E'\\n' order by ${order})), '') as h
         from ${t.qualified} x where x.${quoteIdent(tenantColumn)} = $1${skip}`,
      exclude.length ? [tenant, exclude] : [tenant],
    );
    await c.query('commit');
    return { rows: Number(r.rows[0].n), md5: r.rows[0].h };
  } catch (e) {
    await c.query('rollback').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
}

async function unitTables(config: Config, pool: Pool): Promise<TenantTable[]> {
  const t = config.tenant;
  return listTenantTables(pool, tenantTableSelector(t));
}

/** Reads the baseline of `tenant` on its current owner. Take it while nothing writes the tenant. */
export async function snapshotUnit(o: {
  config: Config;
  tenant: string;
  directory: Pool;
  shardPool: (s: string) => Pool;
  s3For: (s: string) => S3Client;
}): Promise<UnitBaseline> {
  const owner = (await currentPlacements(o.directory, [o.tenant])).get(o.tenant)!;
  const pool = o.shardPool(owner.shard);
  const tables = await unitTables(o.config, pool);
  const fps = await Promise.all(
    tables.map(async (t) => ({ table: qualified(t), ...(await fingerprintExcept(pool, t, o.config.tenant.column, o.tenant, [])) })),
  );
  const blobs = await manifestOf(o.s3For(owner.shard), shardByName(o.config, owner.shard).bucket, tenantBlobPrefix(o.tenant));
  return { tenant: o.tenant, shard: owner.shard, tables: fps, blobs: blobs.map((b) => ({ key: b.key, sha256: b.sha256 })), acked: {} };
}

/** Declares acknowledged writes made outside loadgen (e.g. a burst of inserts) that must survive. */
export function addAcked(b: UnitBaseline, table: string, ids: string[]): void {
  (b.acked[table] ??= []).push(...ids);
}

/** Checks the unit on `shard` (its current owner) against its baseline and the loadgen log. */
export async function checkUnit(o: {
  config: Config;
  baseline: UnitBaseline;
  records: LogRecord[];
  shard: string;
  pool: Pool;
  s3: S3Client;
}): Promise<{ findings: UnitFinding[]; ownerRows: Record<string, number> }> {
  const { baseline: b, shard } = o;
  const tenant = b.tenant;
  const col = o.config.tenant.column;
  const findings: UnitFinding[] = [];
  const note = (what: string) => findings.push({ tenant, shard, what });
  const mine = o.records.filter((r) => r.tenant === tenant);
  const tables = await unitTables(o.config, o.pool);
  const ownerRows: Record<string, number> = {};
  for (const t of tables) {
    const name = qualified(t);
    const want = b.tables.find((x) => x.table === name);
    if (!want) {
      note(`${name}: a table the baseline does not know`);
      continue;
    }
    const acked = b.acked[name] ?? [];
    const logged = loggedKeys(t, tenant, mine);
    if (logged.keys.length && !t.columns.some((c) => c.name === logged.column)) throw new Error(`${name} has loadgen keys but no ${logged.column} column`);
    const rest = await fingerprintExcept(o.pool, t, col, tenant, [...logged.keys, ...acked], logged.column);
    if (rest.rows !== want.rows) note(`${name}: ${rest.rows} rows outside loadgen's keys on ${shard}, the baseline had ${want.rows}`);
    else if (rest.md5 !== want.md5) note(`${name}: the ${want.rows} baseline rows differ in content on ${shard}`);
    if (acked.length) {
      const r = await o.pool.query(`select count(*)::int as n from ${t.qualified} where ${quoteIdent(col)} = $1 and id::text = any($2::text[])`, [
        tenant,
        acked,
      ]);
      if (r.rows[0].n !== new Set(acked).size)
        note(`${name}: ${new Set(acked).size - r.rows[0].n} of ${new Set(acked).size} acknowledged writes made outside loadgen are missing on ${shard}`);
    }
    const all = await o.pool.query(`select count(*)::int as n from ${t.qualified} where ${quoteIdent(col)} = $1`, [tenant]);
    ownerRows[name] = all.rows[0].n;
  }
  const bucket = shardByName(o.config, shard).bucket;
  const present = await manifestOf(o.s3, bucket, tenantBlobPrefix(tenant));
  const byKey = new Map(present.map((e) => [e.key, e.sha256]));
  for (const x of b.blobs) {
    const sha = byKey.get(x.key);
    if (sha === undefined) note(`baseline object ${x.key} is missing from ${bucket}`);
    else if (sha !== x.sha256) note(`baseline object ${x.key} has other content in ${bucket}`);
  }
  // Any object must be explained: the baseline's, or one loadgen tried to put (a refused or
  // unknown put may leave its object behind, unreferenced; that is garbage, not a wrong write).
  const explained = new Set([...b.blobs.map((x) => x.key), ...mine.filter((r) => r.blobKey).map((r) => r.blobKey!)]);
  const indexedNames = new Set(mine.filter((r) => r.indexed && r.blobKey).map((r) => r.blobKey!));
  const isExplained = (key: string) => explained.has(key) || (isVersionKey(key) && indexedNames.has(key.slice(0, key.lastIndexOf('@'))));
  const stray = present.filter((e) => !isExplained(e.key)).map((e) => e.key);
  if (stray.length) note(`${stray.length} objects in ${bucket} neither seeded nor written by loadgen, e.g. ${stray[0]}`);
  // Objects loadgen deleted (acknowledged, object delete confirmed) must stay deleted.
  const deleted = mine.filter((r) => r.op === 'blob_delete' && r.status === 'ack' && r.objectDeleted === true && r.blobKey).map((r) => r.blobKey!);
  const back = deleted.filter((k) => byKey.has(k));
  if (back.length) note(`${back.length} objects loadgen deleted are in ${bucket} again, e.g. ${back[0]}`);
  return { findings, ownerRows };
}

/** Everything of the unit on a shard that does not own it: rows, objects, blob ledger rows, manifest rows of a move. */
export async function unitLeftovers(o: { config: Config; tenant: string; pool: Pool; s3: S3Client; bucket: string; moveIds?: string[] }): Promise<string[]> {
  const out: string[] = [];
  for (const t of await unitTables(o.config, o.pool)) {
    const r = await o.pool.query(`select count(*)::int as n from ${t.qualified} where ${quoteIdent(o.config.tenant.column)} = $1`, [o.tenant]);
    if (r.rows[0].n) out.push(`${qualified(t)}: ${r.rows[0].n} rows`);
  }
  const objects = await listBlobs(o.s3, o.bucket, tenantBlobPrefix(o.tenant));
  if (objects.length) out.push(`${objects.length} objects under ${o.bucket}/${tenantBlobPrefix(o.tenant)}`);
  const ledger = await o.pool.query(`select count(*)::int as n from shardctl.blob_ledger where unit = $1`, [o.tenant]).catch((e) => {
    if (e?.code === '42P01') return { rows: [{ n: 0 }] }; // no ledger table on this shard: nothing recorded
    throw e;
  });
  if (ledger.rows[0].n) out.push(`${ledger.rows[0].n} blob ledger rows`);
  if (o.moveIds?.length) {
    const m = await o.pool.query(`select count(*)::int as n from shardctl.blob_manifest where move_id = any($1)`, [o.moveIds]).catch((e) => {
      if (e?.code === '42P01') return { rows: [{ n: 0 }] }; // no manifest table on this shard: nothing recorded
      throw e;
    });
    if (m.rows[0].n) out.push(`${m.rows[0].n} blob manifest rows`);
    const p = await o.pool.query(`select count(*)::int as n from shardctl.move_progress where move_id = any($1)`, [o.moveIds]);
    if (p.rows[0].n) out.push(`${p.rows[0].n} move progress rows`);
  }
  return out;
}
