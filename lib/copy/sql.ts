// SQL text for the bulk copy, built from catalog-derived identifiers only. Pure: no I/O.
// COPY cannot take bind parameters, so the few values it needs (tenant id, batch key bounds)
// are embedded as escaped literals with an explicit cast to the column's own type.
import { escapeLiteral } from 'pg';
import type { TenantTable } from '../shard/tables';
import { quoteIdent } from '../shard/tables';
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

/** The data-plane role: ordinary triggers (the fence) and FK checks do not fire. */
export const REPLICA_ROLE_SQL = `select set_config('session_replication_role', 'replica', true)`;

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
 * Source, parameterised ($1 unit, $2.. lower bound): the last key of the next batch and the
 * batch's row count. Run in the same REPEATABLE READ snapshot as the COPY that follows, so the
 * COPY bounded by this key returns exactly these rows, in the source's own key order.
 */
export function batchEndQuery(table: TenantTable, tenantColumn: string, hasLowerBound: boolean, batchRows: number) {
  const pk = table.primaryKey;
  const bound = hasLowerBound ? ` and (${list(pk)}) > (${pk.map((c, i) => `$${i + 2}::${columnType(table, c)}`).join(', ')})` : '';
  const inner =
    `select ${list(pk)} from ${table.qualified}` +
    ` where ${quoteIdent(tenantColumn)} = $1::${columnType(table, tenantColumn)}${bound}` +
    ` order by ${list(pk)} limit ${Math.trunc(batchRows)}`;
  return (
    `select ${pk.map((c, i) => `s.${quoteIdent(c)}::text as k${i}`).join(', ')}, count(*) over () as n` +
    // s.-qualified: the output labels k0.. and n must never capture a key column of that name.
    ` from (${inner}) s order by ${pk.map((c) => `s.${quoteIdent(c)} desc`).join(', ')} limit 1`
  );
}

/** Source: COPY of one batch, (lastKey, endKey] of the unit, every non-generated column. */
export function copyOutSql(table: TenantTable, tenantColumn: string, unit: string, lastKey: Key | null, endKey: Key, format: 'binary' | 'text'): string {
  const pk = table.primaryKey;
  const tuple = (k: Key) => `(${k.map((v, i) => typedLiteral(v, columnType(table, pk[i]))).join(', ')})`;
  const where = [
    `${quoteIdent(tenantColumn)} = ${typedLiteral(unit, columnType(table, tenantColumn))}`,
    ...(lastKey ? [`(${list(pk)}) > ${tuple(lastKey)}`] : []),
    `(${list(pk)}) <= ${tuple(endKey)}`,
  ].join(' and ');
  return `copy (select ${list(copiedColumns(table))} from ${table.qualified} where ${where} order by ${list(pk)}) to stdout (format ${format})`;
}

export const STAGE_TABLE = 'shardctl_copy_stage';

/** Target: a temp staging table with exactly the copied columns' types, dropped at commit. */
export function createStageSql(table: TenantTable): string {
  return `create temp table ${STAGE_TABLE} on commit drop as select ${list(copiedColumns(table))} from ${table.qualified} with no data`;
}

export function copyInSql(table: TenantTable, format: 'binary' | 'text'): string {
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
