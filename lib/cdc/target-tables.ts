// Reads a target table's columns (type, generated, identity) and primary key from the catalog.
// Called inside the apply transaction, whose search_path is empty, so format_type() qualifies
// every non-pg_catalog type (enums, domains) and the cast text means the same in every session.
import type { ClientBase } from 'pg';
import { ShardctlError } from '../errors';
import { qualifiedName, TableRef } from './sql';
import type { TargetTable } from './statements';

export async function loadTargetTable(client: ClientBase, ref: TableRef): Promise<TargetTable> {
  const display = `${ref.schema}.${ref.name}`;
  const rel = await client.query<{ oid: string | null }>('select to_regclass($1)::oid::text as oid', [qualifiedName(ref)]);
  const oid = rel.rows[0]?.oid;
  if (!oid) {
    throw new ShardctlError('PreconditionFailed', `table ${display} does not exist on the target: create the tenant schema there first`, { table: display });
  }
  const cols = await client.query<{ name: string; type: string; generated: boolean; identity_always: boolean; pk_pos: number | null }>(
    `select a.attname::text as name,
            format_type(a.atttypid, a.atttypmod) as type,
            a.attgenerated <> '' as generated,
            a.attidentity = 'a' as identity_always,
            array_position(pk.indkey::int2[], a.attnum) as pk_pos
       from pg_attribute a
       left join pg_index pk on pk.indrelid = a.attrelid and pk.indisprimary
      where a.attrelid = $1::oid and a.attnum > 0 and not a.attisdropped
      order by a.attnum`,
    [oid],
  );
  const primaryKey = cols.rows
    .filter((r) => r.pk_pos !== null)
    .sort((a, b) => a.pk_pos! - b.pk_pos!)
    .map((r) => r.name);
  return {
    schema: ref.schema,
    name: ref.name,
    columns: cols.rows.map((r) => ({ name: r.name, type: r.type, generated: r.generated, identityAlways: r.identity_always })),
    primaryKey,
  };
}
