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
import { EqualRanges, KeyRange, chunkSql, fitsRangeColumns, gapsOf, keyColumns, rangeColumns, withEqual } from './chunks';
import { isConnectionError } from '../directory/db';

export interface TableValidation extends MergeResult {
  /** `schema.table` */
  table: string;
  /**
   * Key ranges hashed on both sides, and those read row by row because they differed; `retried`:
   * range comparisons redone on new sessions after a cut; `resumedRows`: source rows in ranges a
   * previous attempt had found equal (not compared again).
   */
  ranges?: { hashed: number; read: number; retried?: number; resumedRows?: number };
}

export interface TenantValidation {
  ok: boolean;
  unit: string;
  tables: TableValidation[];
}

/** What happened to one key range: equal, differs (read row by row), or cut (redone on new sessions). */
export interface RangeEvent {
  table: string;
  range: KeyRange;
  outcome: 'equal' | 'differs' | 'cut';
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
  /**
   * Ranges an earlier comparison found equal: only the rest is compared. Sound only while
   * something else covers what changed since (the cutover's delta, lib/cdc/delta.ts, started
   * before that comparison's first range).
   */
  resume?: EqualRanges;
  /** Called with the table's equal ranges each time a range is found equal. */
  onEqual?: (p: EqualRanges) => void;
  onRange?: (e: RangeEvent) => void;
  /**
   * A range whose comparison fails with a connection error is redone on new sessions, with half
   * the rows each time, up to this many times. Default 5.
   */
  reconnects?: number;
}

export const DEFAULT_CHUNK_ROWS = 20_000;
export const DEFAULT_RANGE_RECONNECTS = 5;

/** Rows per FETCH adapt to keep each round trip near this many bytes (TOASTed values are large). */
const FETCH_TARGET_BYTES = 8 * 1024 * 1024;

/** The snapshot both reads of a side run in, with the pinned output settings, in one round trip. */
const OPEN_SNAPSHOT_SQL = `begin isolation level repeatable read read only; ${STABLE_TEXT_SETTINGS_SQL}`;

/**
 * One session per side, each in its snapshot, opened on first use; a cut drops both and the next
 * use opens new ones (new snapshots: each range is compared within one, which is all a range
 * needs, see compareTenantRows).
 */
class SessionPair {
  private pair: { src: PoolClient; tgt: PoolClient } | undefined;
  constructor(
    private readonly source: Pool,
    private readonly target: Pool,
  ) {}

  async open(): Promise<{ src: PoolClient; tgt: PoolClient }> {
    if (this.pair) return this.pair;
    const got = await Promise.allSettled([this.source.connect(), this.target.connect()]);
    const failed = got.find((g): g is PromiseRejectedResult => g.status === 'rejected');
    if (failed) {
      for (const g of got) if (g.status === 'fulfilled') g.value.release(true);
      throw failed.reason;
    }
    const [src, tgt] = got.map((g) => (g as PromiseFulfilledResult<PoolClient>).value);
    this.pair = { src, tgt };
    await Promise.all([src.query(OPEN_SNAPSHOT_SQL), tgt.query(OPEN_SNAPSHOT_SQL)]);
    return this.pair;
  }

  /** Commits both read-only snapshots and returns the sessions. */
  async close(): Promise<void> {
    if (!this.pair) return;
    const { src, tgt } = this.pair;
    await Promise.all([src.query('commit'), tgt.query('commit')]);
    this.pair = undefined;
    src.release();
    tgt.release();
  }

  /** Discards both connections (after an error: one may be dead, or mid-query). */
  drop(err: Error): void {
    if (!this.pair) return;
    for (const c of [this.pair.src, this.pair.tgt]) c.release(err);
    this.pair = undefined;
  }
}

/**
 * Compares the unit's rows of one table range by range, in key order: a range's boundary, its
 * hashes on both sides and, if they differ, its rows, each range within one snapshot per side.
 * A range cut by a connection error is redone from its start on new sessions (new snapshots),
 * with half the rows, at most `reconnects` times; any other error ends the comparison. Ranges compared in different
 * snapshots are sound for the same reason the source and target snapshots need not agree: what
 * changes after a range was compared reaches the target through the stream, whose delta (started
 * before the first range) the cutover compares under the fence.
 */
