// Chooses the COPY wire format for a table. Binary is exact and fast, but its array and
// composite encodings embed type OIDs, which differ between servers for user-defined types
// (enum[], domain[], composites, extension types): the target would reject them. Such tables
// use text format instead, which is equally exact given the stable output settings in sql.ts.
import type { Pool, PoolClient } from 'pg';
import type { TenantTable } from '../shard/tables';

export interface CopyFormat {
  format: 'binary' | 'text';
  /** Why text was chosen (empty for binary). */
  reasons: string[];
}

/** First OID assigned to user objects: anything below is built in and identical everywhere. */
const FIRST_NORMAL_OID = 16384;

export async function chooseCopyFormat(db: Pool | PoolClient, table: TenantTable): Promise<CopyFormat> {
  // Walk every column's domain chain; judge each type in it and its array element type.
  const r = await db.query(
    `with recursive chain(col, typ, depth) as (
       select a.attname, a.atttypid, 0 from pg_attribute a
        where a.attrelid = $1::regclass and a.attnum > 0 and not a.attisdropped and a.attgenerated = ''
       union all
       select c.col, t.typbasetype, c.depth + 1 from chain c join pg_type t on t.oid = c.typ
        where t.typtype = 'd' and c.depth < 16
     )
     select c.col, format_type(t.oid, null) as type, t.typtype, t.typsend::oid <> 0 and t.typreceive::oid <> 0 as has_binary,
            t.typcategory = 'A' and t.typelem <> 0 as is_array, e.oid as elem_oid, e.typtype as elem_typtype
       from chain c join pg_type t on t.oid = c.typ left join pg_type e on e.oid = t.typelem and t.typcategory = 'A'`,
    [table.qualified],
  );
  const reasons: string[] = [];
  for (const row of r.rows) {
    if (!row.has_binary) reasons.push(`${row.col}: type ${row.type} has no binary send/receive`);
    else if (row.typtype === 'c') reasons.push(`${row.col}: composite type ${row.type} carries type OIDs in binary`);
    else if (row.is_array && row.elem_oid !== null && (Number(row.elem_oid) >= FIRST_NORMAL_OID || row.elem_typtype === 'c')) {
      reasons.push(`${row.col}: array ${row.type} of a user-defined type carries its OID in binary`);
    }
  }
  return { format: reasons.length ? 'text' : 'binary', reasons: [...new Set(reasons)] };
}
