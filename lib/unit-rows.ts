// A routing unit's rows: which tables hold them and the one predicate that selects them. Every
// part of a move that touches rows (copy, the publication's row filter, apply, validation, the
// fence triggers, retire's delete, counts, sequences) selects a unit's rows as
// `<column> = <value>`, so a tenant and a bucket move the same way (docs/architecture.md, "Buckets"):
//   tenant  <tenant>                tenant tables   tenant_col = '<tenant>'
//   bucket  bucket:<dataset>:<n>    dataset tables  <bucket column> = n
//   sub-unit <tenant>:<k>           tenant tables   tenant_col = '<tenant>' and <split index> = k
//            (per table: its split column; lib/shard/split-sql.ts, the fence's own expression)
// A bucket column is an ordinary stored int column (not GENERATED: PostgreSQL 15's pgoutput does not
// send generated columns, and the apply addresses rows by a primary key that it leads), bound to the
// key by a CHECK constraint, so no row can sit in a bucket its key does not hash to. Pure.
import { invalidInput } from './errors';
import { parseUnit, bucketUnitName, type BucketDataset } from './buckets/units';
import type { TenantTable, UnitTableSelector } from './shard/tables';
import { subUnitClauseSql } from './shard/split-sql';

/** A dataset as config.datasets holds it (lib/config.ts). */
export interface DatasetConfig extends BucketDataset {
  bucketColumn: string;
  tables?: string[];
}

/** The parts of Config this module reads (tests can build one without a whole config). */
export interface UnitRowsConfig {
  tenant: { column: string; schemas: string[]; tables?: string[]; splitColumns?: Record<string, string> };
  datasets: readonly DatasetConfig[];
}

export interface UnitRows {
  unit: string;
  kind: 'tenant' | 'bucket';
  /** The column the predicate compares (the tenant column, or the dataset's bucket column). */
  column: string;
  /** The value it compares with, as text (the tenant id, or the bucket number). */
  value: string;
  /** Which tables hold the unit's rows. */
  tables: UnitTableSelector;
  dataset?: DatasetConfig;
  /** A split tenant's sub-unit: `value` is the tenant, and these select its rows in each table (UnitTableSelector.subUnit). */
  subUnit?: { tenant: string; ways: number; index: number };
}

/** The rows of `unit` (throws InvalidInput for a name of no kind, or a bucket of no configured dataset). */
export function unitRows(config: UnitRowsConfig, unit: string, split?: { ways: number }): UnitRows {
  const p = parseUnit(unit);
  if (p.kind === 'tenant') {
    const t = config.tenant;
    if (p.path.length > 0) return subUnitRows(config, unit, p.tenant, p.path, split);
    return { unit, kind: 'tenant', column: t.column, value: unit, tables: { column: t.column, schemas: t.schemas, tables: t.tables, blobIndex: true } };
  }
  const ds = config.datasets.find((d) => d.name === p.dataset);
  if (!ds) throw invalidInput(`unit ${unit} names dataset ${p.dataset}, which is not in config.datasets`);
  if (p.bucket >= ds.buckets || bucketUnitName(ds.name, p.bucket, ds.buckets) !== unit)
    throw invalidInput(
      `unit ${unit} is not a bucket of ${ds.name} (B = ${ds.buckets}: ${bucketUnitName(ds.name, 0, ds.buckets)} .. ${bucketUnitName(ds.name, ds.buckets - 1, ds.buckets)})`,
    );
  return {
    unit,
    kind: 'bucket',
    column: ds.bucketColumn,
    value: String(p.bucket),
    dataset: ds,
    tables: datasetTables(config, ds),
  };
}

/**
 * A split tenant's sub-unit `T:k` (docs/architecture.md, "Splitting a tenant"): the tenant's rows
 * (`column = T`) whose split column falls in sub-unit k of `split.ways` (the directory's K): each
 * table listed carries its split column (UnitTableSelector.subUnit), and every statement that
 * selects the unit's rows appends its conjunct (lib/shard/split-sql.ts). The blob index is not
 * listed: a split tenant holds no blobs (`tenant split` refuses one that does).
 */
function subUnitRows(config: UnitRowsConfig, unit: string, tenant: string, path: number[], split?: { ways: number }): UnitRows {
  if (path.length !== 1) throw invalidInput(`unit ${unit} is a sub-unit of a sub-unit: only a tenant splits (one level)`);
  if (!split) throw invalidInput(`unit ${unit} is a split sub-unit, and the split of ${tenant} is not known (no split in the directory)`);
  const index = path[0];
  if (!Number.isInteger(split.ways) || split.ways < 2 || index >= split.ways) {
    throw invalidInput(`unit ${unit} is not a sub-unit of ${tenant}, which is split ${split.ways} ways (${tenant}:0 .. ${tenant}:${split.ways - 1})`);
  }
  const t = config.tenant;
  return {
    unit,
    kind: 'tenant',
    column: t.column,
    value: tenant,
    tables: { column: t.column, schemas: t.schemas, tables: t.tables, subUnit: { ways: split.ways, index, columns: { ...(t.splitColumns ?? {}) } } },
    subUnit: { tenant, ways: split.ways, index },
  };
}

