// Discovers the tenant tables of a shard from the catalog: those named in config, or every
// table in the configured schemas with the tenant column. Ordered parents-first by foreign keys
// so copies and deletes are dependency-safe. Also says why a table cannot be moved.
import { escapeIdentifier, type Pool, type PoolClient } from 'pg';
import { ShardctlError } from '../errors';
import { subUnitClauseSql, type TableSubUnit } from './split-sql';

export interface TenantColumn {
  name: string;
  type: string;
  generated: boolean;
  notNull: boolean;
}

export interface TenantTable {
  schema: string;
  name: string;
  /** `"schema"."name"`, safely quoted. */
  qualified: string;
  columns: TenantColumn[];
  primaryKey: string[];
  replicaIdentity: 'default' | 'full' | 'index' | 'nothing';
  /** Tenant tables this one references (qualified names). */
  references: string[];
  /** A sub-unit move's part of this table (UnitTableSelector.subUnit): its rows are those of the tenant in sub-unit `index`. */
  split?: TableSubUnit;
}

/** A quoted SQL identifier (pg's escapeIdentifier); refuses what no identifier can be. */
export function quoteIdent(s: string): string {
  if (typeof s !== 'string' || s.length === 0) throw new ShardctlError('InvalidInput', 'empty SQL identifier');
  if (s.includes('\0')) throw new ShardctlError('InvalidInput', 'SQL identifier contains NUL');
  return escapeIdentifier(s);
}

/** How many rows of the unit the table holds on this shard. */
export async function countUnitRows(db: Pool | PoolClient, t: TenantTable, column: string, unit: string): Promise<number> {
  const r = await db.query(`select count(*) as n from ${t.qualified} where ${quoteIdent(column)} = $1${subUnitClauseSql(t.split)}`, [unit]);
  return Number(r.rows[0].n);
}

/**
 * The unit's bytes in the table, estimated: `rows` times the mean size (pg_column_size of the
 * whole row) of up to `sample` of its rows — exact when it has no more. Reads `sample` rows at most.
 */
export async function estimateUnitBytes(db: Pool | PoolClient, t: TenantTable, column: string, unit: string, rows: number, sample = 1000): Promise<number> {
  if (rows <= 0) return 0;
  const r = await db.query(
    `select count(*) as n, coalesce(sum(pg_column_size(s.*)), 0) as bytes from (select * from ${t.qualified} where ${quoteIdent(column)} = $1${subUnitClauseSql(t.split)} limit $2) s`,
    [unit, sample],
  );
  const n = Number(r.rows[0].n);
  return n === 0 ? 0 : Math.round((Number(r.rows[0].bytes) / n) * rows);
}

/**
 * The tables a unit kind selects by `column`: tenant tables (the tenant column), or a bucketed
 * dataset's tables (its bucket column, with `alsoColumn` the key column, `withoutColumn` the
 * tenant column: a table routes by tenant or by bucket, never both). Same shape either way.
 */
export interface UnitTableSelector {
  column: string;
  schemas: string[];
  tables?: string[];
  alsoColumn?: string;
  withoutColumn?: string;
  /**
   * Also the blob index, shardctl.blob_index (lib/blobs/index-table.ts), when the shard has it: a
   * tenant table shardctl owns, outside the application's schemas and whatever `tables` names.
   */
  blobIndex?: boolean;
  /**
   * Also this table of shardctl's (a bucketed dataset's blob index, `shardctl.blob_index_<dataset>`),
   * when the shard has it and it has the selector's columns, whatever `schemas` and `tables` say.
   */
  indexTable?: string;
  /**
   * A split tenant's sub-unit (docs/architecture.md, "Splitting a tenant"): every table listed is
   * annotated with its split column (`columns`, `schema.table` → column: config.tenant.splitColumns),
   * and a table without one is refused (its rows' sub-unit is unknown).
   */
  subUnit?: { ways: number; index: number; columns: Record<string, string> };
}

/** The selector of a config's tenant tables: its tenant schemas (or tables), and the blob index. */
export function tenantTableSelector(tenant: { column: string; schemas: string[]; tables?: string[] }): UnitTableSelector {
  return { column: tenant.column, schemas: tenant.schemas, tables: tenant.tables, blobIndex: true };
}

