// SQL text for the bulk copy, built from catalog-derived identifiers only. Pure: no I/O.
// COPY cannot take bind parameters, so the few values it needs (tenant id, batch key bounds)
// are embedded as escaped literals with an explicit cast to the column's own type.
import { escapeLiteral } from 'pg';
import type { TenantTable } from '../shard/tables';
import { quoteIdent } from '../shard/tables';
import { subUnitClauseSql } from '../shard/split-sql';
import { invalidInput } from '../errors';

/** A primary-key value tuple, each value in its `::text` form, in primary-key column order. */
export type Key = string[];

/**
 * Session settings that make text output identical on every server (and parseable on any):
 * both ends of a copy and both sides of a validation set these inside their transaction.
 */
export const STABLE_TEXT_SETTINGS_SQL =
  `select set_config('datestyle', 'ISO, MDY', true), set_config('intervalstyle', 'postgres', true),` +
  ` set_config('timezone', 'UTC', true), set_config('extra_float_digits', '3', true),` +
  ` set_config('bytea_output', 'hex', true), set_config('lc_monetary', 'C', true)`;

/**
 * The data-plane role: ordinary triggers (the fence) and FK checks do not fire; the session is
 * registered as shardctl's own, so the write-audit guard lets it write (lib/shard/write-audit.ts).
 */
export const REPLICA_ROLE_SQL = `select pg_catalog.set_config('session_replication_role', 'replica', true), shardctl.enter_data_plane()`;

export function copyStreamName(table: Pick<TenantTable, 'schema' | 'name'>): string {
  return `copy:${table.schema}.${table.name}`;
}

export function columnType(table: TenantTable, column: string): string {
  const c = table.columns.find((x) => x.name === column);
  if (!c) throw invalidInput(`${table.qualified} has no column ${column}`);
  return c.type;
}

/** `'text'::type`, safe for any text (quotes and backslashes are escaped). */
export function typedLiteral(value: string, type: string): string {
  if (value.includes('\u0000')) throw invalidInput('a key value contains a NUL character');
  return `${escapeLiteral(value)}::${type}`;
}

/** Columns the copy writes: every column except generated ones (the target recomputes those). */
export function copiedColumns(table: TenantTable): string[] {
  return table.columns.filter((c) => !c.generated).map((c) => c.name);
}

export function assertCopyable(table: TenantTable, tenantColumn: string): void {
  if (table.primaryKey.length === 0) throw invalidInput(`${table.qualified} has no primary key; it cannot be copied in key order`);
  if (!table.primaryKey.includes(tenantColumn)) throw invalidInput(`${table.qualified} primary key does not include ${tenantColumn}`);
  if (!table.columns.some((c) => c.name === tenantColumn)) throw invalidInput(`${table.qualified} has no column ${tenantColumn}`);
}

const list = (cols: string[]) => cols.map(quoteIdent).join(', ');

/**
 * Source, in the batch's REPEATABLE READ snapshot, parameterised ($1 unit, $2.. lower bound):
 * the key `offset` rows past the lower bound (the batch's last key), or, with `last`, the unit's
 * last key past it (the final, shorter batch). Both walk the primary key index in order and stop
 * there (an index-only scan with OFFSET/LIMIT): nothing is sorted, nothing but keys is read.
 */
export function batchKeyQuery(table: TenantTable, tenantColumn: string, hasLowerBound: boolean, pick: { offset: number } | 'last'): string {
  const pk = table.primaryKey;
  // s.-qualified throughout: the output labels k0.. must never capture a key column of that name.
  const cols = (dir: string) => pk.map((c) => `s.${quoteIdent(c)}${dir}`).join(', ');
  const bound = hasLowerBound ? ` and (${cols('')}) > (${pk.map((c, i) => `$${i + 2}::${columnType(table, c)}`).join(', ')})` : '';
  return (
    `select ${pk.map((c, i) => `s.${quoteIdent(c)}::text as k${i}`).join(', ')} from ${table.qualified} s` +
    ` where s.${quoteIdent(tenantColumn)} = $1::${columnType(table, tenantColumn)}${subUnitClauseSql(table.split, 's')}${bound}` +
    (pick === 'last' ? ` order by ${cols(' desc')} limit 1` : ` order by ${cols('')} offset ${Math.trunc(pick.offset)} limit 1`)
  );
}

