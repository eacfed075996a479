// Unique keys that span tenants: a unique index (the primary key or another) that does not
// contain the tenant column, e.g. a global `id`. Copying a unit onto a shard whose other units
// already hold one of its values would fail mid-copy (or worse, in the change stream after
// hours of catch-up); plan finds the first such value and refuses, naming it.
import type { Pool, PoolClient } from 'pg';
import type { TenantTable } from './tables';
import { quoteIdent } from './tables';
import { columnType } from '../copy/sql';

type Db = Pool | PoolClient;

export interface GlobalUniqueKey {
  /** `TenantTable.qualified` */
  table: string;
  index: string;
  columns: string[];
}

/** Plain (no expression, no predicate) unique indexes of `t` that leave out the tenant column. */
export async function globalUniqueKeys(db: Db, t: TenantTable, tenantColumn: string): Promise<GlobalUniqueKey[]> {
  const r = await db.query(
    `select pg_catalog.format('%I', ic.relname) as index, array_agg(a.attname::text order by k.ord) as cols
       from pg_catalog.pg_index i
       join pg_catalog.pg_class ic on ic.oid = i.indexrelid
       cross join lateral pg_catalog.unnest(i.indkey) with ordinality as k(attnum, ord)
       join pg_catalog.pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
      where i.indrelid = pg_catalog.to_regclass($1) and i.indisunique and i.indexprs is null and i.indpred is null
        and k.ord <= i.indnkeyatts
      group by ic.relname
     having not ($2 = any(array_agg(a.attname::text)))
      order by 1`,
    [t.qualified, tenantColumn],
  );
  return r.rows.map((x) => ({ table: t.qualified, index: x.index, columns: x.cols }));
}

export interface KeyCollision {
  index: string;
  columns: string[];
  values: string[];
  /** The unit on the target that holds the value. */
  holder: string;
}

/**
 * The first value of `key` that the unit holds on the source and another unit already holds on
 * the target (null: none). Reads the unit's key values through a cursor in batches and looks
 * each batch up on the target by the same unique index; memory stays bounded by the batch.
 */
export async function firstKeyCollision(
  source: Pool,
  target: Pool,
  t: TenantTable,
  key: GlobalUniqueKey,
  tenantColumn: string,
  unit: string,
  batchRows = 5000,
): Promise<KeyCollision | null> {
  const cols = key.columns;
  const notNull = cols.map((c) => `x.${quoteIdent(c)} is not null`).join(' and ');
  const readSql = `select ${cols.map((c) => `x.${quoteIdent(c)}::text`).join(', ')} from ${t.qualified} x where x.${quoteIdent(tenantColumn)} = $1 and ${notNull}`;
  const aliases = cols.map((_, i) => `k${i}`);
  // Multi-argument unnest is FROM-clause syntax: it cannot be schema-qualified.
  const lookupSql =
    `select ${cols.map((c) => `x.${quoteIdent(c)}::text`).join(', ')}, x.${quoteIdent(tenantColumn)}::text as holder` +
    ` from unnest(${cols.map((_, i) => `$${i + 1}::text[]`).join(', ')}) as k(${aliases.join(', ')})` +
    ` join ${t.qualified} x on ${cols.map((c, i) => `x.${quoteIdent(c)} = k.${aliases[i]}::${columnType(t, c)}`).join(' and ')}` +
    ` where x.${quoteIdent(tenantColumn)}::text is distinct from $${cols.length + 1} limit 1`;
  const c = await source.connect();
  try {
    await c.query('begin isolation level repeatable read read only');
    await c.query(`declare shardctl_keys no scroll cursor for ${readSql}`, [unit]);
    for (;;) {
      const r = await c.query({ text: `fetch ${Math.trunc(batchRows)} from shardctl_keys`, rowMode: 'array' });
      if (r.rows.length === 0) break;
      const arrays = cols.map((_, i) => (r.rows as string[][]).map((row) => row[i]));
      const hit = await target.query({ text: lookupSql, values: [...arrays, unit], rowMode: 'array' });
      if (hit.rows.length) {
        const row = hit.rows[0] as string[];
        return { index: key.index, columns: cols, values: row.slice(0, cols.length), holder: row[cols.length] };
      }
      if (r.rows.length < batchRows) break;
    }
    await c.query('commit');
    return null;
  } finally {
    await c.query('rollback').catch(() => {});
    c.release();
  }
}

/** The operator's reason for a collision. */
export function collisionReason(targetShard: string, t: TenantTable, k: KeyCollision, tenantColumn: string, unit: string): string {
  return (
    `target ${targetShard} already holds ${t.schema}.${t.name} key (${k.columns.join(', ')})=(${k.values.join(', ')}) for unit ${k.holder};` +
    ` unique index ${k.index} does not contain ${tenantColumn}, so ${unit}'s row with that key would collide there` +
    ` (renumber one of them, or add ${tenantColumn} to the key)`
  );
}
