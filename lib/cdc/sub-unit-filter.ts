// A sub-unit move's stream filter (docs/architecture.md, "Splitting a tenant"). The publication
// filters on the tenant only: PostgreSQL 15 refuses the split expression in a row filter
// (convert_to is not immutable). So the applier keeps a change only when its row is in the moved
// sub-unit, by the same hash in Node (tenantUnitForRow) that the shard's fence computes in SQL, and
// drops the other sub-units' changes. Fail closed: a change whose sub-unit cannot be told (no split
// column value, an unchanged TOAST one, a NULL), of another tenant, or an UPDATE that moves a row
// between the moved sub-unit and another (the fence refuses such a write, SC403) stops the apply
// with the reason; nothing is guessed. Node (hashing); no I/O.
import { ShardctlError } from '../errors';
import { tenantUnitForRow } from '../buckets/route';
import { UNCHANGED_TOAST, type Datum, type PgoutputMessage, type Relation } from './pgoutput';

export interface SubUnitStream {
  /** The moved sub-unit, `T:k`. */
  unit: string;
  tenant: string;
  tenantColumn: string;
  ways: number;
  /** `schema.table` → its split column (config.tenant.splitColumns). */
  columns: Record<string, string>;
}

type Change = Extract<PgoutputMessage, { tag: 'insert' | 'update' | 'delete' }>;

/** 'keep' a change of the moved sub-unit, 'drop' one of another sub-unit; throws when it cannot tell or the row changes sub-unit. */
export function subUnitVerdict(f: SubUnitStream, msg: Change): 'keep' | 'drop' {
  const rel = msg.relation;
  const verdict = (unit: string) => (unit === f.unit ? 'keep' : 'drop');
  if (msg.tag === 'insert') return verdict(unitOf(f, rel, msg.newTuple, null, 'INSERT'));
  if (msg.tag === 'delete') return verdict(unitOf(f, rel, msg.oldTuple, null, 'DELETE'));
  const after = unitOf(f, rel, msg.newTuple, msg.oldTuple, 'UPDATE');
  if (msg.oldTuple) {
    const before = unitOf(f, rel, msg.oldTuple, null, 'UPDATE');
    if ((before === f.unit) !== (after === f.unit)) {
      throw new ShardctlError(
        'PreconditionFailed',
        `an UPDATE on ${rel.schema}.${rel.name} moved a row of tenant ${f.tenant} from ${before} to ${after}: a row cannot change sub-unit (the fence refuses such a write, SC403), so this stream cannot be applied as the move of ${f.unit}`,
        { table: `${rel.schema}.${rel.name}`, from: before, to: after },
      );
    }
  }
  return verdict(after);
}

/** The row's sub-unit; `fallback` (an UPDATE's old key) supplies a split column the new tuple left unchanged. */
function unitOf(f: SubUnitStream, rel: Relation, row: Datum[], fallback: Datum[] | null, what: string): string {
  const table = `${rel.schema}.${rel.name}`;
  const col = f.columns[table];
  if (col === undefined) throw refusal(f, table, `${table} has no split column in config.tenant.splitColumns`);
  const ti = rel.columns.findIndex((c) => c.name === f.tenantColumn);
  const si = rel.columns.findIndex((c) => c.name === col);
  if (ti < 0 || si < 0) throw refusal(f, table, `the stream's ${table} has no column ${ti < 0 ? f.tenantColumn : col}`);
  const tenant = row[ti];
  if (tenant !== f.tenant) {
    throw refusal(
      f,
      table,
      `a ${what} of ${typeof tenant === 'string' ? `tenant ${tenant}` : 'a row whose tenant is not sent'} came through a stream filtered on tenant ${f.tenant}`,
    );
  }
  let v = row[si];
  if (v === UNCHANGED_TOAST && fallback && typeof fallback[si] === 'string') v = fallback[si];
  if (typeof v !== 'string') {
    throw refusal(
      f,
      table,
      `a ${what} of tenant ${f.tenant} does not carry its split column ${col} (${v === null ? 'NULL or not in the replica identity' : 'an unchanged TOAST value'}): its sub-unit cannot be told`,
    );
  }
  return tenantUnitForRow(f.tenant, v, new Map([[f.tenant, f.ways]]));
}

const refusal = (f: SubUnitStream, table: string, why: string) =>
  new ShardctlError('PreconditionFailed', `${why}; the move of ${f.unit} stops here rather than guess`, { table, unit: f.unit });
