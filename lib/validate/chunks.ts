// SQL for chunked validation (compare.ts): a table's unit rows are split into primary-key ranges,
// each side hashes every range in the database, and only ranges whose (count, hash) differ are
// read row by row. Pure: no I/O. A range's membership must be decided identically on both
// servers, so only keys whose columns after the tenant column are integers or uuids (orders no
// collation or setting can change) are split; any other key is one range, the whole unit.
import type { TenantTable } from '../shard/tables';
import { quoteIdent } from '../shard/tables';
import { KeyColumn, compareUtf8, keyOrderFor, orderExpression } from './keys';
import { subUnitClauseSql } from '../shard/split-sql';

/** A primary-key range `(after, upTo]` of the range columns (null: open on that side). */
export interface KeyRange {
  after: string[] | null;
  upTo: string[] | null;
}

export interface ChunkSql {
  /** The unit's rows of the range: key columns' text, then every column's text, in key order. */
  rows: (r: KeyRange) => { text: string; values: unknown[] };
  /** One row: `n` (rows) and `h` (their hash, as text) of the range. */
  hash: (r: KeyRange) => { text: string; values: unknown[] };
  /**
   * The range columns' text of the key `offset` rows past `after`, at most `upTo` (none: the
   * range runs to `upTo`, or to the end).
   */
  boundary: (after: string[] | null, offset: number, upTo?: string[] | null) => { text: string; values: unknown[] };
}

export function keyColumns(table: TenantTable): KeyColumn[] {
  return table.primaryKey.map((name) => {
    const type = table.columns.find((c) => c.name === name)?.type ?? 'text';
    return { name, type, order: keyOrderFor(type) };
  });
}

/**
 * The key columns a unit's rows can be split by (every key column after the leading tenant
 * column), or null when the table is compared as one range: the tenant column is not the key's
 * first, or a later key column sorts by collation (text) or by a definition that could differ
 * between servers (enum, domain, ...).
 */
export function rangeColumns(table: TenantTable, tenantColumn: string): KeyColumn[] | null {
  const keys = keyColumns(table);
  if (keys.length < 2 || keys[0].name !== tenantColumn) return null;
  const rest = keys.slice(1);
  return rest.every((k) => k.order === 'int' || k.order === 'uuid') ? rest : null;
}

/**
 * The row hash: per column, a 64-bit hash of its text under a seed of its own (its place in
 * byte order of the names, the same list on both sides whichever catalog it came from), NULL a
 * constant of its own; xor'd and mixed again, so values cannot trade places between columns or
 * rows unseen. A range's hash is the bit_xor of its rows' hashes (order-independent: no sort)
 * plus the row count. Keys are unique, so no two rows of a side can cancel out. Hashes are
 * hashtextextended under COLLATE "C" (bytes, whatever the database collation); should two
 * platforms ever hash differently, every range differs and is read row by row: slower, still exact.
 */
export function rowHashExpression(table: TenantTable, alias: string): string {
  const names = table.columns.map((c) => c.name).sort(compareUtf8);
  const parts = names.map((c, i) => `coalesce(hashtextextended((${alias}.${quoteIdent(c)}::text) collate "C", ${i + 1}), ${-(i + 1)})`);
  return `hashint8extended(${parts.join(' # ')}, 0)`;
}

