// The planner at fleet scale (issue 13): 1,000 shards and 100,000 units whose sizes follow a Zipf
// law (a few huge tenants, a long tail of small ones), placed unevenly, some resident in a region,
// a few shards draining and a few dedicated. Prints how long `planMoves` took (best and median of
// a few runs, the fleet built once) and the plan's quality: moves, bytes moved against the bytes
// held over the headroom, the worst shard's utilisation before and after, shards over the headroom
// before and after, and the tenants named for a dedicated shard. Pure CPU: no stack needed.
//
//   npx tsx bench/planner.ts [--shards 1000] [--units 100000] [--runs 5] [--zipf 1.1] [--headroom 0.3] [--seed 1]
//   npm run bench -- --only planner
import os from 'node:os';
import { PerformanceObserver } from 'node:perf_hooks';
import { planMoves, type PlanShard, type PlanUnit, type RebalancePlan } from '../lib/rebalance/plan';
import { xorshift32 } from '../test/helpers/xorshift';

function arg(name: string, dflt: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? Number(process.argv[i + 1]) : dflt;
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} must be a non-negative number`);
  return v;
}

const rng = xorshift32;

export interface Fleet {
  shards: PlanShard[];
  units: PlanUnit[];
}

const REGIONS = ['eu-west', 'us-east', 'ap-south'];

/**
 * A fleet of `nShards` shards and `nUnits` units: unit of rank r holds bytes ∝ 1/r^zipf (shuffled
 * over the units), load ∝ bytes with ±50 % noise; units placed with a skew (a shard's chance ∝ its
 * weight, weights from 0.25 to 4), so a share of the shards start over the headroom. Capacities
 * are set so the fleet as a whole sits at ~55 % of its byte and load budgets. 10 % of units are
 * resident in one region; 1 % of shards draining; 0.5 % dedicated-class and empty.
 */
export function makeFleet(nShards: number, nUnits: number, zipf: number, seed: number): Fleet {
  const r = rng(seed);
  const raw = Array.from({ length: nUnits }, (_, i) => 1 / Math.pow(i + 1, zipf));
  const sum = raw.reduce((a, b) => a + b, 0);
  const totalBytes = nShards * 200 * 2 ** 30 * 0.55; // each shard 200 GiB; fleet at 55 %
  const totalLoad = nShards * 1000 * 0.55;
  // Shuffle so ranks do not follow unit names.
  for (let i = raw.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [raw[i], raw[j]] = [raw[j], raw[i]];
  }
  const shards: PlanShard[] = Array.from({ length: nShards }, (_, i) => ({
    name: `s${String(i).padStart(4, '0')}`,
    capacity: 1000,
    capacityBytes: 200 * 2 ** 30,
    status: r() < 0.01 ? 'draining' : 'open',
    class: r() < 0.005 ? 'dedicated' : 'shared',
    region: REGIONS[i % REGIONS.length],
  }));
  const placeable = shards.filter((s) => s.class !== 'dedicated');
  const weights = placeable.map(() => 0.25 * Math.pow(16, r()));
  const cum: number[] = [];
  weights.reduce((a, w, i) => (cum[i] = a + w), 0);
  const pick = (region?: string) => {
    for (;;) {
      const x = r() * cum[cum.length - 1];
      let lo = 0;
      let hi = cum.length - 1;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (cum[mid] < x) lo = mid + 1;
        else hi = mid;
      }
      if (!region || placeable[lo].region === region) return placeable[lo].name;
    }
  };
  const units: PlanUnit[] = raw.map((w, i) => {
    const bytes = Math.round((w / sum) * totalBytes);
    const regions = r() < 0.1 ? [REGIONS[Math.floor(r() * REGIONS.length)]] : null;
    return {
      unit: `t${String(i).padStart(6, '0')}`,
      shard: pick(regions?.[0]),
      bytes,
      rows: Math.max(1, Math.round(bytes / 180)),
      load: Math.round((w / sum) * totalLoad * (0.5 + r()) * 100) / 100,
      state: 'active',
      regions,
    };
  });
  return { shards, units };
}

export interface Quality {
  moves: number;
  bytesMoved: number;
  bytesOverHeadroomBefore: number;
  maxUtilBefore: number;
  maxUtilAfter: number;
  overBefore: number;
  overAfter: number;
  /** Of those still over: the ones holding a unit too big for any shared shard (named for a dedicated shard). */
  overAfterHoldingGiant: number;
  dedicatedNeeded: number;
  problems: number;
}

/** Open shared shards only: those the plan balances (a draining shard empties, a dedicated one is its tenant's). */
export function quality(f: Fleet, p: RebalancePlan, headroom: number): Quality {
  const shared = new Map(f.shards.filter((s) => s.status === 'open' && s.class !== 'dedicated').map((s) => [s.name, s]));
  let maxUtilBefore = 0;
  let maxUtilAfter = 0;
  let overBefore = 0;
  let overAfter = 0;
  let overAfterHoldingGiant = 0;
  const giants = new Set((p.dedicatedNeeded ?? []).map((d) => d.shard));
  let bytesOverHeadroomBefore = 0;
  for (const s of p.shards) {
    const sh = shared.get(s.name);
    if (!sh) continue;
    maxUtilBefore = Math.max(maxUtilBefore, s.utilisationBefore);
    maxUtilAfter = Math.max(maxUtilAfter, s.utilisationAfter);
    if (s.utilisationBefore > 1 - headroom + 1e-9) overBefore++;
    if (s.utilisationAfter > 1 - headroom + 1e-9) {
      overAfter++;
      if (giants.has(s.name)) overAfterHoldingGiant++;
    }
    if (sh.capacityBytes) bytesOverHeadroomBefore += Math.max(0, s.bytesBefore - sh.capacityBytes * (1 - headroom));
  }
  return {
    moves: p.moves.length,
    bytesMoved: p.moves.reduce((a, m) => a + m.bytes, 0),
    bytesOverHeadroomBefore,
    maxUtilBefore,
    maxUtilAfter,
    overBefore,
    overAfter,
    overAfterHoldingGiant,
    dedicatedNeeded: p.dedicatedNeeded?.length ?? 0,
    problems: p.problems.length,
  };
}

const gib = (n: number) => `${(n / 2 ** 30).toFixed(1)} GiB`;
const pct = (f: number) => `${(f * 100).toFixed(1)}%`;

export async function runPlannerBench(): Promise<void> {
  const nShards = arg('shards', 1000);
  const nUnits = arg('units', 100_000);
  const runs = Math.max(1, arg('runs', 5));
  const zipf = arg('zipf', 1.1);
  const headroom = arg('headroom', 0.3);
  const seed = arg('seed', 1);
  const t0 = performance.now();
  const fleet = makeFleet(nShards, nUnits, zipf, seed);
  const built = performance.now() - t0;
  const times: number[] = [];
  const cpu: number[] = [];
  const gcMs: number[] = [];
  const gcCount: number[] = [];
  // Garbage-collection pauses (the `gc` performance entries, delivered after the synchronous plan):
  // the share of a plan spent collecting what it allocated.
  const gcs: { start: number; duration: number }[] = [];
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gcs.push({ start: e.startTime, duration: e.duration });
  });
  obs.observe({ entryTypes: ['gc'] });
  let plan: RebalancePlan | undefined;
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    const c = process.cpuUsage();
    plan = planMoves(fleet.shards, fleet.units, { kind: 'rebalance' }, { headroomFraction: headroom });
    const used = process.cpuUsage(c);
    const end = performance.now();
    times.push(end - t);
    // CPU time of this process (user + system, garbage collection included): on a busy machine
    // the wall time also counts the time other processes held the CPU.
    cpu.push((used.user + used.system) / 1000);
    await new Promise((r) => setTimeout(r, 100));
    const mine = gcs.filter((g) => g.start >= t && g.start <= end);
    gcMs.push(mine.reduce((a, g) => a + g.duration, 0));
    gcCount.push(mine.length);
  }
  obs.disconnect();
  const gcShare = gcMs.map((g, i) => g / times[i]).sort((a, b) => a - b);
  const gcPauses = [...gcCount].sort((a, b) => a - b);
  times.sort((a, b) => a - b);
  cpu.sort((a, b) => a - b);
  const q = quality(fleet, plan!, headroom);
  const ms = (x: number) => `${x.toFixed(0)} ms`;
  const load = os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
  console.log(`machine: ${os.availableParallelism?.() ?? os.cpus().length} CPUs, load average ${load} at the end (shared machine: timings stretch with it)`);
  console.log(`planner: ${nShards} shards, ${nUnits} units (Zipf s=${zipf}), headroom ${headroom}, seed ${seed}; fleet built in ${ms(built)}`);
  const mid = Math.floor(runs / 2);
  console.log(
    `  planMoves (rebalance), ${runs} run(s): wall best ${ms(times[0])}, median ${ms(times[mid])}, worst ${ms(times[runs - 1])}; CPU best ${ms(cpu[0])}, median ${ms(cpu[mid])}, worst ${ms(cpu[runs - 1])}`,
  );
  console.log(
    `  garbage collection per plan: median ${gcPauses[mid]} pause(s), ${pct(gcShare[mid])} of the wall time (best ${pct(gcShare[0])}, worst ${pct(gcShare[runs - 1])})`,
  );
  console.log(
    `  plan: ${q.moves} moves, ${gib(q.bytesMoved)} moved for ${gib(q.bytesOverHeadroomBefore)} held over the headroom (ratio ${(q.bytesMoved / Math.max(1, q.bytesOverHeadroomBefore)).toFixed(2)})`,
  );
  console.log(
    `  open shared shards: max utilisation ${pct(q.maxUtilBefore)} -> ${pct(q.maxUtilAfter)}; over the headroom (> ${pct(1 - headroom)}) ${q.overBefore} -> ${q.overAfter} (${q.overAfterHoldingGiant} of them hold a tenant too big for any shared shard); ends balanced (±20% of the mean load): ${plan!.balanced}`,
  );
  console.log(
    `  tenants named for a dedicated shard: ${q.dedicatedNeeded}; problems: ${q.problems}${plan!.problems.length ? ` (first: ${plan!.problems[0].slice(0, 200)})` : ''}`,
  );
}

if (require.main === module) void runPlannerBench();
