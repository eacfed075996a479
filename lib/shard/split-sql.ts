// A split tenant's sub-unit index of a row as SQL (docs/architecture.md, "Splitting a tenant"): the
// one expression the shard's fence triggers test (fence-sql.ts, with K read from the fence) and a
// sub-unit move's row predicate uses (with K the directory's, a constant), so the rows a move
// copies, compares and deletes are exactly those the fence counts as the sub-unit's. Pure.

import { escapeIdentifier } from 'pg';

/**
 * stable_hash(`value` as text) mod `ways` (lib/buckets/hash.ts computes the same in Node), written
 * out with built-in functions (fence-sql.ts says why). Exact on the unsigned value: with
 * q = h div 2 (a logical shift of the digest's first 64 bits) and b = h mod 2,
 * h mod K = (2·(q mod K) + b) mod K. `convert_to` is not immutable, so a publication's row filter
 * refuses this expression (PG 15): a sub-unit move's stream is filtered in the applier instead.
 */
export function splitIndexSql(valueSql: string, waysSql: string): string {
  const digest = `pg_catalog.sha256(pg_catalog.convert_to((${valueSql})::pg_catalog.text, 'UTF8'))`;
  const half = `((('x' operator(pg_catalog.||) pg_catalog.encode(pg_catalog.substr(${digest}, 1, 8), 'hex'))::pg_catalog.bit(64) operator(pg_catalog.>>) 1)::pg_catalog.int8)`;
  const low = `(pg_catalog.get_byte(${digest}, 7) operator(pg_catalog.&) 1)`;
  return `((2 operator(pg_catalog.*) (${half} operator(pg_catalog.%) ${waysSql}) operator(pg_catalog.+) ${low}) operator(pg_catalog.%) ${waysSql})`;
}

/** A table's part of a sub-unit move: its split column, and the sub-unit `index` of a split `ways` ways. */
export interface TableSubUnit {
  column: string;
  ways: number;
  index: number;
}

/**
 * The sub-unit's conjunct of a table's row predicate, to append to `<tenant column> = <tenant>`:
 * ` and <row's sub-unit index> = k` over `alias` (none: the bare column), or '' for a table of
 * no sub-unit move (a tenant's or a bucket's).
 */
export function subUnitClauseSql(split: TableSubUnit | undefined, alias?: string): string {
  if (!split) return '';
  const ways = Number(split.ways);
  const index = Number(split.index);
  if (!Number.isInteger(ways) || ways < 2 || !Number.isInteger(index) || index < 0 || index >= ways) {
    throw new Error(`sub-unit ${index} of ${ways} ways is no sub-unit`);
  }
  const col = `${alias ? `${alias}.` : ''}${escapeIdentifier(split.column)}`;
  return ` and ${splitIndexSql(col, String(ways))} operator(pg_catalog.=) ${index}`;
}
