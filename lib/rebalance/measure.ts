// What `rebalance plan` measures on the shards (issue 13): each unit's rows and bytes, and each
// shard's recent write rate. Read-only; one shard at a time, each on its own pool from the config
// (the allowlist: nothing else is connected to).
//
// Per unit, per table: `count(*)` and `sum(pg_column_size(x.*))` grouped by the unit (the tenant
// column, or a dataset's bucket unit). The scan is bounded: a table whose statistics
// (pg_class.reltuples) say it holds at most SAMPLE_ROWS rows is read through a `limit
// SAMPLE_ROWS + 1` subquery, which is exact when the limit is not reached; a bigger one (or one
// that reaches the limit) is read through `TABLESAMPLE SYSTEM (p)` (p % of its blocks, p chosen
// for about SAMPLE_ROWS rows from its estimated rows), and the counts scaled by 100 / p.
// A unit's bytes are the table's on-disk size (pg_total_relation_size: heap, indexes, TOAST)
// times its share of the table's row bytes: indexes and free space are attributed pro rata.
// Writes per shard: two samples of pg_stat_user_tables' n_tup_ins + n_tup_upd + n_tup_del,
// `windowMs` apart. Writes per unit (Postgres counts per table, not per row's unit): the rows whose
// current version a transaction of the window wrote. The window opens at the next transaction id
// to be assigned (`pg_snapshot_xmax(pg_current_snapshot())`, which assigns none) and closes, after
// `windowMs`, at the next one again; the scan that counts rows and bytes (run after the window, so
// it costs no extra pass) also counts, per unit, the rows whose `xmin` lies in [open, close), in
// 32-bit xid arithmetic modulo 2^32 (xmin is a 32-bit xid). Nothing is added to any write. What it
// sees: each row inserted or updated in the window, once however often (its latest version), by a
// transaction with its id assigned in the window and committed by the scan; not deletes, not a
// row rewritten again after the window closed (its xmin is newer), not a transaction that took its
// id before the window opened. So it is a floor of the unit's row writes, in the same scale for
// every unit (sampled tables scaled by 100 / p like the rows). An xid 2^32 ids older that wrapped
// into the window's range would be counted: a frozen row that old sits beside ~4 billion newer ids.
// A split tenant's rows count for their sub-unit (`T:k`, by the fence's own index expression,
// lib/shard/split-sql.ts, with the directory's K), rows, bytes and writes alike, so a hot sub-unit
// is seen as hot and its siblings as they are (a row whose split column is NULL counts for `T:`,
// which names no unit).
import type { Pool } from 'pg';
import type { Config } from '../config';
import { listTenantTables, quoteIdent, tenantTableSelector, type TenantTable } from '../shard/tables';
import { bucketUnitSqlExpr, datasetTables } from '../unit-rows';
import { splitIndexSql } from '../shard/split-sql';

/** Rows read per table at most before sampling takes over. */
export const SAMPLE_ROWS = 100_000;

export interface UnitSize {
  rows: number;
  bytes: number;
  /** Rows written per second over the window (see the module comment); absent without a window. */
  writesPerSecond?: number;
}

export interface ShardMeasurement {
  shard: string;
  /** Per unit found on the shard (by its rows): rows and bytes summed over its tables. */
  units: Map<string, UnitSize>;
  /** Tables read in full (exact) and through a sample (estimates). */
  exactTables: string[];
  sampledTables: { table: string; percent: number }[];
  /** Inserts, updates and deletes per second over the window, all tenant tables; null without a window. */
  writesPerSecond: number | null;
  /** Set when the shard could not be measured (the directory's expected load stands). */
  error?: string;
}

interface TableStats {
  reltuples: number;
  totalBytes: number;
  /** The heap alone (pg_relation_size): what a block sample draws from. */
  heapBytes: number;
}

