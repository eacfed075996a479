// Plans from the directory as it is now: the shards of the config's allowlist (status, capacity,
// dedication from the shards table) and every tenant unit's placement and expected load.
// Node-only (reads the directory); the arithmetic is lib/rebalance/plan.ts.
import type { Queryable } from '../directory/db';
import type { Config } from '../config';
import { listShards } from '../directory/shards';
import { listPlacements } from '../directory/placements';
import { listOpenReservations } from '../directory/reservations';
import { listResidency } from '../directory/policy';
import { planMoves, type PlanOptions, type PlanScope, type RebalancePlan } from './plan';

export async function planFromDirectory(directory: Queryable, config: Config, scope: PlanScope, opts: PlanOptions = {}): Promise<RebalancePlan> {
  const known = new Set(config.shards.map((s) => s.name));
  const shards = (await listShards(directory)).filter((s) => known.has(s.name));
  // Tenant units first (issue 13): bucket units are not yet registered in the directory.
  const { placements } = await listPlacements(directory, { kind: 'tenant' });
  // A unit whose move holds a reservation is in flight (even before its freeze): never planned again.
  const inFlight = new Set((await listOpenReservations(directory)).map((r) => r.unit));
  const residency = await listResidency(directory);
  return planMoves(
    shards.map((s) => ({
      name: s.name,
      capacity: s.capacity,
      status: s.status,
      dedicatedTo: s.dedicatedTo,
      class: s.class,
      reserved: s.reserved,
      region: s.region,
    })),
    placements.map((p) => ({
      unit: p.unit,
      shard: p.shard,
      load: p.expectedLoad,
      state: inFlight.has(p.unit) ? 'moving' : p.state,
      regions: residency.get(p.unit) ?? null,
    })),
    scope,
    { headroomFraction: config.limits.headroomFraction, ...opts },
  );
}
