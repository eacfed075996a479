// Binds a source relation (pgoutput) to the target table's columns and builds the apply SQL.
// Pure. Invariants: generated columns are never written; every value is a parameter cast to the
// target column's own type (so text from pgoutput is parsed exactly as PostgreSQL would); rows are
// addressed by the target's primary key only.
import { ShardctlError } from '../errors';
import { qualifiedName, quoteIdent } from './sql';

export interface TargetColumn {
  name: string;
  /** format_type() of the column, schema-qualified (resolved under an empty search_path). */
  type: string;
  generated: boolean;
  identityAlways: boolean;
}

export interface TargetTable {
  schema: string;
  name: string;
  columns: TargetColumn[];
  /** Primary key column names in key order. */
  primaryKey: string[];
  /**
   * Changes to different keys of this table commute, with each other and with other tables'
   * (target-tables.ts says when), so the applier may batch them out of source order. Absent: no.
   */
  independentKeys?: boolean;
  /**
   * COPY writes this table as INSERT would: no row-level security (COPY FROM refuses it) and no
   * INSERT rule (COPY ignores rules), on the table or any partition. Absent: no.
   */
  copyable?: boolean;
}

export interface SourceRelationShape {
  schema: string;
  name: string;
  columns: { name: string }[];
}

export interface BoundColumn {
  /** Index of the value in the pgoutput tuple. */
  src: number;
  name: string;
  type: string;
  isPk: boolean;
  /** GENERATED ALWAYS AS IDENTITY: never changes after insert (not even on the source), and cannot be SET. */
  identityAlways: boolean;
}

export interface RelationPlan {
  display: string;
  table: string;
  /** Source columns written on the target (generated columns excluded), in source order. */
  writable: BoundColumn[];
  /** Primary key columns in key order. */
  pk: BoundColumn[];
  /** `pk`'s indexes in the pgoutput tuple. */
  pkSrc: number[];
  /** GENERATED ALWAYS AS IDENTITY columns take the source's value, which needs OVERRIDING SYSTEM VALUE. */
  overridingSystemValue: boolean;
  /** TargetTable.independentKeys. */
  independentKeys: boolean;
  /** TargetTable.copyable. */
  copyable: boolean;
}

export function bindRelation(rel: SourceRelationShape, target: TargetTable): RelationPlan {
  const display = `${rel.schema}.${rel.name}`;
  if (target.primaryKey.length === 0) {
    throw new ShardctlError(
      'PreconditionFailed',
      `table ${display} has no primary key on the target: changes are applied by key (hint: ALTER TABLE ${display} ADD PRIMARY KEY (...))`,
    );
  }
  const byName = new Map(target.columns.map((c) => [c.name, c]));
  const srcIndex = new Map(rel.columns.map((c, i) => [c.name, i]));
  const pkSet = new Set(target.primaryKey);
  const writable: BoundColumn[] = [];
  let overriding = false;
  rel.columns.forEach((c, i) => {
    const t = byName.get(c.name);
    if (!t) {
      throw new ShardctlError('PreconditionFailed', `column ${c.name} of ${display} exists on the source but not on the target: the schemas differ`, {
        table: display,
        column: c.name,
      });
    }
    if (t.generated) return; // the target computes it from the columns we write
    if (t.identityAlways) overriding = true;
    writable.push({ src: i, name: c.name, type: t.type, isPk: pkSet.has(c.name), identityAlways: t.identityAlways });
  });
  const pk = target.primaryKey.map((name) => {
    const i = srcIndex.get(name);
    if (i === undefined) {
      throw new ShardctlError('PreconditionFailed', `primary key column ${name} of ${display} is not published by the source`, {
        table: display,
        column: name,
      });
    }
    const t = byName.get(name)!;
    return { src: i, name, type: t.type, isPk: true, identityAlways: t.identityAlways };
  });
  return {
    display,
    table: qualifiedName({ schema: target.schema, name: target.name }),
    writable,
    pk,
    pkSrc: pk.map((c) => c.src),
    overridingSystemValue: overriding,
    independentKeys: target.independentKeys === true,
    copyable: target.copyable === true,
  };
}

const param = (n: number, c: BoundColumn) => `$${n}::${c.type}`;

function keyPredicate(plan: RelationPlan, firstParam: number): string {
  return plan.pk.map((c, i) => `${quoteIdent(c.name)} = ${param(firstParam + i, c)}`).join(' AND ');
}

/** INSERT ... ON CONFLICT (pk) DO UPDATE: parameters are `cols` values in order. */
export function upsertSql(plan: RelationPlan, cols: BoundColumn[]): string {
  const names = cols.map((c) => quoteIdent(c.name)).join(', ');
  const values = cols.map((c, i) => param(i + 1, c)).join(', ');
  const conflict = plan.pk.map((c) => quoteIdent(c.name)).join(', ');
  const sets = cols.filter((c) => !c.isPk && !c.identityAlways).map((c) => `${quoteIdent(c.name)} = EXCLUDED.${quoteIdent(c.name)}`);
  const overriding = plan.overridingSystemValue ? ' OVERRIDING SYSTEM VALUE' : '';
  const action = sets.length ? `DO UPDATE SET ${sets.join(', ')}` : 'DO NOTHING';
  return `INSERT INTO ${plan.table} (${names})${overriding} VALUES (${values}) ON CONFLICT (${conflict}) ${action}`;
}

