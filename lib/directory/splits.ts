// Tenant splits in the directory (docs/architecture.md, "Splitting a tenant"): one compare-and-set
// turns the active placement of a tenant (shard S, epoch e) into K sub-unit placements T:0 ..
// T:K-1 on S at epoch e + 1, records the split (shardctl.splits), carries the tenant's residency
// policy to each sub-unit, bumps the generation once, audits it and announces every change. A
// moving tenant, one with a move not yet ended (soak included: its source is the way back) or an
// open reservation is refused with the reason; a lost race is an answer, never an overwrite.
import type { Pool } from 'pg';
import { ShardctlError, invalidInput } from '../errors';
import { Queryable, onDirectory, poolDsn, inDirectoryTransaction } from './db';
import { MOVE_END_AUDIT_ACTIONS } from './moves';
import { PLACEMENT_CHANNEL, rowToPlacement, type Placement } from './placements';
import { splitUnitName } from '../buckets/units';

export interface TenantSplit {
  unit: string;
  ways: number;
  shard: string;
  parentEpoch: number;
  splitAt: string;
  splitBy: string;
}

export type SplitPlacementResult = { ok: true; units: Placement[]; generation: number } | { ok: false; reason: string; current: Placement | undefined };

const rowToSplit = (r: any): TenantSplit => ({
  unit: r.unit,
  ways: Number(r.ways),
  shard: r.shard,
  parentEpoch: Number(r.parent_epoch),
  splitAt: r.split_at instanceof Date ? r.split_at.toISOString() : String(r.split_at),
  splitBy: r.split_by,
});

export async function getSplit(db: Queryable, unit: string): Promise<TenantSplit | undefined> {
  return onDirectory(async () => {
    const r = await db.query('select unit, ways, shard, parent_epoch, split_at, split_by from shardctl.splits where unit = $1', [unit]);
    return r.rowCount ? rowToSplit(r.rows[0]) : undefined;
  }, poolDsn(db));
}

/** Every split in force, by tenant. */
export async function listSplits(db: Queryable): Promise<Map<string, TenantSplit>> {
  return onDirectory(async () => {
    const r = await db.query('select unit, ways, shard, parent_epoch, split_at, split_by from shardctl.splits');
    return new Map(r.rows.map((x) => [x.unit as string, rowToSplit(x)]));
  }, poolDsn(db));
}

class Refused {
  constructor(readonly reason: string) {}
}

/**
 * Compare-and-set: splits `unit` into `ways` sub-units only if its placement is still exactly
 * (expect.shard, expect.epoch, active) and nothing moves it. The sub-units start where it is.
 */
export async function splitPlacement(
  pool: Pool,
  unit: string,
  ways: number,
  expect: { shard: string; epoch: number },
  audit: { actor: string; reason?: string },
): Promise<SplitPlacementResult> {
  if (!audit.actor?.trim()) throw invalidInput('audit actor is required');
  const units = Array.from({ length: ways }, (_, k) => splitUnitName(unit, k));
  try {
    return await inDirectoryTransaction(pool, async (c) => {
      const cur = await c.query(`select unit, kind, shard, epoch, state, move_id, expected_load, updated_at from shardctl.units where unit = $1 for update`, [
        unit,
      ]);
      const p = cur.rowCount ? rowToPlacement(cur.rows[0]) : undefined;
      if (!p || p.kind !== 'tenant' || p.shard !== expect.shard || p.epoch !== expect.epoch || p.state !== 'active') {
        throw new Refused(
          p
            ? `${unit} is now ${p.state} on ${p.shard} at epoch ${p.epoch}, not active on ${expect.shard} at epoch ${expect.epoch}`
            : `${unit} has no placement any more`,
        );
      }
      const moving = await c.query(
        `select m.move_id, m.status from shardctl.moves m
          where m.unit = $1
            and not exists (select 1 from shardctl.audit a where a.unit = m.unit and a.detail->>'moveId' = m.move_id and a.action = any($2::text[]))
          order by m.created_at limit 1`,
        [unit, [...MOVE_END_AUDIT_ACTIONS]],
      );
      if (moving.rowCount) {
        throw new Refused(`${unit} has a move that has not ended (${moving.rows[0].move_id}, ${moving.rows[0].status}): finish, cancel or retire it first`);
      }
      const reserved = await c.query('select 1 from shardctl.reservations where unit = $1 and released_at is null', [unit]);
      if (reserved.rowCount) throw new Refused(`${unit} has an open reservation of a move: wait for it to end`);
      await c.query('delete from shardctl.units where unit = $1', [unit]);
      const load = Math.ceil(p.expectedLoad / ways);
      const ins = await c.query(
        `insert into shardctl.units(unit, kind, shard, epoch, state, move_id, expected_load, updated_at)
         select u, 'tenant', $2, $3, 'active', null, $4, now() from unnest($1::text[]) as x(u)
         returning unit, kind, shard, epoch, state, move_id, expected_load, updated_at`,
        [units, p.shard, p.epoch + 1, load],
      );
      await c.query('insert into shardctl.splits(unit, ways, shard, parent_epoch, split_by) values ($1, $2, $3, $4, $5)', [
        unit,
        ways,
        p.shard,
        p.epoch,
        audit.actor,
      ]);
      // Policy travels with the unit: each sub-unit may live only where the tenant might.
      await c.query(
        `insert into shardctl.unit_policy(unit, regions, updated_by)
         select u, p.regions, $3 from shardctl.unit_policy p cross join unnest($2::text[]) as x(u) where p.unit = $1
         on conflict (unit) do nothing`,
        [unit, units, audit.actor],
      );
      const generation = Number((await c.query('update shardctl.generation set value = value + 1 returning value')).rows[0].value);
      const detail = { shard: p.shard, ways, from: { epoch: p.epoch, state: p.state }, units, epoch: p.epoch + 1, generation };
      await c.query('insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, $2, $3, $4, $5)', [
        audit.actor,
        'tenant.split',
        unit,
        JSON.stringify(detail),
        audit.reason ?? null,
      ]);
      await c.query('select pg_notify($1, $2)', [PLACEMENT_CHANNEL, JSON.stringify({ unit, shard: null, generation })]);
      await c.query(
        `select pg_notify($1, json_build_object('unit', u, 'shard', $3::text, 'epoch', $4::bigint, 'state', 'active', 'generation', $5::bigint)::text)
           from unnest($2::text[]) as x(u)`,
        [PLACEMENT_CHANNEL, units, p.shard, p.epoch + 1, generation],
      );
      return { ok: true as const, units: ins.rows.map(rowToPlacement).sort((a, b) => units.indexOf(a.unit) - units.indexOf(b.unit)), generation };
    });
  } catch (e) {
    if (e instanceof Refused) {
      const r = await pool.query(`select unit, kind, shard, epoch, state, move_id, expected_load, updated_at from shardctl.units where unit = $1`, [unit]);
      return { ok: false, reason: e.reason, current: r.rowCount ? rowToPlacement(r.rows[0]) : undefined };
    }
    if ((e as any)?.code === '23505')
      throw new ShardctlError('Conflict', `a sub-unit of ${unit} or its split already exists in the directory; nothing was changed`);
    throw e;
  }
}