export async function compareTenantRows(input: CompareInput): Promise<TableValidation> {
  const { table, tenantColumn, unit } = input;
  validateTenantId(unit);
  if (!table.primaryKey.includes(tenantColumn)) throw invalidInput(`${table.qualified} primary key does not include ${tenantColumn}`);
  const chunkRows = Math.max(1, Math.trunc(input.chunkRows ?? DEFAULT_CHUNK_ROWS));
  const maxReport = input.maxReport ?? 20;
  const reconnects = Math.max(0, Math.trunc(input.reconnects ?? DEFAULT_RANGE_RECONNECTS));
  const keys = keyColumns(table);
  const range = rangeColumns(table, tenantColumn);
  const sql = chunkSql(table, tenantColumn, unit, range);
  const columns = table.columns.map((c) => c.name);
  const name = `${table.schema}.${table.name}`;
  const cmp = keyComparator(range ?? []);

  const resumed = input.resume && fitsRangeColumns(input.resume.equal, range) ? input.resume : { equal: [], rows: 0 };
  let equal = resumed.equal;
  let equalRows = resumed.rows;
  const res: MergeResult = {
    sourceRows: equalRows,
    targetRows: equalRows,
    missing: [],
    extra: [],
    different: [],
    missingCount: 0,
    extraCount: 0,
    differentCount: 0,
  };
  let hashed = 0;
  let read = 0;
  let retried = 0;
  const sessions = new SessionPair(input.source, input.target);

  /** One range from `after`, ending at the next boundary or at `upTo`. */
  const compareRange = async (after: string[] | null, upTo: string[] | null, rows: number) => {
    const { src, tgt } = await sessions.open();
    let end = upTo;
    if (range) {
      const b = await boundary(src, sql.boundary(after, rows - 1, upTo));
      if (b) end = b;
    }
    const r: KeyRange = { after, upTo: end };
    const hq = sql.hash(r);
    const [s, t] = await Promise.all([hashOf(src, hq), hashOf(tgt, hq)]);
    if (s.n === t.n && s.h === t.h) return { range: r, s, t };
    // Ranges are in key order, so the first maxReport listed are those a single merge would list.
    const q = sql.rows(r);
    const diff = await mergeCompare(readRows(src, q, keys.length), readRows(tgt, q, keys.length), {
      columns,
      compareKeys: keyComparator(keys),
      maxReport,
    });
    return { range: r, s, t, diff };
  };

  // A cut range is redone with half the rows (a link that closes every connection after so many
  // bytes cuts a differing range's row read at the same place each time); each range after one
  // that went through takes twice as many again, up to chunkRows.
  let rows = chunkRows;
  try {
    for (const gap of gapsOf(equal)) {
      for (let after = gap.after; ;) {
        let step: Awaited<ReturnType<typeof compareRange>>;
        for (let attempt = 0; ; attempt++) {
          try {
            step = await compareRange(after, gap.upTo, rows);
            break;
          } catch (err) {
            sessions.drop(err as Error);
            if (!isConnectionError(err) || attempt >= reconnects) throw err;
            retried++;
            input.onRange?.({ table: name, range: { after, upTo: gap.upTo }, outcome: 'cut' });
            rows = Math.max(1, Math.floor(rows / 2));
            await sleep(100 * (attempt + 1));
          }
        }
        rows = Math.min(chunkRows, rows * 2);
        hashed++;
        res.sourceRows += step.s.n;
        res.targetRows += step.t.n;
        const d = step.diff;
        if (!d) {
          equal = withEqual(equal, step.range, cmp);
          equalRows += step.s.n;
          input.onRange?.({ table: name, range: step.range, outcome: 'equal' });
          input.onEqual?.({ equal, rows: equalRows });
        } else {
          read++;
          input.onRange?.({ table: name, range: step.range, outcome: 'differs' });
          res.missing.push(...d.missing.slice(0, maxReport - res.missing.length));
          res.extra.push(...d.extra.slice(0, maxReport - res.extra.length));
          res.different.push(...d.different.slice(0, maxReport - res.different.length));
          res.missingCount += d.missingCount;
          res.extraCount += d.extraCount;
          res.differentCount += d.differentCount;
        }
        const end = step.range.upTo;
        if (end === null || (gap.upTo !== null && cmp(end, gap.upTo) >= 0)) break;
        after = end;
      }
    }
    await sessions.close();
  } catch (err) {
    sessions.drop(err as Error);
    throw err;
  }
  const ranges = { hashed, read, ...(retried ? { retried } : {}), ...(resumed.rows || resumed.equal.length ? { resumedRows: resumed.rows } : {}) };
  return { table: name, ...res, ranges };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The boundary key, walking the source's primary key index (no sort, keys only). */
async function boundary(c: PoolClient, q: { text: string; values: unknown[] }): Promise<string[] | null> {
  await c.query(`set local enable_sort = off`);
  const r = await c.query({ text: q.text, values: q.values, rowMode: 'array' });
  await c.query('set local enable_sort to default');
  return r.rows.length ? (r.rows[0] as string[]) : null;
}

async function hashOf(c: PoolClient, q: { text: string; values: unknown[] }): Promise<{ n: number; h: string }> {
  const res = await c.query(q.text, q.values);
  return { n: Number(res.rows[0].n), h: res.rows[0].h as string };
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

/** Per table (`schema.table`), the key ranges found equal so far: what a resumed validation skips. */
export type ValidationProgress = Record<string, EqualRanges>;

/**
 * Every table of the unit. With `progress`, ranges it records as equal are not compared again,
 * and each range found equal is added to it (then `onProgress` is told): a validation cut
 * short resumes from there.
 */
export async function validateTenant(
  input: Omit<CompareInput, 'table' | 'resume' | 'onEqual'> & {
    tables: TenantTable[];
    progress?: ValidationProgress;
    onProgress?: (p: ValidationProgress) => void;
  },
): Promise<TenantValidation> {
  const { tables, progress, onProgress, ...rest } = input;
  const out: TableValidation[] = [];
  for (const table of tables) {
    const name = `${table.schema}.${table.name}`;
    const onEqual = progress
      ? (p: EqualRanges) => {
          progress[name] = p;
          onProgress?.(progress);
        }
      : undefined;
    out.push(await compareTenantRows({ ...rest, table, resume: progress?.[name], onEqual }));
  }
  const ok = out.every((t) => t.missingCount === 0 && t.extraCount === 0 && t.differentCount === 0);
  return { ok, unit: input.unit, tables: out };
}
