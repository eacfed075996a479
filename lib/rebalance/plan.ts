// The resharding planner: from the shards (status, capacity in load units and in bytes, dedication,
// region) and the units (shard, expected load, measured bytes, residency) it proposes a short list
// of moves. Pure (no I/O): the same function answers `rebalance plan`, `shards drain`, `tenant
// isolate` and the rebalance workflow's re-plans.
// A shard's utilisation is the larger of its two fractions: load / capacity and, when it has a
// byte budget (`shards add --capacity-bytes`), bytes / capacityBytes. A rebalance plans in order:
//  1. evacuate: units on a shard they may not stay on (not open, dedicated, outside residency);
//  2. headroom: every open shared shard over its usable capacity, (1 − headroom) of each budget,
//     sheds units until it is under, choosing them for the fewest bytes moved (a greedy cover:
//     the cheapest single unit that covers what is over, or units by what they relieve per byte,
//     whichever moves fewer bytes), each onto the eligible shard with the lowest utilisation after;
//  3. evenness: while a shard's load is outside ±tolerance of the fleet's mean utilisation, the move
//     from the most loaded shard that shrinks the band violation most (a unit near the size that
//     would bring it or its target to the mean, found by binary search; fewer bytes on a tie).
// A unit too big for every shared shard it may live on is named with the size of dedicated shard it
// needs and the commands that make one (`dedicatedNeeded`), never silently left.
// Invariants (test/unit/rebalance-plan*.test.ts): every unit ends on one open shard it may live on,
// no shard's usable capacity (load or bytes) is exceeded even if every incoming move lands before
// any outgoing one, no unit moves twice, and balancing stops at the first plan inside the tolerance.
// Cost: O(units · log units + moves · shards · log units) (bench/planner.ts: 1,000 shards, 100,000 units).

import { withinResidency } from '../directory/residency';
import { isUnitOfTenant } from '../buckets/units';

export interface PlanShard {
  name: string;
  capacity: number;
  /** Its disk budget in bytes (`shards add --capacity-bytes`); null or absent: bytes do not bound it. */
  capacityBytes?: number | null;
  status: 'open' | 'closed' | 'draining';
  /** The tenant this shard is dedicated to (tenant isolate); nothing else is placed there. */
  dedicatedTo?: string | null;
  /** `dedicated` (`shards add --class dedicated`): kept for an isolated tenant, no shared unit goes there. */
  class?: 'shared' | 'dedicated';
  /** Load held on it by moves in flight (directory reservations): counted as already there. */
  reserved?: number;
  /** Its region (`shards add --region`); null or absent: none recorded, so no resident unit goes there. */
  region?: string | null;
}

export interface PlanUnit {
  unit: string;
  shard: string;
  load: number;
  /** Its rows' bytes on its shard (measured: lib/rebalance/measure.ts); absent: 0 (not measured). */
  bytes?: number;
  /** Its rows on its shard (measured); absent: not measured. */
  rows?: number;
  /** A unit already moving is left where the directory says; the planner never touches it. */
  state?: 'active' | 'moving';
  /** Its residency (`tenant residency`): the only regions it may live in; null or absent: any. */
  regions?: readonly string[] | null;
  /** Why no move may take it (e.g. a bucket of a dataset the config does not name): it counts for load and stays. */
  unmovable?: string;
}

export interface PlannedMove {
  unit: string;
  from: string;
  to: string;
  load: number;
  /** The unit's bytes (0 when not measured): what the move copies. */
  bytes: number;
  /** Its rows, when measured. */
  rows?: number;
  /** Seconds its copy should take at the copy rate earlier moves measured (`rebalance plan`); null: none measured. */
  estimatedSeconds?: number | null;
  /** Why the move is in the plan, for the operator ("shard-a is draining", "shard-a 3.0 > 1.2"). */
  reason: string;
}

export interface ShardSummary {
  name: string;
  status: string;
  capacity: number;
  capacityBytes: number | null;
  dedicatedTo: string | null;
  loadBefore: number;
  loadAfter: number;
  bytesBefore: number;
  bytesAfter: number;
  /** max(load / capacity, bytes / capacityBytes) before and after the plan (fractions). */
  utilisationBefore: number;
  utilisationAfter: number;
  unitsBefore: number;
  unitsAfter: number;
}

/** A unit too big for every shared shard it may live on: the dedicated shard it needs. */
export interface DedicatedNeed {
  unit: string;
  shard: string;
  load: number;
  bytes: number;
  /** The smallest capacities that hold it under the headroom. */
  capacityOps: number;
  capacityBytes: number | null;
  commands: string[];
}

export type PlanScope = { kind: 'rebalance' } | { kind: 'drain'; shard: string } | { kind: 'isolate'; tenant: string; to?: string };

export interface PlanOptions {
  /** A shard is balanced when its utilisation is within ±tolerance (relative) of the fleet's mean. */
  tolerance?: number;
  /** Fraction of capacity kept free on a target, and the headroom every shard is brought under (limits.headroomFraction). */
  headroomFraction?: number;
  /** Units never planned (moves that failed in this run: the rebalancer never retries them blindly). */
  exclude?: readonly string[];
  /** When given, only these units may move; the others count for load but stay where they are. */
  units?: readonly string[];
  /** Upper bound on the moves proposed. */
  maxMoves?: number;
}

export interface RebalancePlan {
  scope: PlanScope;
  moves: PlannedMove[];
  shards: ShardSummary[];
  /** Whether every open shard ends inside the tolerance band (always true for drain and isolate). */
  balanced: boolean;
  /** What the plan could not do, as reasons an operator can read (empty: it does everything). */
  problems: string[];
  /** Units too big for any shared shard (rebalance): each with the dedicated shard it needs. */
  dedicatedNeeded?: DedicatedNeed[];
  /** For isolate: the shard that ends dedicated to the tenant. */
  dedicate?: { shard: string; tenant: string };
  /** What was measured on the shards (`rebalance plan`; lib/rebalance/measure.ts), when it was. */
  measurement?: PlanMeasurement;
}