async function tableStats(pool: Pool, t: TenantTable): Promise<TableStats> {
  const r = await pool.query(
    `select greatest(c.reltuples, 0)::float8 as reltuples, c.reltuples < 0 as unknown, pg_total_relation_size(c.oid)::text as bytes,
            pg_relation_size(c.oid)::text as heap
       from pg_class c where c.oid = to_regclass($1)`,
    [t.qualified],
  );
  const x = r.rows[0];
  // Never analyzed (reltuples -1): unknown, so the bounded read finds out.
  return { reltuples: x?.unknown ? 0 : Number(x?.reltuples ?? 0), totalBytes: Number(x?.bytes ?? 0), heapBytes: Number(x?.heap ?? 0) };
}

/** Rows and row bytes per unit in one table: exact under the bound, a scaled sample over it. */
async function measureTable(
  pool: Pool,
  t: TenantTable,
  unitExpr: string,
  sampleRows: number,
  win?: XidWindow,
): Promise<{ units: Map<string, { rows: number; rowBytes: number; written: number }>; percent: number | null; totalBytes: number }> {
  const st = await tableStats(pool, t);
  // Each row's size and whether a transaction of the window wrote it (xmin in [open, close)
  // modulo 2^32; false without a window), taken where x is the table itself (a subquery's `*`
  // carries no system column), then grouped by the unit.
  const written = win
    ? `((x.xmin::text::int8 - ${win.open}) % 4294967296 + 4294967296) % 4294967296 < ${(((win.close - win.open) % 2 ** 32) + 2 ** 32) % 2 ** 32}`
    : 'false';
  const rows = (from: string, limit = '') => `(select x.*, pg_column_size(x.*) as shardctl__bytes, ${written} as shardctl__written from ${from}${limit}) x`;
  const group = (from: string) =>
    `select ${unitExpr} as unit, count(*)::float8 as n, coalesce(sum(x.shardctl__bytes), 0)::float8 as b, ` +
    `count(*) filter (where x.shardctl__written)::float8 as w from ${from} group by 1`;
  const collect = (rows: any[], scale: number) =>
    new Map(rows.map((r) => [String(r.unit), { rows: r.n * scale, rowBytes: r.b * scale, written: Number(r.w) * scale }]));
  let estimated = st.reltuples;
  if (st.reltuples <= sampleRows) {
    const r = await pool.query(group(rows(`${t.qualified} x`, ` limit ${sampleRows + 1}`)));
    const seen = r.rows.reduce((a, x) => a + Number(x.n), 0);
    if (seen <= sampleRows) return { units: collect(r.rows, 1), percent: null, totalBytes: st.totalBytes };
    // Statistics stale or missing: rows estimated from the heap's size and the rows just read.
    const avgRow = r.rows.reduce((a, x) => a + Number(x.b), 0) / seen + 4;
    estimated = Math.max(seen, st.heapBytes / avgRow);
  }
  // Too big to read whole: a block sample of p % of the heap sized for about sampleRows rows,
  // each row found standing for 100 / p rows.
  const percent = Math.min(100, Math.max(0.0001, (100 * sampleRows) / estimated));
  // The sample's rows are the table's whole rows (x.*), xmin included: a block sample reads heap tuples.
  const r = await pool.query(group(rows(`${t.qualified} x tablesample system (${percent.toFixed(6)})`)));
  return { units: collect(r.rows, 100 / percent), percent, totalBytes: st.totalBytes };
}

/** A window of transaction ids, 32-bit (what a row's xmin holds): [open, close). */
interface XidWindow {
  open: number;
  close: number;
}

/** The next transaction id to be assigned, as a 32-bit xid (assigns none). */
async function nextXid32(pool: Pool): Promise<number> {
  const r = await pool.query(`select (pg_snapshot_xmax(pg_current_snapshot())::text::int8 % 4294967296)::int8::text as x`);
  return Number(r.rows[0].x);
}

async function writeCounter(pool: Pool, tables: string[]): Promise<number> {
  const r = await pool.query(
    `select coalesce(sum(st.n_tup_ins + st.n_tup_upd + st.n_tup_del), 0)::text as writes
       from unnest($1::text[]) as t(name) join pg_stat_user_tables st on st.relid = to_regclass(t.name)`,
    [tables],
  );
  return Number(r.rows[0].writes);
}

