// Validation of a unit between two shards (DESIGN.md §4 step 4): every row, every column
// (generated ones included, as the target recomputed them), both directions. Each side works in
// one REPEATABLE READ snapshot per table. The unit's rows are split into primary-key ranges
// (boundaries read off the source's key index, chunks.ts); both sides hash every range in the
// database at once, and only ranges whose count or hash differ are read through server-side
// cursors, in a key order both servers produce identically (keys.ts), and merge-joined here
// (merge.ts) into the exact report. Values are compared by their text output under pinned output
// settings, so numeric 1.0 and 1.00 differ, as do jsonb, arrays, timestamps (rendered in UTC) and
// bytea (hex) byte for byte; the range hashes hash that same text.
import type { Pool, PoolClient } from 'pg';
import type { TenantTable } from '../shard/tables';
import { validateTenantId } from '../ids';
import { invalidInput } from '../errors';
import { STABLE_TEXT_SETTINGS_SQL } from '../copy/sql';
import { keyComparator } from './keys';
import { KeyedRow, MergeResult, mergeCompare } from './merge';
import { KeyRange, chunkSql, keyColumns, rangeColumns, rangesFrom } from './chunks';

export interface TableValidation extends MergeResult {
  /** `schema.table` */
  table: string;
  /** Key ranges hashed on both sides, and those read row by row because they differed. */
  ranges?: { hashed: number; read: number };
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
  /** Source rows per hashed key range. Default 20,000. */
  chunkRows?: number;
}

export const DEFAULT_CHUNK_ROWS = 20_000;

/** Rows per FETCH adapt to keep each round trip near this many bytes (TOASTed values are large). */
const FETCH_TARGET_BYTES = 8 * 1024 * 1024;

/** The snapshot both reads of a side run in, with the pinned output settings, in one round trip. */
const OPEN_SNAPSHOT_SQL = `begin isolation level repeatable read read only; ${STABLE_TEXT_SETTINGS_SQL}`;

export async function compareTenantRows(input: CompareInput): Promise<TableValidation> {
  const { table, tenantColumn, unit } = input;
  validateTenantId(unit);
  if (!table.primaryKey.includes(tenantColumn)) throw invalidInput(`${table.qualified} primary key does not include ${tenantColumn}`);
  const chunkRows = Math.max(1, Math.trunc(input.chunkRows ?? DEFAULT_CHUNK_ROWS));
  const maxReport = input.maxReport ?? 20;
  const keys = keyColumns(table);
  const range = rangeColumns(table, tenantColumn);
  const sql = chunkSql(table, tenantColumn, unit, range);
  const columns = table.columns.map((c) => c.name);

  const [src, tgt] = await Promise.all([input.source.connect(), input.target.connect()]);
  let broken: Error | undefined;
  try {
    await Promise.all([src.query(OPEN_SNAPSHOT_SQL), tgt.query(OPEN_SNAPSHOT_SQL)]);
    const ranges = range ? rangesFrom(await boundaries(src, sql, chunkRows)) : [{ after: null, upTo: null }];
    const [srcHashes, tgtHashes] = await Promise.all([hashRanges(src, sql, ranges), hashRanges(tgt, sql, ranges)]);
    let read = 0;
    const res: MergeResult = { sourceRows: 0, targetRows: 0, missing: [], extra: [], different: [], missingCount: 0, extraCount: 0, differentCount: 0 };
    for (let i = 0; i < ranges.length; i++) {
      res.sourceRows += srcHashes[i].n;
      res.targetRows += tgtHashes[i].n;
      if (srcHashes[i].n === tgtHashes[i].n && srcHashes[i].h === tgtHashes[i].h) continue;
      read++;
      // Ranges are in key order, so the first maxReport listed are those a single merge would list.
      const q = sql.rows(ranges[i]);
      const d = await mergeCompare(readRows(src, q, keys.length), readRows(tgt, q, keys.length), {
        columns,
        compareKeys: keyComparator(keys),
        maxReport,
      });
      res.missing.push(...d.missing.slice(0, maxReport - res.missing.length));
      res.extra.push(...d.extra.slice(0, maxReport - res.extra.length));
      res.different.push(...d.different.slice(0, maxReport - res.different.length));
      res.missingCount += d.missingCount;
      res.extraCount += d.extraCount;
      res.differentCount += d.differentCount;
    }
    await Promise.all([src.query('commit'), tgt.query('commit')]);
    return { table: `${table.schema}.${table.name}`, ...res, ranges: { hashed: ranges.length, read } };
  } catch (err) {
    broken = err as Error;
    throw err;
  } finally {
    // On success each side has committed its read-only snapshot; on failure drop the connections.
    for (const c of [src, tgt]) c.release(broken);
  }
}

/** Every chunkRows-th key of the unit on the source, walking its primary key index (no sort, keys only). */
async function boundaries(c: PoolClient, sql: ReturnType<typeof chunkSql>, chunkRows: number): Promise<string[][]> {
  const out: string[][] = [];
  await c.query(`select set_config('enable_sort', 'off', true)`);
  for (let after: string[] | null = null; ;) {
    const q = sql.boundary(after, chunkRows - 1);
    const r = await c.query({ text: q.text, values: q.values, rowMode: 'array' });
    if (r.rows.length === 0) break;
    after = r.rows[0] as string[];
    out.push(after);
  }
  await c.query('set local enable_sort to default');
  return out;
}

async function hashRanges(c: PoolClient, sql: ReturnType<typeof chunkSql>, ranges: KeyRange[]): Promise<{ n: number; h: string }[]> {
  const out: { n: number; h: string }[] = [];
  for (const r of ranges) {
    const q = sql.hash(r);
    const res = await c.query(q.text, q.values);
    out.push({ n: Number(res.rows[0].n), h: res.rows[0].h as string });
  }
  return out;
}

async function* readRows(c: PoolClient, q: { text: string; values: unknown[] }, keyWidth: number): AsyncGenerator<KeyedRow> {
  await c.query(`declare shardctl_validate no scroll cursor for ${q.text}`, q.values);
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
  await c.query('close shardctl_validate');
}

export async function validateTenant(input: Omit<CompareInput, 'table'> & { tables: TenantTable[] }): Promise<TenantValidation> {
  const { tables, ...rest } = input;
  const out: TableValidation[] = [];
  for (const table of tables) out.push(await compareTenantRows({ ...rest, table }));
  const ok = out.every((t) => t.missingCount === 0 && t.extraCount === 0 && t.differentCount === 0);
  return { ok, unit: input.unit, tables: out };
}