/** Where a unit's planned load came from: the directory's expected load, or its measured writes/s (higher). */
export type LoadSource = 'expected' | 'measured';

/** How the plan's sizes and durations were obtained. */
export interface PlanMeasurement {
  /** How unit sizes were measured, in a sentence. */
  method: string;
  /** Per shard: measured (exact or sampled tables), or why not (its units keep the directory's expected load and no bytes). */
  shards: { shard: string; measured: boolean; exactTables: number; sampledTables: number; writesPerSecond: number | null; error?: string }[];
  /**
   * Every placed unit on a measured shard: its rows and bytes there, largest first; its measured
   * writes/s (with a window), its directory expected load, and the load planned with and where
   * that figure came from.
   */
  units: { unit: string; shard: string; rows: number; bytes: number; writesPerSecond?: number; expectedLoad: number; load: number; loadSource: LoadSource }[];
  /** The copy rate move durations are estimated from (the `move.copied` audit entries of earlier moves); null rates: none measured. */
  copyRate: { rowsPerSecond: number | null; bytesPerSecond: number | null; fromMoves: number; throttledTo?: number };
}

export const DEFAULT_TOLERANCE = 0.2;

/**
 * A unit as the planner tracks it (one record per unit, not maps keyed by its name: at 100,000
 * units those lookups were most of a plan's time): its fields, where it is planned to be, whether
 * this run may move it at all, and whether it has moved.
 */
interface WUnit extends PlanUnit {
  bytes: number;
  /** Its current (planned) shard. */
  at: string;
  /** Not moving, not unmovable, not excluded, and inside `units` when given. */
  free: boolean;
  moved: boolean;
}

interface Tally {
  /** Load now, as the directory says (with reservations), and bytes. */
  initial: number;
  initialBytes: number;
  /** Load and bytes of the units planned into it (what it may hold mid-plan before any leaves). */
  incoming: number;
  incomingBytes: number;
  /** Load and bytes of the units (planned) on it, reservations left out. */
  cur: number;
  curBytes: number;
  /** Units (planned) on it: the tie-break that spreads units of equal load (buckets at load 0). */
  count: number;
}

const tally = (initial: number): Tally => ({ initial, initialBytes: 0, incoming: 0, incomingBytes: 0, cur: 0, curBytes: 0, count: 0 });

/** Its tally, made (all zero) for a shard name not seen yet. */
function tallyOf(w: Work, shard: string): Tally {
  let t = w.tally.get(shard);
  if (!t) {
    t = tally(0);
    w.tally.set(shard, t);
  }
  return t;
}

interface Work {
  shards: Map<string, PlanShard>;
  /** Every unit, by name. */
  units: WUnit[];
  /** Per shard name (the inventory's, and any a unit names): its running totals, one lookup for all. */
  tally: Map<string, Tally>;
  /** Units (planned) on each shard, in the order they came there. */
  on: Map<string, WUnit[]>;
  moves: PlannedMove[];
  headroom: number;
  exclude: Set<string>;
  only?: Set<string>;
  /** Every load, byte count and reservation is ≥ 0: a unit bigger than a shard's usable budget cannot fit it however full. */
  nonNegative: boolean;
}

const usable = (s: PlanShard, headroom: number) => s.capacity * (1 - headroom);
const usableBytes = (s: PlanShard, headroom: number) => (s.capacityBytes ? s.capacityBytes * (1 - headroom) : Number.POSITIVE_INFINITY);
const bytesOf = (u: PlanUnit) => u.bytes ?? 0;

/** max(load / capacity, bytes / capacityBytes): the shard's fuller budget. */
function utilisation(s: PlanShard, load: number, bytes: number): number {
  const ops = s.capacity > 0 ? load / s.capacity : load > 0 ? Number.POSITIVE_INFINITY : 0;
  return s.capacityBytes ? Math.max(ops, bytes / s.capacityBytes) : ops;
}

/** Whether `shard` is inside `unit`'s residency (a shard with no region is inside none). */
function resides(unit: PlanUnit, shard: PlanShard): boolean {
  return withinResidency(shard.region, unit.regions);
}

/** Whether policy lets `unit` live on `shard` (room aside): open, not dedicated to another tenant, inside its residency. */
function eligible(unit: PlanUnit, shard: PlanShard): boolean {
  if (shard.status !== 'open') return false;
  if (!resides(unit, shard)) return false;
  // A shard dedicated to a tenant holds its sub-units too, once it is split.
  if (shard.dedicatedTo && !isUnitOfTenant(unit.unit, shard.dedicatedTo)) return false;
  if (shard.class === 'dedicated' && !(shard.dedicatedTo && isUnitOfTenant(unit.unit, shard.dedicatedTo))) return false;
  return true;
}

/** May `unit` be placed on `shard`: eligible, and room for its load and bytes even mid-plan. */
function fits(w: Work, unit: WUnit, shard: PlanShard): boolean {
  if (!eligible(unit, shard)) return false;
  const t = w.tally.get(shard.name);
  const worst = (t?.initial ?? 0) + (t?.incoming ?? 0) + unit.load;
  if (worst > usable(shard, w.headroom) + 1e-9) return false;
  if (!shard.capacityBytes) return true;
  const worstBytes = (t?.initialBytes ?? 0) + (t?.incomingBytes ?? 0) + bytesOf(unit);
  return worstBytes <= usableBytes(shard, w.headroom) + 1e-9;
}

function movable(u: WUnit): boolean {
  return u.free && !u.moved;
}

