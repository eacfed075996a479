// Plans from the directory as it is now: the shards of the config's allowlist (status, capacity,
// dedication from the shards table) and every unit's placement and expected load: tenants and the
// buckets of bucket-routed datasets (a bucket moves like a tenant; one of a dataset the config does
// not name counts for load but is never planned, since no move could select its rows). A unit on a
// shard outside the allowlist is never planned either: nothing may connect to that shard. A split
// tenant (`tenant split`) is its sub-units `T:k`, each a unit of its own (the directory holds no T),
// measured per sub-unit (lib/rebalance/measure.ts) and moved like any unit.
// Node-only (reads the directory); the arithmetic is lib/rebalance/plan.ts.
import type { Pool } from 'pg';
import type { Queryable } from '../directory/db';
import type { Config } from '../config';
import { listShards } from '../directory/shards';
import { listPlacements } from '../directory/placements';
import { listOpenReservations } from '../directory/reservations';
import { listResidency } from '../directory/policy';
import { listSplits } from '../directory/splits';
import { parseUnit } from '../buckets/units';
import { measuredCopies } from '../directory/moves';
import { estimateCopy } from '../move-progress';
import { measureShard, SAMPLE_ROWS, type ShardMeasurement } from './measure';
import { planMoves, type LoadSource, type PlanOptions, type PlanScope, type RebalancePlan } from './plan';

/** `rebalance plan`: measure units on the shards (each by its config pool) and estimate each move's copy. */
export interface MeasureOptions {
  shardPool: (name: string) => Pool;
  /** How long to sample each shard's write counters (0: skip). */
  windowMs?: number;
  sampleRows?: number;
}

export async function planFromDirectory(
  directory: Queryable,
  config: Config,
  scope: PlanScope,
  opts: PlanOptions = {},
  measure?: MeasureOptions,
): Promise<RebalancePlan> {
  const known = new Set(config.shards.map((s) => s.name));
  const shards = (await listShards(directory)).filter((s) => known.has(s.name));
  // Measured sizes, per shard of the allowlist (one at a time: a plan is not a load test).
  const measured = new Map<string, ShardMeasurement>();
  if (measure) {
    const splits = new Map([...(await listSplits(directory))].map(([t, x]) => [t, x.ways]));
    for (const s of shards) measured.set(s.name, await measureShard(measure.shardPool(s.name), config, s.name, { ...measure, splits }));
  }
  const sizeOf = (unit: string, shard: string) => {
    const m = measured.get(shard);
    if (!m || m.error) return {};
    return { bytes: m.units.get(unit)?.bytes ?? 0, rows: m.units.get(unit)?.rows ?? 0 };
  };
  // A unit's load: the directory's expected load, raised to its measured write rate (rows written
  // per second over the window, lib/rebalance/measure.ts) when that is higher. Measured on a
  // measured shard with a window only; a unit with no rows written there measures 0.
  const loadOf = (unit: string, shard: string, expected: number): { load: number; source: LoadSource; writesPerSecond?: number } => {
    const m = measured.get(shard);
    if (!m || m.error || m.writesPerSecond === null) return { load: expected, source: 'expected' };
    const w = m.units.get(unit)?.writesPerSecond ?? 0;
    const rate = Math.ceil(w);
    return rate > expected ? { load: rate, source: 'measured', writesPerSecond: w } : { load: expected, source: 'expected', writesPerSecond: w };
  };
  const { placements } = await listPlacements(directory);
  const datasets = new Set(config.datasets.map((d) => d.name));
  // A unit whose move holds a reservation is in flight (even before its freeze): never planned again.
  const inFlight = new Set((await listOpenReservations(directory)).map((r) => r.unit));
  const residency = await listResidency(directory);
  const plan = planMoves(
    shards.map((s) => ({
      name: s.name,
      capacity: s.capacity,
      capacityBytes: s.capacityBytes,
      status: s.status,
      dedicatedTo: s.dedicatedTo,
      class: s.class,
      reserved: s.reserved,
      region: s.region,
    })),
    placements.map((p) => ({
      unit: p.unit,
      shard: p.shard,
      load: loadOf(p.unit, p.shard, p.expectedLoad).load,
      ...sizeOf(p.unit, p.shard),
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
          : {}),
    })),
    scope,
    { ...opts, headroomFraction: opts.headroomFraction ?? config.limits.headroomFraction },
  );
  if (!measure) return plan;
  // Each move's copy at the throughput earlier moves measured (as `move plan` estimates one).
  const rate = await measuredCopies(directory);
  for (const m of plan.moves) m.estimatedSeconds = estimateCopy({ rows: m.rows ?? 0, bytes: m.bytes }, rate, config.limits.rowsPerSecond).seconds;
  const e = estimateCopy({ rows: 0, bytes: 0 }, rate, config.limits.rowsPerSecond);
  plan.measurement = {
    method:
      `rows and bytes per unit from each tenant table (count and pg_column_size grouped by unit, a split tenant's by sub-unit; a table over ${measure.sampleRows ?? SAMPLE_ROWS} rows by a TABLESAMPLE SYSTEM block sample, scaled), its on-disk size shared pro rata; ` +
      (measure.windowMs
        ? `writes per shard from pg_stat_user_tables deltas over ${measure.windowMs} ms; writes per unit from the rows whose xmin is a transaction id assigned in that window (inserted or updated, counted once; deletes not counted); a unit's load is its directory expected load, or its measured writes/s when higher (loadSource)`
        : 'writes not measured (no window): every load is the directory expected load'),
    shards: [...measured.values()].map((m) => ({
      shard: m.shard,
      measured: !m.error,
      exactTables: m.exactTables.length,
      sampledTables: m.sampledTables.length,
      writesPerSecond: m.writesPerSecond,
      ...(m.error ? { error: m.error } : {}),
    })),
    units: placements
      .filter((p) => measured.get(p.shard) && !measured.get(p.shard)!.error)
      .map((p) => {
        const l = loadOf(p.unit, p.shard, p.expectedLoad);
        return {
          unit: p.unit,
          shard: p.shard,
          ...(sizeOf(p.unit, p.shard) as { rows: number; bytes: number }),
          ...(l.writesPerSecond !== undefined ? { writesPerSecond: l.writesPerSecond } : {}),
          expectedLoad: p.expectedLoad,
          load: l.load,
          loadSource: l.source,
        };
      })
      .sort((a, b) => b.bytes - a.bytes || (a.unit < b.unit ? -1 : 1)),
    copyRate: {
      rowsPerSecond: e.rowsPerSecond,
      bytesPerSecond: e.bytesPerSecond,
      fromMoves: e.fromMoves,
      ...(config.limits.rowsPerSecond ? { throttledTo: config.limits.rowsPerSecond } : {}),
    },
  };
  for (const m of measured.values())
    if (m.error) plan.problems.push(`${m.shard} could not be measured (${m.error}): its units are planned by the directory's expected load, with no bytes`);
  return plan;
}

function bucketDataset(unit: string): string {
  const p = parseUnit(unit);
  return p.kind === 'bucket' ? p.dataset : unit;
}
