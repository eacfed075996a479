// A per-table fingerprint of one unit's rows (count + md5 over the rows' text in primary-key
// order), computed in the database. Used inside the cutover window, where a full row-by-row
// comparison would stretch the write pause; the full comparison runs before the fence.
// Independent of each server's settings and physical column order: the row text is built from
// the columns named explicitly, in byte order of their names (the same list on both sides
// whichever catalog it came from), inside a read-only transaction under pinned output settings.
import type { Pool } from 'pg';
import type { TenantTable } from '../shard/tables';
import { quoteIdent } from '../shard/tables';
import { STABLE_TEXT_SETTINGS_SQL } from '../copy/sql';
import { compareUtf8 } from './keys';
import { subUnitClauseSql } from '../shard/split-sql';

export interface TableFingerprint {
  table: string;
  rows: number;
  md5: string;
}

/** The fingerprint query ($1 = unit): every column by name, in name order, never `x.*`. */
export function fingerprintSql(t: TenantTable, tenantColumn: string): string {
  // COLLATE "C" so text keys sort identically on both servers whatever their default collation.
  const order = t.primaryKey.map((c) => `x.${quoteIdent(c)}::text collate "C"`).join(', ');
  const columns = t.columns.map((c) => c.name).sort(compareUtf8);
  const row = `row(${columns.map((c) => `x.${quoteIdent(c)}`).join(', ')})::text`;
  return (
    `select count(*)::bigint as n, coalesce(md5(string_agg(${row}, E'\\n' order by ${order})), '') as h` +
    ` from ${t.qualified} x where x.${quoteIdent(tenantColumn)} = $1${subUnitClauseSql(t.split, 'x')}`
  );
}

/**
 * The delta fingerprint query ($1 = unit, $2 = keys as JSON arrays of the key columns' text): the
 * count and md5 of only the rows at those keys, each key cast to its column's type exactly as the
 * applier wrote it. Never a scan of the unit, whatever the planner believes: the keys drive a
 * nested loop of primary-key lookups (a LATERAL subquery behind OFFSET 0, so it is not flattened
 * into a join the planner may reorder). The `IN (keys)` form this replaces let a target fresh from
 * the copy, whose statistics still said the unit had no rows there, scan all of the unit's rows and
 * re-parse every key for each (6.6 s for 110 keys of 30k rows): the first cutover attempt after a
 * copy overran its fence budget on every size from 100k rows up.
 */
export function fingerprintKeysSql(t: TenantTable, tenantColumn: string): string {
  const order = t.primaryKey.map((c) => `x.${quoteIdent(c)}::text collate "C"`).join(', ');
  const columns = t.columns.map((c) => c.name).sort(compareUtf8);
  const row = `row(${columns.map((c) => `x.${quoteIdent(c)}`).join(', ')})::text`;
  const typeOf = (name: string) => t.columns.find((c) => c.name === name)?.type ?? 'text';
  const keyVals = t.primaryKey.map((c, i) => `(u::jsonb->>${i})::${typeOf(c)} as k${i}`).join(', ');
  const match = t.primaryKey.map((c, i) => `x.${quoteIdent(c)} = k.k${i}`).join(' and ');
  const tc = `x.${quoteIdent(tenantColumn)}`;
  return (
    `select count(*)::bigint as n, coalesce(md5(string_agg(${row}, E'\\n' order by ${order})), '') as h` +
    ` from (select distinct ${keyVals} from unnest($2::text[]) u) k` +
    ` cross join lateral (select * from ${t.qualified} x where ${tc} = $1${subUnitClauseSql(t.split, 'x')} and ${match} offset 0) x`
  );
}

export async function fingerprintTable(pool: Pool, t: TenantTable, tenantColumn: string, unit: string, keys?: string[]): Promise<TableFingerprint> {
  // This runs inside the write pause: the transaction and its settings go in one round trip.
  const c = await pool.connect();
  let r;
  try {
    await c.query(`begin transaction read only; ${STABLE_TEXT_SETTINGS_SQL}`);
    r = keys ? await c.query(fingerprintKeysSql(t, tenantColumn), [unit, keys]) : await c.query(fingerprintSql(t, tenantColumn), [unit]);
    await c.query('commit');
  } catch (e) {
    await c.query('rollback').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
  return { table: `${t.schema}.${t.name}`, rows: Number(r.rows[0].n), md5: r.rows[0].h };
}

export async function fingerprintUnit(pool: Pool, tables: TenantTable[], tenantColumn: string, unit: string): Promise<TableFingerprint[]> {
  return Promise.all(tables.map((t) => fingerprintTable(pool, t, tenantColumn, unit)));
}

/**
 * Per table: the count and md5 of the unit's rows at the given keys only (`keys`: table
 * `schema.name` -> JSON key arrays; a table without keys is empty on both sides). Run on both
 * sides with the same keys, equal fingerprints mean the same rows at those keys.
 */
export async function fingerprintUnitKeys(
  pool: Pool,
  tables: TenantTable[],
  tenantColumn: string,
  unit: string,
  keys: Map<string, string[]>,
): Promise<TableFingerprint[]> {
  return Promise.all(
    tables.map((t) => {
      const table = `${t.schema}.${t.name}`;
      const at = keys.get(table) ?? [];
      // No keys: the rows at none of them are none, on either side; no connection or round trip spent on it inside the pause.
      return at.length ? fingerprintTable(pool, t, tenantColumn, unit, at) : Promise.resolve({ table, rows: 0, md5: '' });
    }),
  );
}

/** Human-readable differences between two fingerprints (empty when equal). */
export function fingerprintDiff(a: TableFingerprint[], b: TableFingerprint[]): string[] {
  const out: string[] = [];
  const bm = new Map(b.map((x) => [x.table, x]));
  for (const x of a) {
    const y = bm.get(x.table);
    if (!y) out.push(`${x.table}: missing on target`);
    else if (x.rows !== y.rows) out.push(`${x.table}: ${x.rows} rows on source vs ${y.rows} on target`);
    else if (x.md5 !== y.md5) out.push(`${x.table}: same row count (${x.rows}) but contents differ`);
  }
  return out;
}
