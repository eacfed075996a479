// Sequences follow the tenant (DESIGN.md §5.9). Copy and apply write explicit ids, so a moved
// unit's rows arrive on its new owner without moving that shard's sequences; its next insert
// would draw an id it already holds. Before the switch, every sequence that feeds a column of a
// moved table on the next owner is advanced past the unit's largest value there. A sequence is
// never moved backwards: the next owner's other tenants draw from it too.
import type { Pool, PoolClient } from 'pg';
import type { TenantTable } from './tables';
import { quoteIdent } from './tables';

type Db = Pool | PoolClient;

export interface FeedingSequence {
  /** The table as `TenantTable.qualified`. */
  table: string;
  column: string;
  /** `"schema"."name"` of the sequence. */
  sequence: string;
}

/**
 * Sequences feeding a column of `tables` on this server, from the catalog: serial/bigserial
 * (owned by the column, pg_depend 'a'), identity (pg_depend 'i') and any column default that
 * calls nextval (the default depends on the sequence). Tables missing here are skipped.
 */
export async function feedingSequences(db: Db, tables: TenantTable[]): Promise<FeedingSequence[]> {
  if (tables.length === 0) return [];
  const r = await db.query(
    `with rel as (select q, pg_catalog.to_regclass(q) as oid from pg_catalog.unnest($1::text[]) q),
     feeds as (
       select rel.q, d.refobjsubid as attnum, d.objid as seq
         from rel join pg_catalog.pg_depend d
           on d.classid = 'pg_catalog.pg_class'::regclass and d.refclassid = 'pg_catalog.pg_class'::regclass
          and d.refobjid = rel.oid and d.refobjsubid > 0 and d.deptype in ('a', 'i')
       union
       select rel.q, ad.adnum, d.refobjid
         from rel join pg_catalog.pg_attrdef ad on ad.adrelid = rel.oid
         join pg_catalog.pg_depend d
           on d.classid = 'pg_catalog.pg_attrdef'::regclass and d.objid = ad.oid and d.refclassid = 'pg_catalog.pg_class'::regclass)
     select distinct f.q as table, a.attname as column, pg_catalog.format('%I.%I', n.nspname, s.relname) as sequence
       from feeds f
       join rel on rel.q = f.q
       join pg_catalog.pg_class s on s.oid = f.seq and s.relkind = 'S'
       join pg_catalog.pg_namespace n on n.oid = s.relnamespace
       join pg_catalog.pg_attribute a on a.attrelid = rel.oid and a.attnum = f.attnum and not a.attisdropped
      order by 1, 2, 3`,
    [tables.map((t) => t.qualified)],
  );
  return r.rows.map((x) => ({ table: x.table, column: x.column, sequence: x.sequence }));
}

/**
 * Columns a sequence feeds on the source but none feeds on the target (tables missing on the
 * target are the schema check's to name): after the switch the tenant's inserts that leave the
 * column to its default would fail there. Pure.
 */
export function unfedOnTarget(source: FeedingSequence[], target: FeedingSequence[], sourceName: string, targetName: string): string[] {
  const fed = new Set(target.map((f) => `${f.table}\u0000${f.column}`));
  const seen = new Set<string>();
  const out: string[] = [];
  for (const f of source) {
    const k = `${f.table}\u0000${f.column}`;
    if (fed.has(k) || seen.has(k)) continue;
    seen.add(k);
    out.push(
      `table ${f.table} column ${f.column} is fed by sequence ${f.sequence} on ${sourceName} but by none on ${targetName}: the tenant's inserts without an explicit ${f.column} would fail after the move; give the column the same default (or identity) on ${targetName}`,
    );
  }
  return out;
}

export interface SequenceAdvance extends FeedingSequence {
  /** The unit's largest value in the column (null: the unit has no rows there). */
  unitMax: string | null;
  /** What the sequence would have handed out next before, and after. */
  nextBefore: string;
  nextAfter: string;
}

/**
 * Advances `s` so its next value exceeds the unit's largest value in the column, never backwards:
 * `setval(seq, max + 1, false)` only when the sequence's next value is not already past it. The
 * check and the set are one statement; nextval is not transactional, so a concurrent draw of
 * the other tenants in between could at worst see the sequence set to exactly max + 1, which
 * it had not reached (a draw beyond it means the set is skipped). Descending sequences are left
 * alone (reported with nextAfter = nextBefore).
 */
export async function advanceSequencePast(db: Db, s: FeedingSequence, tenantColumn: string, unit: string): Promise<SequenceAdvance> {
  // Index-backed when the column follows the tenant column in a key (the usual (tenant_id, id)).
  const m = await db.query(`select pg_catalog.max(x.${quoteIdent(s.column)})::text as m from ${s.table} x where x.${quoteIdent(tenantColumn)} = $1`, [unit]);
  const unitMax: string | null = m.rows[0].m;
  const r = await db.query(
    `select (case when q.is_called then q.last_value + p.seqincrement else q.last_value end)::text as next_before,
            case when p.seqincrement > 0 and $2::numeric is not null
                  and (case when q.is_called then q.last_value + p.seqincrement else q.last_value end) <= $2::numeric
                 then pg_catalog.setval($1::regclass, ($2::numeric + 1)::bigint, false)::text end as set_to
       from ${s.sequence} q, pg_catalog.pg_sequence p where p.seqrelid = $1::regclass`,
    [s.sequence, unitMax],
  );
  const nextBefore: string = r.rows[0].next_before;
  const setTo: string | null = r.rows[0].set_to;
  return { ...s, unitMax, nextBefore, nextAfter: setTo ?? nextBefore };
}

/** Every sequence feeding `tables` on this server, advanced past the unit's values (see above). */
export async function advanceSequencesForUnit(db: Db, tables: TenantTable[], tenantColumn: string, unit: string): Promise<SequenceAdvance[]> {
  const out: SequenceAdvance[] = [];
  for (const s of await feedingSequences(db, tables)) out.push(await advanceSequencePast(db, s, tenantColumn, unit));
  return out;
}