/** Measures one shard's units and write rate; an error is returned in the result, never thrown. */
export async function measureShard(
  pool: Pool,
  config: Config,
  shard: string,
  opts: { sampleRows?: number; windowMs?: number; splits?: ReadonlyMap<string, number> } = {},
): Promise<ShardMeasurement> {
  const sampleRows = opts.sampleRows ?? SAMPLE_ROWS;
  const out: ShardMeasurement = { shard, units: new Map(), exactTables: [], sampledTables: [], writesPerSecond: null };
  try {
    const tables: { t: TenantTable; expr: string }[] = (await listTenantTables(pool, tenantTableSelector(config.tenant))).map((t) => ({
      t,
      expr: tenantUnitExpr(config.tenant.column, config.tenant.splitColumns?.[`${t.schema}.${t.name}`], opts.splits),
    }));
    for (const ds of config.datasets) {
      for (const t of await listTenantTables(pool, datasetTables(config, ds)).catch(() => [])) tables.push({ t, expr: bucketUnitSqlExpr(ds, 'x') });
    }
    const names = tables.map((x) => x.t.qualified);
    // The window first, then the scan: the scan counts each unit's rows written in the window.
    let win: XidWindow | undefined;
    let windowSeconds = 0;
    if (opts.windowMs) {
      const open = await nextXid32(pool);
      const before = await writeCounter(pool, names);
      const started = Date.now();
      await new Promise((r) => setTimeout(r, opts.windowMs));
      const after = await writeCounter(pool, names);
      win = { open, close: await nextXid32(pool) };
      const elapsed = Math.max(opts.windowMs, Date.now() - started);
      windowSeconds = elapsed / 1000;
      out.writesPerSecond = Math.max(0, Math.round(((after - before) * 1000) / elapsed));
    }
    for (const { t, expr } of tables) {
      const m = await measureTable(pool, t, expr, sampleRows, win);
      if (m.percent === null) out.exactTables.push(t.qualified);
      else out.sampledTables.push({ table: t.qualified, percent: m.percent });
      const rowBytes = [...m.units.values()].reduce((a, x) => a + x.rowBytes, 0);
      for (const [unit, x] of m.units) {
        const prev = out.units.get(unit) ?? { rows: 0, bytes: 0, ...(win ? { writesPerSecond: 0 } : {}) };
        prev.rows += x.rows;
        if (win) prev.writesPerSecond! += x.written / windowSeconds;
        prev.bytes += rowBytes > 0 ? (m.totalBytes * x.rowBytes) / rowBytes : 0;
        out.units.set(unit, prev);
      }
    }
    for (const u of out.units.values()) {
      u.rows = Math.round(u.rows);
      u.bytes = Math.round(u.bytes);
      if (u.writesPerSecond !== undefined) u.writesPerSecond = Math.round(u.writesPerSecond * 10) / 10;
    }
  } catch (e: any) {
    out.error = e?.message ?? String(e);
  }
  return out;
}

/**
 * A tenant table's row unit over alias x: the tenant column, or for a split tenant (`splits`:
 * tenant → K) on a table with a split column `T:<the fence's sub-unit index with K a constant>`.
 */
export function tenantUnitExpr(tenantColumn: string, splitColumn: string | undefined, splits: ReadonlyMap<string, number> | undefined): string {
  const tenant = `(x.${quoteIdent(tenantColumn)})::text`;
  if (splitColumn === undefined || !splits?.size) return tenant;
  const arms = [...splits].map(([t, ways]) => {
    if (!Number.isInteger(ways) || ways < 2) throw new Error(`tenant ${t} is split ${ways} ways: no split`);
    const index = splitIndexSql(`x.${quoteIdent(splitColumn)}`, String(ways));
    return `when ${quoteLiteral(t)} then ${quoteLiteral(`${t}:`)} || coalesce((${index})::text, '')`;
  });
  return `(case ${tenant} ${arms.join(' ')} else ${tenant} end)`;
}

const quoteLiteral = (s: string) => `'${s.replace(/'/g, "''")}'`;