/** The tables of a dataset: those with its bucket and key columns and without the tenant column, and its blob index. */
export function datasetTables(config: UnitRowsConfig, ds: DatasetConfig): UnitTableSelector {
  return {
    column: ds.bucketColumn,
    alsoColumn: ds.column,
    withoutColumn: config.tenant.column,
    schemas: config.tenant.schemas,
    tables: ds.tables,
    indexTable: bucketBlobIndexTable(ds.name),
  };
}

/** The blob index of bucketed dataset `dataset` (lib/blobs/index-table.ts): one of its tables, in schema shardctl. */
export function bucketBlobIndexTable(dataset: string): string {
  return `shardctl.blob_index_${dataset}`;
}

const quoteIdent = (s: string) => `"${s.replace(/"/g, '""')}"`;
const quoteLiteral = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** The unit's row predicate as SQL over `alias` (what every row-selecting statement of a move means). */
export function unitRowPredicateSql(rows: UnitRows, alias?: string, table?: TenantTable): string {
  const col = `${alias ? `${alias}.` : ''}${quoteIdent(rows.column)}`;
  if (rows.subUnit && !table?.split) throw invalidInput(`unit ${rows.unit} is a sub-unit: its predicate is per table (pass a table listed for it)`);
  return rows.kind === 'tenant' ? `${col} = ${quoteLiteral(rows.value)}${subUnitClauseSql(table?.split, alias)}` : `${col} = ${Number(rows.value)}`;
}

/**
 * A row's unit name as a SQL expression over its bucket column (`row` is `new` or `old`), every
 * function and operator schema-qualified: what the fence triggers compare with the transaction's
 * checked unit, and what the write audit records. Agrees with bucketUnitName for 0 ≤ n < B.
 */
export function bucketUnitSqlExpr(ds: Pick<DatasetConfig, 'name' | 'buckets' | 'bucketColumn'>, row: string): string {
  const width = String(ds.buckets - 1).length;
  return (
    `(${quoteLiteral(`bucket:${ds.name}:`)}::pg_catalog.text operator(pg_catalog.||) ` +
    `pg_catalog.lpad((${row}.${quoteIdent(ds.bucketColumn)})::pg_catalog.text, ${width}, '0'))`
  );
}

/** The CHECK that binds a dataset table's bucket column to its key (what `shards prepare` requires). */
export function bucketCheckSql(ds: Pick<DatasetConfig, 'column' | 'buckets' | 'bucketColumn'>): string {
  return `check (${quoteIdent(ds.bucketColumn)} = shardctl.bucket_of((${quoteIdent(ds.column)})::text, ${ds.buckets}))`;
}

/** A unit name of a kind a move knows (a tenant or a bucket), as the operator typed it; InvalidInput otherwise. */
export function validateUnitName(unit: unknown): string {
  if (typeof unit !== 'string' || unit.length === 0) throw invalidInput('unit is empty');
  if (unit.length > 63) throw invalidInput(`unit ${JSON.stringify(unit.slice(0, 80))} is longer than 63 characters`);
  const p = parseUnit(unit);
  if (p.kind === 'tenant' && p.path.length > 1) throw invalidInput(`unit ${unit} is a sub-unit of a sub-unit: only a tenant splits (one level)`);
  return unit;
}

/**
 * `--tenant T` or `--unit U` (exactly one) as the unit a move command acts on; with `config`, a
 * bucket must be one of a configured dataset, in its canonical name (refused before anything is sent).
 */
export function unitFromOptions(o: { tenant?: string; unit?: string }, validateTenant: (id: unknown) => string, config?: UnitRowsConfig): string {
  if ((o.tenant === undefined) === (o.unit === undefined)) throw invalidInput('name exactly one of --tenant <id> and --unit <unit>');
  if (o.tenant !== undefined) return validateTenant(o.tenant);
  const unit = validateUnitName(o.unit);
  // A sub-unit's K is the directory's: `move plan` checks it there (rowsOf).
  const p = parseUnit(unit);
  if (config && !(p.kind === 'tenant' && p.path.length > 0)) unitRows(config, unit);
  return unit;
}