export async function listTenantTables(db: Pool | PoolClient, opts: UnitTableSelector): Promise<TenantTable[]> {
  const rels = await db.query(
    `select c.oid, n.nspname as schema, c.relname as name, c.relreplident as ri
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind in ('r', 'p') and not c.relispartition
        and (n.nspname = any($1::text[]) or ($5 and c.oid = to_regclass('shardctl.blob_index')) or c.oid = to_regclass($6::text))
        and exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = $2 and a.attnum > 0 and not a.attisdropped)
        and ($3::name is null or exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = $3 and a.attnum > 0 and not a.attisdropped))
        and ($4::name is null or not exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = $4 and a.attnum > 0 and not a.attisdropped))
      order by n.nspname, c.relname`,
    [opts.schemas, opts.column, opts.alsoColumn ?? null, opts.withoutColumn ?? null, opts.blobIndex === true, opts.indexTable ?? null],
  );
  let rows = rels.rows;
  if (opts.tables?.length) {
    const index = (r: { schema: string; name: string }) =>
      (opts.blobIndex === true && r.schema === 'shardctl' && r.name === 'blob_index') || `${r.schema}.${r.name}` === opts.indexTable;
    const wanted = new Set(opts.tables.map((t) => (t.includes('.') ? t : `${opts.schemas[0]}.${t}`)));
    const found = new Set(rows.map((r) => `${r.schema}.${r.name}`));
    for (const r of rows) if (index(r)) wanted.add(`${r.schema}.${r.name}`);
    const missing = [...wanted].filter((w) => !found.has(w));
    if (missing.length) throw new ShardctlError('InvalidInput', `configured tenant tables not found or without column ${opts.column}: ${missing.join(', ')}`);
    rows = rows.filter((r) => wanted.has(`${r.schema}.${r.name}`));
  }
  if (rows.length === 0) return [];
  const oids = rows.map((r) => r.oid);
  const cols = await db.query(
    `select a.attrelid as oid, a.attname as name, format_type(a.atttypid, a.atttypmod) as type,
            a.attgenerated <> '' as generated, a.attnotnull as not_null
       from pg_attribute a where a.attrelid = any($1::oid[]) and a.attnum > 0 and not a.attisdropped
      order by a.attrelid, a.attnum`,
    [oids],
  );
  const pks = await db.query(
    `select i.indrelid as oid, array_agg(a.attname::text order by k.ord) as cols
       from pg_index i
       cross join lateral unnest(i.indkey) with ordinality as k(attnum, ord)
       join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
      where i.indrelid = any($1::oid[]) and i.indisprimary
      group by i.indrelid`,
    [oids],
  );
  const fks = await db.query(
    `select conrelid as oid, confrelid as ref from pg_constraint where contype = 'f' and conrelid = any($1::oid[]) and confrelid = any($1::oid[])`,
    [oids],
  );
  const byOid = new Map<number, TenantTable>();
  const riMap: Record<string, TenantTable['replicaIdentity']> = { d: 'default', f: 'full', i: 'index', n: 'nothing' };
  for (const r of rows) {
    byOid.set(r.oid, {
      schema: r.schema,
      name: r.name,
      qualified: `${quoteIdent(r.schema)}.${quoteIdent(r.name)}`,
      columns: [],
      primaryKey: [],
      replicaIdentity: riMap[r.ri] ?? 'default',
      references: [],
    });
  }
  for (const c of cols.rows) byOid.get(c.oid)!.columns.push({ name: c.name, type: c.type, generated: c.generated, notNull: c.not_null });
  for (const p of pks.rows) byOid.get(p.oid)!.primaryKey = parsePgArray(p.cols);
  for (const f of fks.rows) if (f.oid !== f.ref) byOid.get(f.oid)!.references.push(byOid.get(f.ref)!.qualified);
  if (opts.subUnit) for (const t of byOid.values()) t.split = tableSubUnit(t, opts.subUnit);
  return orderByDependencies([...byOid.values()]);
}

/** A table's sub-unit part, or InvalidInput when it has no split column (configured and present). */
function tableSubUnit(t: TenantTable, s: NonNullable<UnitTableSelector['subUnit']>): TableSubUnit {
  const name = `${t.schema}.${t.name}`;
  const column = s.columns[name];
  if (column === undefined)
    throw new ShardctlError('InvalidInput', `${name} has no split column in config.tenant.splitColumns: a sub-unit's rows there are unknown`);
  if (!t.columns.some((c) => c.name === column))
    throw new ShardctlError('InvalidInput', `${name} has no column ${column} (its split column in config.tenant.splitColumns)`);
  return { column, ways: s.ways, index: s.index };
}

function parsePgArray(v: unknown): string[] {
  // text[] is parsed by node-pg (quotes, commas and backslashes in names included).
  if (!Array.isArray(v)) throw new Error(`expected a text[] of key columns, got ${JSON.stringify(v)}`);
  return v as string[];
}

/** Parents before children; a cycle is reported rather than silently broken. */
export function orderByDependencies(tables: TenantTable[]): TenantTable[] {
  const byName = new Map(tables.map((t) => [t.qualified, t]));
  const out: TenantTable[] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (t: TenantTable, path: string[]) => {
    const s = state.get(t.qualified);
    if (s === 'done') return;
    if (s === 'visiting') throw new ShardctlError('PreconditionFailed', `foreign-key cycle among tenant tables: ${[...path, t.qualified].join(' -> ')}`);
    state.set(t.qualified, 'visiting');
    for (const r of t.references) {
      const dep = byName.get(r);
      if (dep) visit(dep, [...path, t.qualified]);
    }
    state.set(t.qualified, 'done');
    out.push(t);
  };
  for (const t of [...tables].sort((a, b) => a.qualified.localeCompare(b.qualified))) visit(t, []);
  return out;
}

/** Reasons a table cannot be moved by tenant filter (empty when it can), each with a hint. */
export function movabilityProblems(t: TenantTable, tenantColumn: string): string[] {
  const out: string[] = [];
  if (t.primaryKey.length === 0) {
    out.push(`${t.qualified} has no primary key; add one led by ${tenantColumn} (ALTER TABLE ${t.qualified} ADD PRIMARY KEY (${tenantColumn}, ...))`);
  } else if (!t.primaryKey.includes(tenantColumn)) {
    out.push(`${t.qualified} primary key (${t.primaryKey.join(', ')}) does not include ${tenantColumn}; rows could not be filtered by tenant`);
  }
  if (t.replicaIdentity === 'nothing') {
    out.push(`${t.qualified} has REPLICA IDENTITY NOTHING; updates and deletes cannot be replicated (ALTER TABLE ${t.qualified} REPLICA IDENTITY DEFAULT)`);
  }
  if (t.replicaIdentity === 'index') {
    out.push(
      `${t.qualified} uses REPLICA IDENTITY USING INDEX; use DEFAULT (primary key led by ${tenantColumn}) or FULL so the row filter on ${tenantColumn} works`,
    );
  }
  return out;
}