function addMove(w: Work, u: WUnit, to: string, reason: string) {
  const from = u.at;
  w.moves.push({ unit: u.unit, from, to, load: u.load, bytes: bytesOf(u), ...(u.rows !== undefined ? { rows: u.rows } : {}), reason });
  u.at = to;
  u.moved = true;
  const f = tallyOf(w, from);
  const t = tallyOf(w, to);
  t.incoming += u.load;
  t.incomingBytes += bytesOf(u);
  f.cur -= u.load;
  t.cur += u.load;
  f.curBytes -= bytesOf(u);
  t.curBytes += bytesOf(u);
  const off = w.on.get(from);
  const i = off ? off.indexOf(u) : -1;
  if (i >= 0) off!.splice(i, 1);
  const onto = w.on.get(to);
  if (onto) onto.push(u);
  else w.on.set(to, [u]);
  f.count--;
  t.count++;
}

function start(shards: readonly PlanShard[], units: readonly PlanUnit[], opts: PlanOptions): Work {
  const w: Work = {
    shards: new Map(shards.map((s) => [s.name, s])),
    units: [],
    tally: new Map(shards.map((s) => [s.name, tally(s.reserved ?? 0)])),
    on: new Map(shards.map((s) => [s.name, []])),
    moves: [],
    headroom: opts.headroomFraction ?? 0,
    exclude: new Set(opts.exclude ?? []),
    only: opts.units ? new Set(opts.units) : undefined,
    nonNegative: true,
  };
  // By name (a directory listing usually is already: then no sort); per shard, one running total
  // (not six map updates per unit), written into the maps once.
  let inOrder = true;
  for (let i = 1; i < units.length && inOrder; i++) inOrder = units[i - 1].unit < units[i].unit;
  const byName = inOrder ? units : [...units].sort((a, b) => (a.unit < b.unit ? -1 : 1));
  const acc = new Map<string, { t: Tally; on: WUnit[] }>();
  for (const p of byName) {
    // Written out field by field (not a spread): every record has the one shape, read fast.
    const u: WUnit = {
      unit: p.unit,
      shard: p.shard,
      load: p.load,
      bytes: bytesOf(p),
      rows: p.rows,
      state: p.state,
      regions: p.regions,
      unmovable: p.unmovable,
      at: p.shard,
      free: p.state !== 'moving' && !p.unmovable && !w.exclude.has(p.unit) && (!w.only || w.only.has(p.unit)),
      moved: false,
    };
    w.units.push(u);
    let a = acc.get(u.shard);
    if (!a) {
      a = { t: tallyOf(w, u.shard), on: w.on.get(u.shard) ?? [] };
      acc.set(u.shard, a);
    }
    // Summed in the same order as one map update per unit was: the same floating-point totals.
    a.t.initial += u.load;
    a.t.initialBytes += u.bytes;
    a.t.cur += u.load;
    a.t.curBytes += u.bytes;
    a.t.count++;
    a.on.push(u);
    if (u.load < 0 || bytesOf(u) < 0) w.nonNegative = false;
  }
  for (const s of shards) if ((s.reserved ?? 0) < 0) w.nonNegative = false;
  for (const [k, a] of acc) w.on.set(k, a.on);
  return w;
}

const curUtil = (w: Work, s: PlanShard, extraLoad = 0, extraBytes = 0) =>
  utilisation(s, (w.tally.get(s.name)?.cur ?? 0) + extraLoad, (w.tally.get(s.name)?.curBytes ?? 0) + extraBytes);

/** The eligible shard (other than the unit's own) with the lowest utilisation after taking `u`, then fewer units; undefined: none has room. */
function bestTarget(w: Work, u: WUnit, candidates: Iterable<PlanShard>): PlanShard | undefined {
  let best: { s: PlanShard; util: number; n: number } | undefined;
  const here = u.at;
  for (const s of candidates) {
    if (s.name === here || !fits(w, u, s)) continue;
    const c = { s, util: curUtil(w, s, u.load, bytesOf(u)), n: w.tally.get(s.name)?.count ?? 0 };
    if (!best) {
      best = c;
      continue;
    }
    // A unit of load 0 and no bytes (a bucket: dataset init records none) adds load nowhere, so
    // for it the fewest units come first: a drained dataset spreads instead of piling onto one shard.
    const byUtil = Math.abs(c.util - best.util) <= 1e-12 ? 0 : c.util - best.util;
    const byCount = c.n - best.n;
    const order = u.load === 0 && bytesOf(u) === 0 ? [byCount, byUtil] : [byUtil, byCount];
    let d = 0;
    for (const x of order)
      if (x !== 0) {
        d = x;
        break;
      }
    if (d < 0 || (d === 0 && s.name < best.s.name)) best = c;
  }
  return best?.s;
}

/** Units on a shard they may not stay on (not open, or dedicated to another tenant), largest first. */
function evacuate(w: Work, problems: string[], mustLeave: (u: WUnit, s: PlanShard | undefined) => string | undefined, maxMoves: number) {
  const leaving: { u: WUnit; why: string }[] = [];
  for (const u of w.units) {
    const why = mustLeave(u, w.shards.get(u.at));
    if (why) leaving.push({ u, why });
  }
  leaving.sort((a, b) => b.u.load - a.u.load || bytesOf(b.u) - bytesOf(a.u) || (a.u.unit < b.u.unit ? -1 : 1));
  let heap: TargetHeap | undefined;
  for (const { u, why } of leaving) {
    if (!movable(u)) {
      const stays = u.unmovable ?? (u.state === 'moving' ? 'is moving already' : 'is excluded from this run');
      problems.push(`${u.unit} must leave ${u.at} (${why}) but ${stays}`);
      continue;
    }
    if (w.moves.length >= maxMoves) {
      problems.push(`${u.unit} must leave ${u.at} (${why}) but the plan is at its limit of ${maxMoves} moves`);
      continue;
    }
    // A unit with a size takes the least utilised shard it fits (a heap); a unit of none the fewest units (a scan).
    const sized = u.load > 0 || bytesOf(u) > 0;
    heap ??= sized
      ? new TargetHeap(
          w,
          [...w.shards.values()].filter((s) => s.status === 'open'),
        )
      : undefined;
    const to = sized ? heap!.take(u) : bestTarget(w, u, w.shards.values());
    if (!to) {
      problems.push(
        `no open shard has room for ${u.unit} (load ${u.load}${u.bytes ? `, ${u.bytes} bytes` : ''}), which must leave ${u.at} (${why}): add a shard or raise capacity`,
      );
      continue;
    }
    const from = w.shards.get(u.at);
    addMove(w, u, to.name, why);
    heap?.push(to);
    if (from?.status === 'open') heap?.push(from);
  }
}