export function chunkSql(table: TenantTable, tenantColumn: string, unit: string, range: KeyColumn[] | null): ChunkSql {
  const keys = keyColumns(table);
  const tenantType = table.columns.find((c) => c.name === tenantColumn)!.type;
  const columns = table.columns.map((c) => c.name);
  const cols = range ?? [];
  const tuple = (alias: string) => `(${cols.map((k) => `${alias}.${quoteIdent(k.name)}`).join(', ')})`;
  const params = (from: number) => `(${cols.map((k, i) => `$${from + i}::${k.type}`).join(', ')})`;
  const where = (r: KeyRange) => {
    const values: unknown[] = [unit];
    let sql = `r.${quoteIdent(tenantColumn)} = $1::${tenantType}${subUnitClauseSql(table.split, 'r')}`;
    if (r.after) {
      sql += ` and ${tuple('r')} > ${params(values.length + 1)}`;
      values.push(...r.after);
    }
    if (r.upTo) {
      sql += ` and ${tuple('r')} <= ${params(values.length + 1)}`;
      values.push(...r.upTo);
    }
    return { sql, values };
  };
  // The tenant column is constant under the filter, so it is left out of the ORDER BY.
  const orderBy = keys.filter((k) => k.name !== tenantColumn).map((k) => orderExpression(k, 'r'));
  const order = orderBy.length ? ` order by ${orderBy.join(', ')}` : '';
  return {
    rows: (r) => {
      const w = where(r);
      const select = [...keys.map((k) => `r.${quoteIdent(k.name)}::text`), ...columns.map((c) => `r.${quoteIdent(c)}::text`)];
      return { text: `select ${select.join(', ')} from ${table.qualified} r where ${w.sql}${order}`, values: w.values };
    },
    hash: (r) => {
      const w = where(r);
      return {
        text: `select count(*)::bigint as n, coalesce(bit_xor(${rowHashExpression(table, 'r')}), 0)::text as h from ${table.qualified} r where ${w.sql}`,
        values: w.values,
      };
    },
    boundary: (after, offset, upTo = null) => {
      const w = where({ after, upTo });
      const select = cols.map((k) => `r.${quoteIdent(k.name)}::text`).join(', ');
      return {
        text: `select ${select} from ${table.qualified} r where ${w.sql} order by ${cols.map((k) => `r.${quoteIdent(k.name)}`).join(', ')} offset ${Math.trunc(offset)} limit 1`,
        values: w.values,
      };
    },
  };
}

/** A table's key ranges found equal on both sides, merged and in key order, and the source rows they hold. */
export interface EqualRanges {
  equal: KeyRange[];
  rows: number;
}

const sameKey = (a: string[] | null, b: string[] | null) => (a === null || b === null ? a === b : a.length === b.length && a.every((v, i) => v === b[i]));

/** The ranges not covered by `equal` (disjoint, in key order), in key order: what is left to compare. */
export function gapsOf(equal: KeyRange[]): KeyRange[] {
  const out: KeyRange[] = [];
  let from: string[] | null = null;
  for (const e of equal) {
    if (!sameKey(e.after, from)) out.push({ after: from, upTo: e.after });
    if (e.upTo === null) return out;
    from = e.upTo;
  }
  out.push({ after: from, upTo: null });
  return out;
}

/**
 * `equal` with the range `r` (which lies in one of its gaps) added, neighbours that meet merged:
 * a unit compared in order stays one range however many chunks it took.
 */
export function withEqual(equal: KeyRange[], r: KeyRange, cmp: (a: string[], b: string[]) => number): KeyRange[] {
  const out = equal.map((e) => ({ ...e }));
  let i = out.findIndex((e) => e.after !== null && r.upTo !== null && cmp(e.after, r.upTo) >= 0);
  if (i < 0) i = out.length;
  out.splice(i, 0, { ...r });
  if (i + 1 < out.length && out[i].upTo !== null && sameKey(out[i].upTo, out[i + 1].after)) out.splice(i, 2, { after: out[i].after, upTo: out[i + 1].upTo });
  if (i > 0 && out[i - 1].upTo !== null && sameKey(out[i - 1].upTo, out[i].after)) out.splice(i - 1, 2, { after: out[i - 1].after, upTo: out[i].upTo });
  return out;
}

/**
 * Whether recorded ranges fit the table's range columns (null: the table is one range): a
 * record from another shape of key (a schema changed between attempts) is not resumed from.
 */
export function fitsRangeColumns(equal: KeyRange[], range: KeyColumn[] | null): boolean {
  const width = range?.length ?? 0;
  const ok = (k: string[] | null) => k === null || (width > 0 && k.length === width && k.every((v) => typeof v === 'string'));
  if (width === 0) return equal.every((e) => e.after === null && e.upTo === null);
  return equal.every((e) => ok(e.after) && ok(e.upTo));
}
