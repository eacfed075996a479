// Preflight for row-filtered publication and apply by key: every table needs a primary key that
// includes the tenant column, and a replica identity of DEFAULT (the PK) or FULL, so UPDATE and
// DELETE carry the tenant column (PostgreSQL refuses them otherwise) and the target can find rows.
import type { ClientBase, Pool } from 'pg';
import { qualifiedName, quoteIdent, TableRef } from './sql';

type Queryable = Pool | ClientBase;

/** Reasons the tables cannot be moved, each with the fix; empty when all is well. */
export async function checkReplicaIdentity(client: Queryable, tables: TableRef[], tenantColumn: string): Promise<string[]> {
  const reasons: string[] = [];
  for (const t of tables) {
    const name = qualifiedName(t);
    const r = await client.query<{ relreplident: string; pk: string[] | null; pk_name: string | null; has_tenant: boolean }>(
      `select c.relreplident::text as relreplident,
              (select array_agg(a.attname::text order by k.ord)
                 from pg_index i
                 cross join unnest(i.indkey::int2[]) with ordinality k(attnum, ord)
                 join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
                where i.indrelid = c.oid and i.indisprimary) as pk,
              (select conname::text from pg_constraint where conrelid = c.oid and contype = 'p') as pk_name,
              exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = $2 and a.attnum > 0 and not a.attisdropped) as has_tenant
         from pg_class c
        where c.oid = to_regclass($1)`,
      [name, tenantColumn],
    );
    const row = r.rows[0];
    if (!row) {
      reasons.push(`table ${name} does not exist`);
      continue;
    }
    const col = quoteIdent(tenantColumn);
    if (!row.has_tenant) {
      reasons.push(`table ${name} has no tenant column ${col}: every tenant table carries it (hint: ALTER TABLE ${name} ADD COLUMN ${col} ...)`);
      continue;
    }
    if (!row.pk || row.pk.length === 0) {
      reasons.push(`table ${name} has no primary key: changes are applied by key (hint: ALTER TABLE ${name} ADD PRIMARY KEY (${col}, ...))`);
    } else if (!row.pk.includes(tenantColumn)) {
      const cols = row.pk.map(quoteIdent).join(', ');
      reasons.push(
        `primary key of ${name} is (${cols}) and does not include ${col}: the row filter on UPDATE and DELETE needs it in the replica identity ` +
          `(hint: ALTER TABLE ${name} DROP CONSTRAINT ${quoteIdent(row.pk_name ?? 'pkey')}, ADD PRIMARY KEY (${col}, ${cols}))`,
      );
    }
    if (row.relreplident === 'n' || row.relreplident === 'i') {
      const what = row.relreplident === 'n' ? 'NOTHING' : 'USING INDEX';
      reasons.push(`table ${name} has REPLICA IDENTITY ${what}: use the primary key or FULL (hint: ALTER TABLE ${name} REPLICA IDENTITY DEFAULT)`);
    }
  }
  return reasons;
}
