// Policy that travels with a unit (issue 13): its residency, the regions it may live in. Recorded
// in the directory beside the placement, not in it, so setting it never raises the unit's epoch.
// Every placement decision consults it: tenant create, move plan and the move's reservation (the
// authoritative check, in the reservation's transaction), rebalance, drain and isolate. A shard
// with no region recorded is in no region: a resident unit never goes there (fail closed).
// The rules themselves, pure, are lib/directory/residency.ts.
import type { Pool } from 'pg';
import type { Queryable } from './db';
import { inDirectoryTransaction } from './db';
import { ShardctlError } from '../errors';
import { withinResidency, type Residency } from './residency';

export async function getResidency(db: Queryable, unit: string): Promise<Residency> {
  const r = await db.query('select regions from shardctl.unit_policy where unit = $1', [unit]);
  return r.rowCount ? (r.rows[0].regions as string[]) : null;
}

/** Every unit's residency (units without one are absent). */
export async function listResidency(db: Queryable): Promise<Map<string, string[]>> {
  const r = await db.query('select unit, regions from shardctl.unit_policy');
  return new Map(r.rows.map((x) => [x.unit as string, x.regions as string[]]));
}

export interface ResidencyChange {
  unit: string;
  before: Residency;
  after: Residency;
  /** The unit's shard, and whether it is outside the new residency (then a rebalance moves it). */
  shard: string;
  region: string | null;
  compliant: boolean;
}

/**
 * Sets (regions) or clears (null) a unit's residency, audited. The unit must be in the directory.
 * A unit on a shard outside its new residency stays there (nothing moves by itself): the change
 * says so, and `rebalance plan` proposes the move.
 */
export async function setResidency(pool: Pool, unit: string, regions: string[] | null, who: { actor: string; reason?: string }): Promise<ResidencyChange> {
  return inDirectoryTransaction(pool, async (c) => {
    const p = await c.query(
      `select u.shard, s.region from shardctl.units u left join shardctl.shards s on s.name = u.shard where u.unit = $1 for update of u`,
      [unit],
    );
    if (!p.rowCount) throw new ShardctlError('NotFound', `no unit ${unit} in the directory: create the tenant first`);
    const before = await getResidency(c, unit);
    if (regions) {
      await c.query(
        `insert into shardctl.unit_policy(unit, regions, updated_by) values ($1, $2, $3)
         on conflict (unit) do update set regions = excluded.regions, updated_at = now(), updated_by = excluded.updated_by`,
        [unit, regions, who.actor],
      );
    } else {
      await c.query('delete from shardctl.unit_policy where unit = $1', [unit]);
    }
    await c.query('insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, $2, $3, $4, $5)', [
      who.actor,
      'policy.residency',
      unit,
      JSON.stringify({ before, after: regions }),
      who.reason ?? null,
    ]);
    const region = (p.rows[0].region as string | null) ?? null;
    return { unit, before, after: regions, shard: p.rows[0].shard, region, compliant: withinResidency(region, regions) };
  });
}