/** Open shards that take part in balancing: not dedicated (a dedicated shard holds its tenant only). */
function balanceSet(w: Work): PlanShard[] {
  return [...w.shards.values()].filter((s) => s.status === 'open' && !s.dedicatedTo && s.class !== 'dedicated');
}

/** What a shard holds beyond its usable budgets (load, bytes), each ≥ 0. */
function overBy(w: Work, s: PlanShard): { ops: number; bytes: number } {
  const ops = Math.max(0, (w.tally.get(s.name)?.cur ?? 0) + (s.reserved ?? 0) - usable(s, w.headroom));
  const bytes = s.capacityBytes ? Math.max(0, (w.tally.get(s.name)?.curBytes ?? 0) - usableBytes(s, w.headroom)) : 0;
  return { ops: ops > 1e-9 ? ops : 0, bytes: bytes > 1e-9 ? bytes : 0 };
}

/**
 * The units whose moves relieve `need` with the fewest bytes (greedy): the cheapest single unit
 * covering all of it, or units by what they relieve per byte until covered, whichever is fewer bytes.
 */
function cheapestCover(cands: readonly WUnit[], need: { ops: number; bytes: number }): WUnit[] {
  const covers = (u: WUnit) => u.load >= need.ops - 1e-9 && bytesOf(u) >= need.bytes - 1e-9;
  const relief = (u: WUnit, n: { ops: number; bytes: number }) =>
    (n.ops > 0 ? Math.min(u.load, n.ops) / n.ops : 0) + (n.bytes > 0 ? Math.min(bytesOf(u), n.bytes) / n.bytes : 0);
  let single: WUnit | undefined;
  for (const u of cands) if (covers(u) && (!single || bytesOf(u) < bytesOf(single) || (bytesOf(u) === bytesOf(single) && u.load < single.load))) single = u;
  const ranked = cands
    .filter((u) => relief(u, need) > 0)
    .map((u) => ({ u, r: relief(u, need) / Math.max(bytesOf(u), 1) }))
    .sort((a, b) => b.r - a.r || bytesOf(a.u) - bytesOf(b.u) || (a.u.unit < b.u.unit ? -1 : 1));
  const seq: WUnit[] = [];
  const left = { ...need };
  let seqBytes = 0;
  for (const { u } of ranked) {
    if (left.ops <= 1e-9 && left.bytes <= 1e-9) break;
    if (relief(u, left) <= 0) continue;
    seq.push(u);
    seqBytes += bytesOf(u);
    left.ops -= u.load;
    left.bytes -= bytesOf(u);
  }
  const seqCovers = left.ops <= 1e-9 && left.bytes <= 1e-9;
  if (single && (!seqCovers || bytesOf(single) <= seqBytes)) return [single];
  return seq;
}

/**
 * Shards by utilisation, lowest first (a binary heap with lazy entries: a shard whose utilisation
 * changed is pushed again and its stale entry skipped), for picking targets without a scan.
 */
class TargetHeap {
  private heap: { util: number; name: string; stamp: number }[] = [];
  private stamps = new Map<string, number>();
  /** The largest usable budgets among its shards: a unit over either fits none of them (loads ≥ 0), found without popping them all. */
  private readonly maxOps: number;
  private readonly maxBytes: number;
  constructor(
    private readonly w: Work,
    shards: readonly PlanShard[],
  ) {
    let ops = Number.NEGATIVE_INFINITY;
    let bytes = Number.NEGATIVE_INFINITY;
    for (const s of shards) {
      this.push(s);
      ops = Math.max(ops, usable(s, w.headroom));
      bytes = Math.max(bytes, usableBytes(s, w.headroom));
    }
    this.maxOps = ops;
    this.maxBytes = bytes;
  }
  push(s: PlanShard) {
    const stamp = (this.stamps.get(s.name) ?? 0) + 1;
    this.stamps.set(s.name, stamp);
    this.heap.push({ util: curUtil(this.w, s), name: s.name, stamp });
    this.up(this.heap.length - 1);
  }
  /** The lowest-utilisation shard `u` fits on (other than its own), or undefined; every live entry stays. */
  take(u: WUnit): PlanShard | undefined {
    if (this.w.nonNegative && (u.load > this.maxOps + 1e-9 || bytesOf(u) > this.maxBytes + 1e-9)) return undefined;
    const popped: { util: number; name: string; stamp: number }[] = [];
    let found: PlanShard | undefined;
    while (this.heap.length) {
      const top = this.pop()!;
      if (this.stamps.get(top.name) !== top.stamp) continue;
      popped.push(top);
      const s = this.w.shards.get(top.name)!;
      if (s.name !== u.at && fits(this.w, u, s)) {
        found = s;
        break;
      }
    }
    for (const x of popped) {
      this.heap.push(x);
      this.up(this.heap.length - 1);
    }
    return found;
  }
  private less(a: { util: number; name: string }, b: { util: number; name: string }) {
    return a.util < b.util || (a.util === b.util && a.name < b.name);
  }
  private up(i: number) {
    const h = this.heap;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(h[i], h[p])) break;
      [h[i], h[p]] = [h[p], h[i]];
      i = p;
    }
  }
  private pop() {
    const h = this.heap;
    const top = h[0];
    const last = h.pop()!;
    if (h.length) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && this.less(h[l], h[m])) m = l;
        if (r < h.length && this.less(h[r], h[m])) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m], h[i]];
        i = m;
      }
    }
    return top;
  }
}

