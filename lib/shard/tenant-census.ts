// What an unsharded database holds, read from its catalog and its rows, for `shards adopt`
// (lib/adopt.ts): its tenant tables, every tenant id found in them, and each
// reason the database cannot be adopted as it is. Read-only: one repeatable-read snapshot, so the
// tenants and the problems describe one instant.
import type { Pool } from 'pg';
import type { Config } from '../config';
import { validateTenantId } from '../ids';
import { datasetTables } from '../unit-rows';
import { inTransaction } from '../pg';
import { listTenantTables, movabilityProblems, quoteIdent } from './tables';

export interface TenantCensus {
  /** Tenant tables (`schema.name`), parents first. */
  tables: string[];
  /** Tables of bucketed datasets (their buckets are placed by `dataset init`, not by adopt). */
  datasetTables: string[];
  /** Every tenant id found in the tenant tables, sorted (code-point order). */
  tenants: string[];
  /** Why the database cannot be adopted as it is (empty when it can), each naming its fix. */
  problems: string[];
}

/** At most this many offending values are named in one problem line. */
const NAMED = 5;

export async function takeTenantCensus(pool: Pool, config: Config): Promise<TenantCensus> {
  const column = config.tenant.column;
  return inTransaction(pool, async (c) => {
    await c.query('set transaction isolation level repeatable read, read only');
    const problems: string[] = [];
    const tables = await listTenantTables(c, config.tenant);
    const dsTables: string[] = [];
    for (const ds of config.datasets) {
      for (const t of await listTenantTables(c, datasetTables(config, ds)).catch(() => [])) dsTables.push(`${t.schema}.${t.name}`);
    }
    const names = tables.map((t) => `${t.schema}.${t.name}`);
    for (const t of tables) problems.push(...movabilityProblems(t, column));
    // A table in the tenant schemas without the tenant column holds rows no move would carry:
    // after adoption they would stay behind on this shard, silently. Named tenant tables
    // (tenant.tables) are the operator's choice; then the rest of the schemas is not judged.
    if (!config.tenant.tables?.length) {
      const known = new Set([...names, ...dsTables]);
      const r = await c.query(
        `select n.nspname as schema, c.relname as name
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where c.relkind in ('r', 'p') and not c.relispartition and n.nspname = any($1::text[])
          order by 1, 2`,
        [config.tenant.schemas],
      );
      for (const x of r.rows) {
        const name = `${x.schema}.${x.name}`;
        if (!known.has(name)) {
          problems.push(
            `${quoteIdent(x.schema)}.${quoteIdent(x.name)} has no ${column} column: its rows belong to no tenant and no move would carry them; add the column (leading its primary key) or move the table out of tenant.schemas`,
          );
        }
      }
    }
    const found = new Set<string>();
    const invalid = new Set<string>();
    for (const t of tables) {
      // A primary key led by the tenant column (the design's shape) is walked one tenant at a time
      // (a loose index scan: one index probe per tenant, not a read of every row); any other table
      // is read whole. Its primary key holds the column, so no row has it NULL; a table whose key
      // does not is refused above, and its NULLs are named too.
      const col = quoteIdent(column);
      const ids =
        t.primaryKey[0] === column
          ? await c.query(
              `with recursive walk(v) as (
                 (select ${col} from ${t.qualified} order by ${col} limit 1)
                 union all
                 select (select ${col} from ${t.qualified} where ${col} > walk.v order by ${col} limit 1) from walk where walk.v is not null)
               select v::text as tenant from walk where v is not null`,
            )
          : await c.query(`select distinct ${col}::text as tenant from ${t.qualified}`);
      for (const x of ids.rows) {
        if (x.tenant === null) {
          problems.push(`${t.qualified} has rows with ${column} NULL: they belong to no tenant; give them a tenant or delete them`);
          continue;
        }
        try {
          validateTenantId(x.tenant);
          found.add(x.tenant);
        } catch {
          invalid.add(x.tenant);
        }
      }
    }
    if (invalid.size) {
      const some = [...invalid].sort().slice(0, NAMED);
      problems.push(
        `${invalid.size} ${column} value(s) are not valid tenant ids (1-63 of a-z, 0-9, '-' and '_', starting with a letter or digit): ${some.map((v) => JSON.stringify(v.slice(0, 80))).join(', ')}${invalid.size > NAMED ? ', …' : ''}`,
      );
    }
    const tenants = [...found].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return { tables: names, datasetTables: dsTables, tenants, problems };
  });
}
