// Row-by-row validation of a unit between two shards (DESIGN.md §4 step 4): every row, every
// column (generated ones included, as the target recomputed them), both directions. Each side
// is read through a server-side cursor in one REPEATABLE READ snapshot, in a key order both
// servers produce identically (keys.ts), and merge-joined here (merge.ts). Values are compared
// by their text output under pinned output settings, so numeric 1.0 and 1.00 differ, as do
// jsonb, arrays, timestamps (rendered in UTC) and bytea (hex) byte for byte.
import type { Pool, PoolClient } from 'pg';
import type { TenantTable } from '../shard/tables';
import { quoteIdent } from '../shard/tables';
import { validateTenantId } from '../ids';
import { invalidInput } from '../errors';
import { STABLE_TEXT_SETTINGS_SQL } from '../copy/sql';
import { KeyColumn, keyComparator, keyOrderFor, orderExpression } from './keys';
import { KeyedRow, MergeResult, mergeCompare } from './merge';

export interface TableValidation extends MergeResult {
  /** `schema.table` */
  table: string;
}

export interface TenantValidation {
  ok: boolean;
  unit: string;
  tables: TableValidation[];
}

export interface CompareInput {
  source: Pool;
  target: Pool;
  table: TenantTable;
  tenantColumn: string;
  unit: string;
  /** Mismatches listed per kind (all are counted). Default 20. */
  maxReport?: number;
}

/** Rows per FETCH adapt to keep each round trip near this many bytes (TOASTed values are large). */
const FETCH_TARGET_BYTES = 8 * 1024 * 1024;

export async function compareTenantRows(input: CompareInput): Promise<TableValidation> {
  const { table, tenantColumn, unit } = input;
  validateTenantId(unit);
  if (!table.primaryKey.includes(tenantColumn)) throw invalidInput(`${table.qualified} primary key does not include ${tenantColumn}`);
  const keyCols: KeyColumn[] = table.primaryKey.map((name) => {
    const type = table.columns.find((c) => c.name === name)?.type ?? 'text';
    return { name, type, order: keyOrderFor(type) };
  });
  const columns = table.columns.map((c) => c.name);
  const tenantType = table.columns.find((c) => c.name === tenantColumn)!.type;
  // The tenant column is constant under the filter, so it is left out of the ORDER BY.
  const orderBy = keyCols.filter((k) => k.name !== tenantColumn).map((k) => orderExpression(k, 'r'));
  const sql =
    `select ${[...keyCols.map((k) => `r.${quoteIdent(k.name)}::text`), ...columns.map((c) => `r.${quoteIdent(c)}::text`)].join(', ')}` +
    ` from ${table.qualified} r where r.${quoteIdent(tenantColumn)} = $1::${tenantType}` +
    (orderBy.length ? ` order by ${orderBy.join(', ')}` : '');

  const [src, tgt] = await Promise.all([input.source.connect(), input.target.connect()]);
  let broken: Error | undefined;
  try {
    const res = await mergeCompare(readSide(src, sql, unit, keyCols.length), readSide(tgt, sql, unit, keyCols.length), {
      columns,
      compareKeys: keyComparator(keyCols),
      maxReport: input.maxReport ?? 20,
    });
    return { table: `${table.schema}.${table.name}`, ...res };
  } catch (err) {
    broken = err as Error;
    throw err;
  } finally {
    // On success each side has committed its read-only snapshot; on failure drop the connections.
    for (const c of [src, tgt]) c.release(broken);
  }
}

async function* readSide(c: PoolClient, sql: string, unit: string, keyWidth: number): AsyncGenerator<KeyedRow> {
  await c.query('begin isolation level repeatable read read only');
  await c.query(STABLE_TEXT_SETTINGS_SQL);
  await c.query(`declare shardctl_validate no scroll cursor for ${sql}`, [unit]);
  let fetch = 500;
  for (;;) {
    const r = await c.query({ text: `fetch ${fetch} from shardctl_validate`, rowMode: 'array' });
    let bytes = 0;
    for (const row of r.rows as (string | null)[][]) {
      for (const v of row) if (v !== null) bytes += v.length;
      yield { key: row.slice(0, keyWidth) as string[], values: row.slice(keyWidth) };
    }
    if (r.rows.length < fetch) break;
    fetch = Math.max(10, Math.min(5000, Math.floor((fetch * FETCH_TARGET_BYTES) / Math.max(bytes, 1))));
  }
  await c.query('commit');
}

export async function validateTenant(input: Omit<CompareInput, 'table'> & { tables: TenantTable[] }): Promise<TenantValidation> {
  const { tables, ...rest } = input;
  const out: TableValidation[] = [];
  for (const table of tables) out.push(await compareTenantRows({ ...rest, table }));
  const ok = out.every((t) => t.missingCount === 0 && t.extraCount === 0 && t.differentCount === 0);
  return { ok, unit: input.unit, tables: out };
}