/**
 * Headroom: every open shared shard over its usable budgets sheds units (the fewest bytes that
 * cover what it holds over) until it is under, each onto the eligible shard with the lowest
 * utilisation that has room for it even mid-plan.
 */
function relieve(w: Work, problems: string[], maxMoves: number) {
  const set = balanceSet(w);
  const over = set.filter((s) => {
    const o = overBy(w, s);
    return o.ops > 0 || o.bytes > 0;
  });
  if (!over.length) return;
  over.sort((a, b) => curUtil(w, b) - curUtil(w, a) || (a.name < b.name ? -1 : 1));
  const heap = new TargetHeap(w, set);
  for (const s of over) {
    const tried = new Set<WUnit>();
    let stuck = false;
    while (!stuck) {
      const need = overBy(w, s);
      if (need.ops <= 0 && need.bytes <= 0) break;
      const cands = [...(w.on.get(s.name) ?? [])].filter((u) => movable(u) && !tried.has(u) && (u.load > 0 || bytesOf(u) > 0));
      const pick = cheapestCover(cands, need);
      if (!pick.length) {
        // Units this run may not move (rebalance --units, or excluded after a failure) are named
        // as the reason when there are any: they, not the fleet's room, are what keeps it over.
        const held = [...(w.on.get(s.name) ?? [])].filter((u) => !tried.has(u) && !movable(u) && (u.load > 0 || bytesOf(u) > 0)).length;
        problems.push(
          `${s.name} stays over its headroom (${pct(curUtil(w, s))} > ${pct(1 - w.headroom)}): ` +
            (held > 0 && (w.only || w.exclude.size > 0)
              ? `the units this run may move are not enough; ${held} other unit(s) on it are outside the run (--units) or excluded`
              : 'no unmoved unit on it fits on another eligible shard'),
        );
        break;
      }
      // Place the whole cover; a unit with no room anywhere is set aside and the cover chosen again.
      for (const u of pick) {
        if (w.moves.length >= maxMoves) {
          problems.push(`${s.name} stays over its headroom (${pct(curUtil(w, s))} > ${pct(1 - w.headroom)}): the plan is at its limit of ${maxMoves} moves`);
          stuck = true;
          break;
        }
        tried.add(u);
        const to = heap.take(u);
        if (!to) continue;
        addMove(w, u, to.name, `${s.name} at ${pct(curUtil(w, s))} is over its headroom (usable ${pct(1 - w.headroom)} of capacity)`);
        heap.push(to);
        heap.push(s);
        const left = overBy(w, s);
        if (left.ops <= 0 && left.bytes <= 0) break;
      }
    }
  }
}

/** Units too big for every open shared shard they may live on, even empty: each with the dedicated shard it needs. */
function dedicatedNeeds(w: Work): DedicatedNeed[] {
  const shared = balanceSet(w);
  if (!shared.length) return [];
  // Per residency: the smallest usable budgets among the shards it may use, so most units (those
  // under both) are settled without a scan of the shards.
  const floor = new Map<string, { shards: PlanShard[]; ops: number; bytes: number }>();
  const floorOf = (u: PlanUnit) => {
    const key = u.regions ? u.regions.join(',') : '';
    let f = floor.get(key);
    if (!f) {
      const inside = shared.filter((x) => resides(u, x));
      f = {
        shards: inside,
        ops: Math.min(...inside.map((x) => usable(x, w.headroom))),
        bytes: Math.min(...inside.map((x) => usableBytes(x, w.headroom))),
      };
      floor.set(key, f);
    }
    return f;
  };
  const out: DedicatedNeed[] = [];
  for (const u of w.units) {
    const s = w.shards.get(u.at);
    if (!s || (s.dedicatedTo && isUnitOfTenant(u.unit, s.dedicatedTo))) continue;
    const f = floorOf(u);
    // No shared shard inside its residency at all: a residency problem (named by evacuate), not its size.
    if (!f.shards.length) continue;
    if (u.load <= f.ops + 1e-9 && bytesOf(u) <= f.bytes + 1e-9) continue;
    if (f.shards.some((x) => u.load <= usable(x, w.headroom) + 1e-9 && bytesOf(u) <= usableBytes(x, w.headroom) + 1e-9)) continue;
    const keep = 1 - w.headroom;
    const capacityOps = Math.max(1, Math.ceil(u.load / keep));
    const capacityBytes = bytesOf(u) > 0 ? Math.ceil(bytesOf(u) / keep) : null;
    const region = u.regions?.length ? ` --region ${u.regions[0]}` : '';
    out.push({
      unit: u.unit,
      shard: s.name,
      load: u.load,
      bytes: bytesOf(u),
      capacityOps,
      capacityBytes,
      commands: [
        `shardctl shards add NEW_SHARD --dsn-env NEW_SHARD_DSN --bucket NEW_BUCKET --class dedicated --capacity-ops ${capacityOps}${capacityBytes ? ` --capacity-bytes ${capacityBytes}` : ''}${region}`,
        `shardctl tenant isolate --tenant ${u.unit} --to NEW_SHARD`,
      ],
    });
  }
  return out.sort((a, b) => b.bytes - a.bytes || b.load - a.load || (a.unit < b.unit ? -1 : 1));
}

