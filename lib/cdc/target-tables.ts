// Reads a target table's columns (type, generated, identity) and primary key from the catalog.
// Called inside the apply transaction, whose search_path is empty, so format_type() qualifies
// every non-pg_catalog type (enums, domains) and the cast text means the same in every session.
// Also whether changes to different keys of the table commute (independentKeys): only when the
// primary key is the table's one uniqueness rule, no trigger of the user's fires in the apply's
// replica session (foreign keys' do not: they are origin-only), and equal keys have equal text.
import type { ClientBase } from 'pg';
import { ShardctlError } from '../errors';
import { qualifiedName, TableRef } from './sql';
import type { TargetTable } from './statements';

export async function loadTargetTable(client: ClientBase, ref: TableRef): Promise<TargetTable> {
  const display = `${ref.schema}.${ref.name}`;
  // One round trip: each apply session loads every table it meets, and on a link of 200 ms four
  // statements a table cost a catch-up round seconds.
  const r = await client.query<{ oid: string | null; cols: TargetColumnRow[] | null; independent: boolean | null; copyable: boolean | null }>(
    LOAD_TARGET_TABLE_SQL,
    [qualifiedName(ref)],
  );
  const row = r.rows[0];
  if (!row?.oid) {
    throw new ShardctlError('PreconditionFailed', `table ${display} does not exist on the target: create the tenant schema there first`, { table: display });
  }
  const cols = row.cols ?? [];
  const primaryKey = cols
    .filter((c) => c.pk_pos !== null)
    .sort((a, b) => a.pk_pos! - b.pk_pos!)
    .map((c) => c.name);
  return {
    schema: ref.schema,
    name: ref.name,
    columns: cols.map((c) => ({ name: c.name, type: c.type, generated: c.generated, identityAlways: c.identity_always })),
    primaryKey,
    independentKeys: row.independent === true,
    copyable: row.copyable === true,
  };
}

interface TargetColumnRow {
  name: string;
  type: string;
  generated: boolean;
  identity_always: boolean;
  pk_pos: number | null;
}

/** Key column types whose text is the value: two keys are equal exactly when their texts are. */
const EXACT_KEY_TYPES = ['smallint', 'integer', 'bigint', 'uuid', 'text', 'character varying', 'character'];

// Over the table and every partition (a partition may carry its own index or trigger); the
// partition tree of a table that is not partitioned is empty, not the table.
const INDEPENDENT_KEYS_SQL = `
  with rels as (select $1::oid as relid union select relid from pg_catalog.pg_partition_tree($1::oid))
  select exists (select 1 from pg_catalog.pg_index i where i.indrelid = $1::oid and i.indisprimary)
     and not exists (select 1 from pg_catalog.pg_index i where i.indrelid in (select relid from rels) and i.indisunique and not i.indisprimary)
     and not exists (select 1 from pg_catalog.pg_constraint c where c.conrelid in (select relid from rels) and c.contype = 'x')
     and not exists (
       select 1 from pg_catalog.pg_trigger t
         join pg_catalog.pg_proc p on p.oid = t.tgfoid join pg_catalog.pg_namespace n on n.oid = p.pronamespace
        where t.tgrelid in (select relid from rels) and t.tgenabled in ('A', 'R') and n.nspname <> 'shardctl')
     and not exists (
       select 1 from pg_catalog.pg_index i
         cross join lateral pg_catalog.unnest(i.indkey::int2[]) as k(attnum)
         join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
         left join pg_catalog.pg_collation co on co.oid = a.attcollation
        where i.indrelid = $1::oid and i.indisprimary
          and (pg_catalog.format_type(a.atttypid, null) <> all (array[${EXACT_KEY_TYPES.map((t) => `'${t}'`).join(', ')}])
               or not coalesce(co.collisdeterministic, true)))
     as independent`;

// COPY FROM is refused under row-level security and ignores rules: only a plain or partitioned
// table with neither, on it or any partition, is written by COPY as INSERT would write it.
const COPYABLE_SQL = `
  with rels as (select $1::oid as relid union select relid from pg_catalog.pg_partition_tree($1::oid))
  select not exists (select 1 from pg_catalog.pg_class c where c.oid in (select relid from rels) and (c.relrowsecurity or c.relkind not in ('r', 'p')))
     and not exists (select 1 from pg_catalog.pg_rewrite r where r.ev_class in (select relid from rels) and r.ev_type = '3')
     as copyable`;

/** The table's oid, columns (in attnum order), and the two verdicts above, in one statement ($1: the qualified name). */
const ofTable = (sql: string) => `(${sql.replaceAll('$1::oid', '(select oid from t)')})`;
const LOAD_TARGET_TABLE_SQL = `
  with t as (select pg_catalog.to_regclass($1)::oid as oid)
  select t.oid::text as oid,
         (select pg_catalog.json_agg(pg_catalog.json_build_object(
                   'name', a.attname::text,
                   'type', pg_catalog.format_type(a.atttypid, a.atttypmod),
                   'generated', a.attgenerated <> '',
                   'identity_always', a.attidentity = 'a',
                   'pk_pos', pg_catalog.array_position(pk.indkey::int2[], a.attnum)) order by a.attnum)
            from pg_catalog.pg_attribute a
            left join pg_catalog.pg_index pk on pk.indrelid = a.attrelid and pk.indisprimary
           where a.attrelid = t.oid and a.attnum > 0 and not a.attisdropped) as cols,
         ${ofTable(INDEPENDENT_KEYS_SQL)} as independent,
         ${ofTable(COPYABLE_SQL)} as copyable
    from t`;
