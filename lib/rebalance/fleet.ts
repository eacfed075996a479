// Plans from the directory as it is now: the shards of the config's allowlist (status, capacity,
// dedication from the shards table) and every unit's placement and expected load: tenants and the
// buckets of bucket-routed datasets (a bucket moves like a tenant; one of a dataset the config does
// not name counts for load but is never planned, since no move could select its rows). A unit on a
// shard outside the allowlist is never planned either: nothing may connect to that shard. Nor is a
// split tenant's sub-unit (`tenant split`): its moves are not supported yet.
// Node-only (reads the directory); the arithmetic is lib/rebalance/plan.ts.
import type { Queryable } from '../directory/db';
import type { Config } from '../config';
import { listShards } from '../directory/shards';
import { listPlacements } from '../directory/placements';
import { listOpenReservations } from '../directory/reservations';
import { listResidency } from '../directory/policy';
import { parseUnit } from '../buckets/units';
import { planMoves, type PlanOptions, type PlanScope, type RebalancePlan } from './plan';

export async function planFromDirectory(directory: Queryable, config: Config, scope: PlanScope, opts: PlanOptions = {}): Promise<RebalancePlan> {
  const known = new Set(config.shards.map((s) => s.name));
  const shards = (await listShards(directory)).filter((s) => known.has(s.name));
  const { placements } = await listPlacements(directory);
  const datasets = new Set(config.datasets.map((d) => d.name));
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
      // Nothing connects to a shard outside the config's allowlist: a unit there counts for
      // nothing it could be moved by, so it is never planned (a drain names it as left behind).
      ...(!known.has(p.shard)
        ? {
            unmovable: `is on ${p.shard}, which the config does not name: nothing connects to a shard outside the config (add it with \`shardctl shards add\` to move it)`,
          }
        : p.kind === 'bucket' && !datasets.has(bucketDataset(p.unit))
          ? { unmovable: `is a bucket of dataset ${bucketDataset(p.unit)}, which the config does not name` }
          : isSubUnit(p.unit)
            ? { unmovable: 'is a split sub-unit: moving sub-units is not supported yet (docs/architecture.md, "Splitting a tenant")' }
            : {}),
    })),
    scope,
    { headroomFraction: config.limits.headroomFraction, ...opts },
  );
}

function isSubUnit(unit: string): boolean {
  const p = parseUnit(unit);
  return p.kind === 'tenant' && p.path.length > 0;
}

function bucketDataset(unit: string): string {
  const p = parseUnit(unit);
  return p.kind === 'bucket' ? p.dataset : unit;
}
