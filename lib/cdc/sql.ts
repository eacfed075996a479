// SQL text helpers for the CDC engine: identifier/literal quoting and the publication DDL. No I/O.
// Every identifier that reaches SQL text goes through quoteIdent; values go through parameters,
// except the publication row filter, whose literal DDL cannot take a parameter.
import { quoteIdent } from '../shard/tables';
import { ShardctlError } from '../errors';

export interface TableRef {
  schema: string;
  name: string;
}

export { quoteIdent };

/** Standard-conforming literal; backslashes force the E'' form so the value is the same under any setting. */
export function quoteLiteral(s: string): string {
  if (s.includes('\0')) throw new ShardctlError('InvalidInput', 'SQL literal contains NUL');
  const body = s.replace(/'/g, "''");
  return s.includes('\\') ? `E'${body.replace(/\\/g, '\\\\')}'` : `'${body}'`;
}

export function qualifiedName(t: TableRef): string {
  return `${quoteIdent(t.schema)}.${quoteIdent(t.name)}`;
}

export function tableKey(t: TableRef): string {
  return `${t.schema}.${t.name}`;
}

const REPLICATION_NAME_RE = /^[a-z0-9_]{1,63}$/;

/** Slot and publication names are derived (lib/ids replicationNames); anything else is a bug upstream. */
export function validateReplicationName(kind: 'slot' | 'publication', name: unknown): string {
  if (typeof name !== 'string' || !REPLICATION_NAME_RE.test(name)) {
    throw new ShardctlError('InvalidInput', `invalid ${kind} name ${JSON.stringify(String(name).slice(0, 80))}: use 1-63 of a-z, 0-9 and '_'`);
  }
  return name;
}

export function rowFilterSql(tenantColumn: string, unit: string): string {
  return `(${quoteIdent(tenantColumn)} = ${quoteLiteral(unit)})`;
}

export function createPublicationSql(publication: string, tables: TableRef[], tenantColumn: string, unit: string): string {
  if (tables.length === 0) throw new ShardctlError('InvalidInput', 'a publication needs at least one table');
  const filter = rowFilterSql(tenantColumn, unit);
  const list = tables.map((t) => `${qualifiedName(t)} WHERE ${filter}`).join(', ');
  // Through the root: a row filter on a partitioned table needs it, and changes then arrive as
  // the root's (applied to the target's root, which routes them to its own partitions).
  return `CREATE PUBLICATION ${quoteIdent(publication)} FOR TABLE ${list} WITH (publish = 'insert, update, delete, truncate', publish_via_partition_root = true)`;
}