/**
 * Source settings for the batch's transaction: the COPY below must read the primary key index in
 * order rather than scan and sort the tenant's rows for every batch, whatever the planner's
 * estimate of the range (a tenant that is most of its table looks cheaper to seq-scan and sort).
 */
export const SOURCE_PLAN_SQL = `select set_config('enable_sort', 'off', true)`;

/** Source: COPY of one batch, (lastKey, endKey] of the unit, every non-generated column, in key order. */
export function copyOutSql(table: TenantTable, tenantColumn: string, unit: string, lastKey: Key | null, endKey: Key, format: 'binary' | 'text'): string {
  const pk = table.primaryKey;
  const tuple = (k: Key) => `(${k.map((v, i) => typedLiteral(v, columnType(table, pk[i]))).join(', ')})`;
  const where = [
    `${quoteIdent(tenantColumn)} = ${typedLiteral(unit, columnType(table, tenantColumn))}${subUnitClauseSql(table.split)}`,
    ...(lastKey ? [`(${list(pk)}) > ${tuple(lastKey)}`] : []),
    `(${list(pk)}) <= ${tuple(endKey)}`,
  ].join(' and ');
  return `copy (select ${list(copiedColumns(table))} from ${table.qualified} where ${where} order by ${list(pk)}) to stdout (format ${format})`;
}

/** Target, when no row of the batch can be there yet: straight into the table. */
export function copyIntoTableSql(table: TenantTable, format: 'binary' | 'text'): string {
  return `copy ${table.qualified} (${list(copiedColumns(table))}) from stdin (format ${format})`;
}

/**
 * Target: is any row of the unit already there past the checkpoint (by the target's own key
 * order)? Then the copy must upsert. A different collation on the target can only hide such a
 * row, never invent one; a hidden one surfaces as a unique violation and the batch is redone
 * with the upsert (table.ts).
 */
export function targetRowsPastQuery(table: TenantTable, tenantColumn: string, hasLowerBound: boolean): string {
  const pk = table.primaryKey;
  const bound = hasLowerBound ? ` and (${list(pk)}) > (${pk.map((c, i) => `$${i + 2}::${columnType(table, c)}`).join(', ')})` : '';
  return `select 1 from ${table.qualified} where ${quoteIdent(tenantColumn)} = $1::${columnType(table, tenantColumn)}${subUnitClauseSql(table.split)}${bound} limit 1`;
}

export const STAGE_TABLE = 'shardctl_copy_stage';

/** Target, upsert path: a temp staging table with exactly the copied columns' types, dropped at commit. */
export function createStageSql(table: TenantTable): string {
  return `create temp table ${STAGE_TABLE} on commit drop as select ${list(copiedColumns(table))} from ${table.qualified} with no data`;
}

export function copyIntoStageSql(table: TenantTable, format: 'binary' | 'text'): string {
  return `copy ${STAGE_TABLE} (${list(copiedColumns(table))}) from stdin (format ${format})`;
}

/** Target: staged rows into the table; a row already there (earlier attempt, change apply) is overwritten. */
export function upsertFromStageSql(table: TenantTable): string {
  const cols = copiedColumns(table);
  const nonKey = cols.filter((c) => !table.primaryKey.includes(c));
  const action = nonKey.length ? `do update set ${nonKey.map((c) => `${quoteIdent(c)} = excluded.${quoteIdent(c)}`).join(', ')}` : 'do nothing';
  return (
    `insert into ${table.qualified} (${list(cols)}) overriding system value` +
    ` select ${list(cols)} from ${STAGE_TABLE} on conflict (${list(table.primaryKey)}) ${action}`
  );
}
