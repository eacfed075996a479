// A routing unit's rows: which tables hold them and the one predicate that selects them. Every
// part of a move that touches rows (copy, the publication's row filter, apply, validation, the
// fence triggers, retire's delete, counts, sequences) selects a unit's rows as
// `<column> = <value>`, so a tenant and a bucket move the same way (docs/architecture.md, "Buckets"):
//   tenant  <tenant>                tenant tables   tenant_col = '<tenant>'
//   bucket  bucket:<dataset>:<n>    dataset tables  <bucket column> = n
// A bucket column is an ordinary stored int column (not GENERATED: PostgreSQL 15's pgoutput does not
// send generated columns, and the apply addresses rows by a primary key that it leads), bound to the
// key by a CHECK constraint, so no row can sit in a bucket its key does not hash to. Pure.
import { invalidInput } from './errors';
import { parseUnit, bucketUnitName, type BucketDataset } from './buckets/units';
import type { UnitTableSelector } from './shard/tables';

/** A dataset as config.datasets holds it (lib/config.ts). */
export interface DatasetConfig extends BucketDataset {
  bucketColumn: string;
  tables?: string[];
}

/** The parts of Config this module reads (tests can build one without a whole config). */
export interface UnitRowsConfig {
  tenant: { column: string; schemas: string[]; tables?: string[] };
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
}

/** The rows of `unit` (throws InvalidInput for a name of no kind, or a bucket of no configured dataset). */
export function unitRows(config: UnitRowsConfig, unit: string): UnitRows {
  const p = parseUnit(unit);
  if (p.kind === 'tenant') {
    if (p.path.length > 0) throw invalidInput(`unit ${unit} is a split sub-unit: moving sub-units is not supported yet`);
    const t = config.tenant;
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

/** The tables of a dataset: those with its bucket and key columns and without the tenant column. */
export function datasetTables(config: UnitRowsConfig, ds: DatasetConfig): UnitTableSelector {
  return { column: ds.bucketColumn, alsoColumn: ds.column, withoutColumn: config.tenant.column, schemas: config.tenant.schemas, tables: ds.tables };
}

const quoteIdent = (s: string) => `"${s.replace(/"/g, '""')}"`;
const quoteLiteral = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** The unit's row predicate as SQL over `alias` (what every row-selecting statement of a move means). */
export function unitRowPredicateSql(rows: UnitRows, alias?: string): string {
  const col = `${alias ? `${alias}.` : ''}${quoteIdent(rows.column)}`;
  return rows.kind === 'tenant' ? `${col} = ${quoteLiteral(rows.value)}` : `${col} = ${Number(rows.value)}`;
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
  if (p.kind === 'tenant' && p.path.length > 0) throw invalidInput(`unit ${unit} is a split sub-unit: moving sub-units is not supported yet`);
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
  if (config) unitRows(config, unit);
  return unit;
}