/** Band violation of one shard with load `l`: how far outside [mean·(1−tol), mean·(1+tol)]·capacity. */
function bandViolation(s: PlanShard, l: number, mean: number, tol: number): number {
  const hi = s.capacity * mean * (1 + tol);
  const lo = s.capacity * mean * (1 - tol);
  return Math.max(0, l - hi) + Math.max(0, lo - l);
}

/** The `k` least elements of `xs` that `keep` accepts, by `cmp`, in order (a bounded insertion: O(n·k), k small). */
function leastOf<T>(xs: readonly T[], k: number, cmp: (a: T, b: T) => number, keep: (x: T) => boolean): T[] {
  const out: T[] = [];
  for (const x of xs) {
    if (!keep(x)) continue;
    if (out.length === k && cmp(x, out[k - 1]) >= 0) continue;
    let i = out.length === k ? k - 1 : out.length;
    if (out.length < k) out.push(x);
    while (i > 0 && cmp(x, out[i - 1]) < 0) {
      out[i] = out[i - 1];
      i--;
    }
    out[i] = x;
  }
  return out;
}

/** First index in `arr` (sorted by load ascending) whose load is > x. */
function upperBound(arr: readonly WUnit[], x: number): number {
  let lo = 0;
  let hi = arr.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (arr[mid].load <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

const byLoadThenBytes = (a: WUnit, b: WUnit) => a.load - b.load || bytesOf(a) - bytesOf(b) || (a.unit < b.unit ? -1 : 1);
/** How many units either side of the ideal size are tried for a pair (those that do not fit are skipped). */
const PROBE = 8;
/** How many more targets a source tries once it has a candidate move. */
const PROBE_TARGETS = 16;

/**
 * Balancing moves: from the most loaded shard above the mean, the move (to a shard below the
 * mean) that shrinks the band violation most, until none does. A pair's candidate units are those
 * nearest the size that brings either shard to the mean (binary search in each shard's units
 * sorted by load), so a move costs O(shards · log units), not O(shards² · units).
 */
function balance(w: Work, tol: number, maxMoves: number): boolean {
  const set = balanceSet(w);
  if (set.length < 2) return true;
  const loads = new Map(set.map((s) => [s.name, w.tally.get(s.name)?.cur ?? 0]));
  const total = [...loads.values()].reduce((a, b) => a + b, 0);
  const mean = total / set.reduce((a, s) => a + s.capacity, 0);
  if (!Number.isFinite(mean)) return true;
  const sorted = new Map<string, WUnit[]>(
    set.map((s) => [s.name, [...(w.on.get(s.name) ?? [])].filter((u) => movable(u) && u.load > 0).sort(byLoadThenBytes)]),
  );
  const viol = (s: PlanShard, l: number) => bandViolation(s, l, mean, tol);
  let v = set.reduce((a, s) => a + viol(s, loads.get(s.name)!), 0);
  // A source from which no move improved is not tried again (nothing moves onto a shard above
  // the mean): each round costs O(shards) plus a few binary searches.
  // (`exhausted` on its entry.) Each shard's load and utilisation, kept up to date as moves land
  // (no allocation per round), and its place in name order (ties by a number, not a string).
  const rank = new Map([...set].sort((a, b) => (a.name < b.name ? -1 : 1)).map((s, i) => [s.name, i]));
  type Entry = { s: PlanShard; util: number; load: number; rank: number; exhausted: boolean };
  const keyed: Entry[] = set.map((s) => ({ s, util: loads.get(s.name)! / s.capacity, load: loads.get(s.name)!, rank: rank.get(s.name)!, exhausted: false }));
  const entry = new Map(keyed.map((x) => [x.s.name, x]));
  const byUtil = (x: Entry, y: Entry) => x.util - y.util || x.rank - y.rank;
  while (v > 1e-9) {
    if (w.moves.length >= maxMoves) return false;
    // The most loaded source not yet exhausted, by a scan.
    let src: Entry | undefined;
    for (const x of keyed) if (x.util > mean + 1e-12 && !x.exhausted && (!src || byUtil(x, src) > 0)) src = x;
    if (!src) return false;
    const from = src.s;
    const isUnder = (x: { util: number }) => x.util < mean - 1e-12;
    // The least loaded targets first (a partial selection); all of them only when those give nothing.
    const few = leastOf(keyed, PROBE_TARGETS + 1, byUtil, isUnder);
    const arr = sorted.get(from.name)!;
    const lf = src.load;
    let best: { u: WUnit; to: PlanShard; d: number } | undefined;
    const tryTargets = (targets: readonly Entry[], probes: number) => {
      for (const { s: to, load: lt } of targets) {
        const ideal = Math.min(lf - from.capacity * mean, to.capacity * mean - lt);
        const at = upperBound(arr, ideal + 1e-12);
        const probe = (i: number) => {
          const u = arr[i];
          if (!movable(u) || !fits(w, u, to)) return false;
          const d = viol(from, lf - u.load) + viol(to, lt + u.load) - viol(from, lf) - viol(to, lt);
          if (d >= -1e-9) return true;
          // Most improvement first; then the lighter unit, fewer bytes (less to copy), then by name: deterministic.
          if (
            !best ||
            d < best.d - 1e-9 ||
            (Math.abs(d - best.d) <= 1e-9 && (byLoadThenBytes(u, best.u) < 0 || (byLoadThenBytes(u, best.u) === 0 && to.name < best.to.name)))
          )
            best = { u, to, d };
          return true;
        };
        // Downwards from the ideal size (the largest units not above it), then upwards.
        for (let i = at - 1, seen = 0; i >= 0 && seen < probes; i--) if (probe(i)) seen++;
        for (let i = at, seen = 0; i < arr.length && seen < probes; i++) if (probe(i)) seen++;
      }
    };
    tryTargets(few, PROBE);
    // The rest with fewer probes each: a source is given up on after one such pass.
    if (!best && few.length > PROBE_TARGETS) tryTargets(keyed.filter(isUnder).sort(byUtil), 2);
    if (!best) {
      // No move off it improves now; its load only falls from here, so it is not tried again.
      src.exhausted = true;
      continue;
    }
    if (!best) return false;
    const b: { u: WUnit; to: PlanShard; d: number } & { from: PlanShard } = { ...(best as { u: WUnit; to: PlanShard; d: number }), from };
    const fromLoad = src.load;
    addMove(
      w,
      b.u,
      b.to.name,
      `${b.from.name} load ${fmt(fromLoad)} (${pct(fromLoad / b.from.capacity)}) is above the fleet mean ${pct(mean)} by more than ${pct(tol)}; ${b.to.name} is below it`,
    );
    const dst = entry.get(b.to.name)!;
    src.load = fromLoad - b.u.load;
    dst.load += b.u.load;
    src.util = src.load / b.from.capacity;
    dst.util = dst.load / b.to.capacity;
    arr.splice(arr.indexOf(b.u), 1);
    v += b.d;
  }
  return true;
}

const fmt = (n: number) => String(Math.round(n * 100) / 100);
const pct = (f: number) => `${Math.round(f * 1000) / 10}%`;

function summarize(w: Work): ShardSummary[] {
  const before = new Map<string, { load: number; bytes: number; n: number }>();
  const after = new Map<string, { load: number; bytes: number; n: number }>();
  const bump = (m: typeof before, k: string, u: PlanUnit) => {
    const x = m.get(k) ?? { load: 0, bytes: 0, n: 0 };
    x.load += u.load;
    x.bytes += bytesOf(u);
    x.n++;
    m.set(k, x);
  };
  for (const u of w.units) {
    bump(before, u.shard, u);
    bump(after, u.at, u);
  }
  const none = { load: 0, bytes: 0, n: 0 };
  return [...w.shards.values()]
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .map((s) => {
      const b = before.get(s.name) ?? none;
      const a = after.get(s.name) ?? none;
      return {
        name: s.name,
        status: s.status,
        capacity: s.capacity,
        capacityBytes: s.capacityBytes ?? null,
        dedicatedTo: s.dedicatedTo ?? null,
        loadBefore: b.load,
        loadAfter: a.load,
        bytesBefore: b.bytes,
        bytesAfter: a.bytes,
        utilisationBefore: utilisation(s, b.load, b.bytes),
        utilisationAfter: utilisation(s, a.load, a.bytes),
        unitsBefore: b.n,
        unitsAfter: a.n,
      };
    });
}

/** Why a unit may not stay where it is, or undefined. */
function stayProblem(u: PlanUnit, s: PlanShard | undefined): string | undefined {
  if (!s) return `shard ${u.shard} is not in the inventory`;
  if (s.status !== 'open') return `${s.name} is ${s.status}`;
  if (s.dedicatedTo && !isUnitOfTenant(u.unit, s.dedicatedTo)) return `${s.name} is dedicated to ${s.dedicatedTo}`;
  if (s.class === 'dedicated' && !s.dedicatedTo) return `${s.name} is a dedicated-class shard, kept for an isolated tenant`;
  if (!resides(u, s)) return `${s.name} (${s.region ? `region ${s.region}` : 'no region recorded'}) is outside ${u.unit}'s residency ${u.regions!.join(', ')}`;
  return undefined;
}

/** The plan for a scope: evacuate what may not stay, then (rebalance only) even out the load. */
export function planMoves(shards: readonly PlanShard[], units: readonly PlanUnit[], scope: PlanScope, opts: PlanOptions = {}): RebalancePlan {
  const tol = opts.tolerance ?? DEFAULT_TOLERANCE;
  const maxMoves = opts.maxMoves ?? Number.POSITIVE_INFINITY;
  const problems: string[] = [];
  if (scope.kind === 'drain') {
    const s = shards.find((x) => x.name === scope.shard);
    if (!s) return { scope, moves: [], shards: [], balanced: false, problems: [`shard ${scope.shard} is not in the inventory`] };
    // Draining: nothing new goes there, so the planner sees it as such whatever the directory said.
    shards = shards.map((x) => (x.name === scope.shard ? { ...x, status: 'draining' as const } : x));
  }
  let dedicate: RebalancePlan['dedicate'];
  if (scope.kind === 'isolate') {
    const t = units.find((u) => u.unit === scope.tenant);
    const subUnits = t ? 0 : units.filter((u) => isUnitOfTenant(u.unit, scope.tenant)).length;
    if (!t && subUnits)
      return {
        scope,
        moves: [],
        shards: [],
        balanced: false,
        problems: [
          `tenant ${scope.tenant} is split into ${subUnits} sub-units (${scope.tenant}:0 ..): isolating a split tenant is not supported yet; move its sub-units with \`shardctl move start --unit\` or let the rebalancer place them`,
        ],
      };
    if (!t) return { scope, moves: [], shards: [], balanced: false, problems: [`tenant ${scope.tenant} is not in the directory`] };
    const choice = scope.to
      ? namedIsolationShard(shards, units, t, scope.to, opts.headroomFraction ?? 0)
      : isolationShard(shards, units, t, opts.headroomFraction ?? 0);
    if ('problem' in choice) return { scope, moves: [], shards: [], balanced: false, problems: [choice.problem] };
    dedicate = { shard: choice.shard, tenant: t.unit };
    shards = shards.map((x) => (x.name === choice.shard ? { ...x, dedicatedTo: t.unit } : x));
  }
  const w = start(shards, units, opts);
  if (scope.kind === 'drain') evacuate(w, problems, (u) => (u.at === scope.shard ? `${scope.shard} is draining` : undefined), maxMoves);
  else if (scope.kind === 'isolate') {
    // The tenant first (onto its dedicated shard, if it is elsewhere), then the others off that shard.
    const t = w.units.find((u) => u.unit === scope.tenant)!;
    if (t.shard !== dedicate!.shard) {
      if (!movable(t)) problems.push(`${t.unit} ${t.state === 'moving' ? 'is moving already' : 'is excluded from this run'}`);
      else addMove(w, t, dedicate!.shard, `isolate ${t.unit} on ${dedicate!.shard}, which holds no other unit`);
    }
    evacuate(w, problems, (u, s) => (s?.name === dedicate!.shard && u.unit !== t.unit ? `${s.name} is being dedicated to ${t.unit}` : undefined), maxMoves);
  } else {
    evacuate(w, problems, stayProblem, maxMoves);
    relieve(w, problems, maxMoves);
  }
  const balanced = scope.kind === 'rebalance' ? balance(w, tol, maxMoves) : true;
  const dedicatedNeeded = scope.kind === 'rebalance' ? dedicatedNeeds(w) : [];
  for (const d of dedicatedNeeded)
    problems.push(
      `${d.unit} (load ${d.load}${d.bytes ? `, ${d.bytes} bytes` : ''}) is too big for any shared shard under the headroom: give it a dedicated shard of capacity ${d.capacityOps}${d.capacityBytes ? ` and ${d.capacityBytes} bytes` : ''}: ${d.commands.join(' && ')}`,
    );
  if (!balanced && w.moves.length >= maxMoves)
    problems.push(`the plan stops at its limit of ${maxMoves} move(s): the fleet stays outside ±${pct(tol)} of the mean`);
  else if (!balanced)
    problems.push(`the fleet stays outside ±${pct(tol)} of the mean: no single further move of an unmoved unit brings it closer within capacity`);
  return { scope, moves: w.moves, shards: summarize(w), balanced, problems, ...(scope.kind === 'rebalance' ? { dedicatedNeeded } : {}), dedicate };
}

/**
 * Where an isolated tenant lives: its own shard when it is alone there already or when moving
 * the others off costs no more moves than moving it; else an empty open shard that fits it.
 */
function isolationShard(shards: readonly PlanShard[], units: readonly PlanUnit[], t: PlanUnit, headroom: number): { shard: string } | { problem: string } {
  const home = shards.find((s) => s.name === t.shard);
  const others = units.filter((u) => u.shard === t.shard && u.unit !== t.unit);
  const homeOk = !!home && resides(t, home);
  if (home?.status === 'open' && homeOk && others.length === 0) return { shard: t.shard };
  const empty = shards
    .filter(
      (s) =>
        s.status === 'open' &&
        !s.dedicatedTo &&
        s.name !== t.shard &&
        resides(t, s) &&
        !units.some((u) => u.shard === s.name) &&
        !s.reserved &&
        t.load <= usable(s, headroom) &&
        bytesOf(t) <= usableBytes(s, headroom),
    )
    // A shard added for isolation (class dedicated) first, then the largest.
    .sort((a, b) => Number(b.class === 'dedicated') - Number(a.class === 'dedicated') || b.capacity - a.capacity || (a.name < b.name ? -1 : 1));
  // Moving the tenant is one move; moving the others is others.length moves (their load is copied).
  const othersLoad = others.reduce((a, u) => a + u.load, 0);
  if (empty.length && (others.length > 1 || home?.status !== 'open' || !homeOk || othersLoad > t.load)) return { shard: empty[0].name };
  if (home?.status === 'open' && homeOk && (!home.dedicatedTo || home.dedicatedTo === t.unit)) return { shard: t.shard };
  if (empty.length) return { shard: empty[0].name };
  const where = t.regions ? ` in region ${t.regions.join(' or ')}` : '';
  return {
    problem: `no shard can be dedicated to ${t.unit}: its shard ${t.shard} is ${home?.status ?? 'unknown'} and no open shard${where} is empty; add a shard`,
  };
}

/** `tenant isolate --to S`: S must be open, hold no other unit, be nobody else's and fit the tenant. */
function namedIsolationShard(
  shards: readonly PlanShard[],
  units: readonly PlanUnit[],
  t: PlanUnit,
  to: string,
  headroom: number,
): { shard: string } | { problem: string } {
  const s = shards.find((x) => x.name === to);
  const why = (m: string) => ({ problem: `cannot isolate ${t.unit} on ${to}: ${m}` });
  if (!s) return why('it is not in the inventory');
  if (s.status !== 'open') return why(`it is ${s.status}`);
  if (s.dedicatedTo && s.dedicatedTo !== t.unit) return why(`it is dedicated to ${s.dedicatedTo}`);
  if (!resides(t, s))
    return why(`it is ${s.region ? `in region ${s.region}` : 'in no recorded region'}, outside the tenant's residency ${t.regions!.join(', ')}`);
  const others = units.filter((u) => u.shard === to && u.unit !== t.unit);
  if (others.length)
    return why(
      `it holds ${others.length} other unit(s) (${others
        .slice(0, 3)
        .map((u) => u.unit)
        .join(', ')}); isolate onto an empty shard`,
    );
  if (s.reserved) return why('a move onto it is in flight');
  if (t.shard !== to && t.load > usable(s, headroom)) return why(`its usable capacity ${usable(s, headroom).toFixed(0)} is below the tenant's load ${t.load}`);
  if (t.shard !== to && bytesOf(t) > usableBytes(s, headroom))
    return why(`its usable bytes ${usableBytes(s, headroom).toFixed(0)} are below the tenant's ${bytesOf(t)} bytes`);
  return { shard: to };
}

/** Applies a plan to the units (for checks and for `status`): where each unit ends. */
export function applyPlan(units: readonly PlanUnit[], moves: readonly PlannedMove[]): Map<string, string> {
  const at = new Map(units.map((u) => [u.unit, u.shard]));
  for (const m of moves) at.set(m.unit, m.to);
  return at;
}