/** Columns an UPDATE may set: identity-always columns are refused by PostgreSQL (and never change). */
export function settable(cols: BoundColumn[]): BoundColumn[] {
  return cols.filter((c) => !c.identityAlways);
}

/**
 * Many-row upsert with one parameter per column: a text[] of that column's values across the rows,
 * each element cast to the column type (the same input function as a single parameter). The text
 * does not depend on the row count, so one prepared statement serves every batch. Rows must have
 * distinct keys (ON CONFLICT DO UPDATE cannot touch a row twice in one statement).
 */
export function upsertManySql(plan: RelationPlan, cols: BoundColumn[]): string {
  const names = cols.map((c) => quoteIdent(c.name)).join(', ');
  const arrays = cols.map((_, i) => `$${i + 1}::text[]`).join(', ');
  const aliases = cols.map((_, i) => `c${i + 1}`);
  const select = cols.map((c, i) => `u.${aliases[i]}::${c.type}`).join(', ');
  const conflict = plan.pk.map((c) => quoteIdent(c.name)).join(', ');
  const sets = cols.filter((c) => !c.isPk && !c.identityAlways).map((c) => `${quoteIdent(c.name)} = EXCLUDED.${quoteIdent(c.name)}`);
  const overriding = plan.overridingSystemValue ? ' OVERRIDING SYSTEM VALUE' : '';
  const action = sets.length ? `DO UPDATE SET ${sets.join(', ')}` : 'DO NOTHING';
  return `INSERT INTO ${plan.table} (${names})${overriding} SELECT ${select} FROM unnest(${arrays}) AS u(${aliases.join(', ')}) ON CONFLICT (${conflict}) ${action}`;
}

/** COPY ... FROM STDIN (text format) of `cols`, in order. Identity columns take the given values (COPY overrides). */
export function copyInSql(plan: RelationPlan, cols: BoundColumn[]): string {
  return `COPY ${plan.table} (${cols.map((c) => quoteIdent(c.name)).join(', ')}) FROM STDIN`;
}

/** UPDATE ... SET cols WHERE pk: parameters are `set` values, then the key values. */
export function updateSql(plan: RelationPlan, set: BoundColumn[]): string {
  if (set.length === 0) throw new Error('updateSql needs at least one column to set');
  if (set.some((c) => c.identityAlways)) throw new Error('updateSql cannot set a GENERATED ALWAYS identity column');
  const sets = set.map((c, i) => `${quoteIdent(c.name)} = ${param(i + 1, c)}`).join(', ');
  return `UPDATE ${plan.table} SET ${sets} WHERE ${keyPredicate(plan, set.length + 1)}`;
}

export function deleteSql(plan: RelationPlan): string {
  return `DELETE FROM ${plan.table} WHERE ${keyPredicate(plan, 1)}`;
}

export function existsSql(plan: RelationPlan): string {
  return `SELECT 1 FROM ${plan.table} WHERE ${keyPredicate(plan, 1)}`;
}

/** Parameters are one text[] per key column; the key join of the batched statements below. */
function keyJoin(plan: RelationPlan, alias: string, firstArray: number): { arrays: string[]; aliases: string[]; where: string } {
  const aliases = plan.pk.map((_, i) => `k${i + 1}`);
  const arrays = plan.pk.map((_, i) => `$${firstArray + i}::text[]`);
  const where = plan.pk.map((c, i) => `${alias}.${quoteIdent(c.name)} = u.${aliases[i]}::${c.type}`).join(' AND ');
  return { arrays, aliases, where };
}

/** Many-row DELETE by key: parameters are one text[] per key column (distinct keys). */
export function deleteManySql(plan: RelationPlan): string {
  const k = keyJoin(plan, 'x', 1);
  return `DELETE FROM ${plan.table} AS x USING unnest(${k.arrays.join(', ')}) AS u(${k.aliases.join(', ')}) WHERE ${k.where}`;
}

/**
 * Many-row UPDATE in place by key (rows whose unchanged TOAST values are absent): parameters are
 * one text[] per `set` column, then one per key column. Keys must be distinct (an UPDATE ... FROM
 * that matches a row twice changes it once, with either value). Rows missing on the target match
 * nothing: the statement's row count says how many were there.
 */
export function updateManySql(plan: RelationPlan, set: BoundColumn[]): string {
  if (set.length === 0) throw new Error('updateManySql needs at least one column to set');
  if (set.some((c) => c.identityAlways || c.isPk)) throw new Error('updateManySql sets neither key nor GENERATED ALWAYS identity columns');
  const values = set.map((_, i) => `c${i + 1}`);
  const k = keyJoin(plan, 'x', set.length + 1);
  const arrays = [...set.map((_, i) => `$${i + 1}::text[]`), ...k.arrays];
  const sets = set.map((c, i) => `${quoteIdent(c.name)} = u.${values[i]}::${c.type}`).join(', ');
  return `UPDATE ${plan.table} AS x SET ${sets} FROM unnest(${arrays.join(', ')}) AS u(${[...values, ...k.aliases].join(', ')}) WHERE ${k.where}`;
}
