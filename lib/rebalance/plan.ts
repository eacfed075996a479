// The resharding planner: from the shards (status, capacity, dedication, region) and the units
// (shard, expected load, residency) it proposes a short list of moves. Pure (no I/O): the same function answers
// `rebalance plan`, `shards drain`, `tenant isolate` and the rebalance workflow's re-plans.
// Invariants (test/unit/rebalance-plan.test.ts): every unit ends on one open shard it may live on,
// no shard's usable capacity is exceeded even if every incoming move lands before any outgoing
// one, no unit moves twice, and balancing stops at the first plan inside the tolerance.

import { withinResidency } from '../directory/residency';

export interface PlanShard {
  name: string;
  capacity: number;
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
  /** Why the move is in the plan, for the operator ("shard-a is draining", "shard-a 3.0 > 1.2"). */
  reason: string;
}

export interface ShardSummary {
  name: string;
  status: string;
  capacity: number;
  dedicatedTo: string | null;
  loadBefore: number;
  loadAfter: number;
  unitsBefore: number;
  unitsAfter: number;
}

export type PlanScope = { kind: 'rebalance' } | { kind: 'drain'; shard: string } | { kind: 'isolate'; tenant: string; to?: string };

export interface PlanOptions {
  /** A shard is balanced when its utilisation is within ±tolerance (relative) of the fleet's mean. */
  tolerance?: number;
  /** Fraction of capacity kept free on a target (limits.headroomFraction). */
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
  /** For isolate: the shard that ends dedicated to the tenant. */
  dedicate?: { shard: string; tenant: string };
}

export const DEFAULT_TOLERANCE = 0.2;

interface Work {
  shards: Map<string, PlanShard>;
  /** Current (planned) shard of every unit. */
  at: Map<string, string>;
  units: Map<string, PlanUnit>;
  /** Load now, as the directory says, per shard. */
  initial: Map<string, number>;
  /** Load of the units planned into each shard (what it may hold mid-plan before any leaves). */
  incoming: Map<string, number>;
  moved: Set<string>;
  /** Units (planned) on each shard: the tie-break that spreads units of equal load (buckets at load 0). */
  count: Map<string, number>;
  moves: PlannedMove[];
  headroom: number;
  exclude: Set<string>;
  only?: Set<string>;
}

const usable = (s: PlanShard, headroom: number) => s.capacity * (1 - headroom);

function loadOf(w: Work, shard: string): number {
  let sum = 0;
  for (const [u, s] of w.at) if (s === shard) sum += w.units.get(u)!.load;
  return sum;
}

/** Whether `shard` is inside `unit`'s residency (a shard with no region is inside none). */
function resides(unit: PlanUnit, shard: PlanShard): boolean {
  return withinResidency(shard.region, unit.regions);
}

/** May `unit` be placed on `shard`: open, not dedicated to another tenant, inside its residency, room even mid-plan. */
function fits(w: Work, unit: PlanUnit, shard: PlanShard): boolean {
  if (shard.status !== 'open') return false;
  if (!resides(unit, shard)) return false;
  if (shard.dedicatedTo && shard.dedicatedTo !== unit.unit) return false;
  if (shard.class === 'dedicated' && shard.dedicatedTo !== unit.unit) return false;
  const worst = (w.initial.get(shard.name) ?? 0) + (w.incoming.get(shard.name) ?? 0) + unit.load;
  return worst <= usable(shard, w.headroom) + 1e-9;
}

function movable(w: Work, u: PlanUnit): boolean {
  return u.state !== 'moving' && !u.unmovable && !w.moved.has(u.unit) && !w.exclude.has(u.unit) && (!w.only || w.only.has(u.unit));
}

function addMove(w: Work, u: PlanUnit, to: string, reason: string) {
  const from = w.at.get(u.unit)!;
  w.moves.push({ unit: u.unit, from, to, load: u.load, reason });
  w.at.set(u.unit, to);
  w.moved.add(u.unit);
  w.incoming.set(to, (w.incoming.get(to) ?? 0) + u.load);
  w.count.set(from, (w.count.get(from) ?? 0) - 1);
  w.count.set(to, (w.count.get(to) ?? 0) + 1);
}

function start(shards: readonly PlanShard[], units: readonly PlanUnit[], opts: PlanOptions): Work {
  const w: Work = {
    shards: new Map(shards.map((s) => [s.name, s])),
    at: new Map(),
    units: new Map(),
    initial: new Map(shards.map((s) => [s.name, s.reserved ?? 0])),
    incoming: new Map(),
    moved: new Set(),
    count: new Map(),
    moves: [],
    headroom: opts.headroomFraction ?? 0,
    exclude: new Set(opts.exclude ?? []),
    only: opts.units ? new Set(opts.units) : undefined,
  };
  for (const u of [...units].sort((a, b) => (a.unit < b.unit ? -1 : 1))) {
    w.units.set(u.unit, u);
    w.at.set(u.unit, u.shard);
    w.initial.set(u.shard, (w.initial.get(u.shard) ?? 0) + u.load);
    w.count.set(u.shard, (w.count.get(u.shard) ?? 0) + 1);
  }
  return w;
}

/** Units on a shard they may not stay on (not open, or dedicated to another tenant), largest first. */
function evacuate(w: Work, problems: string[], mustLeave: (u: PlanUnit, s: PlanShard | undefined) => string | undefined, maxMoves: number) {
  const leaving = [...w.units.values()]
    .map((u) => ({ u, why: mustLeave(u, w.shards.get(w.at.get(u.unit)!)) }))
    .filter((x): x is { u: PlanUnit; why: string } => !!x.why)
    .sort((a, b) => b.u.load - a.u.load || (a.u.unit < b.u.unit ? -1 : 1));
  for (const { u, why } of leaving) {
    if (!movable(w, u)) {
      const stays = u.unmovable ?? (u.state === 'moving' ? 'is moving already' : 'is excluded from this run');
      problems.push(`${u.unit} must leave ${w.at.get(u.unit)} (${why}) but ${stays}`);
      continue;
    }
    if (w.moves.length >= maxMoves) {
      problems.push(`${u.unit} must leave ${w.at.get(u.unit)} (${why}) but the plan is at its limit of ${maxMoves} moves`);
      continue;
    }
    // The eligible shard with the lowest utilisation after taking the unit, then the one holding
    // fewer units. A unit of load 0 (a bucket: dataset init records none) adds load nowhere, so for
    // it the fewest units come first: a drained dataset spreads instead of piling onto one shard.
    let best: { s: PlanShard; util: number; n: number } | undefined;
    const before = (a: { util: number; n: number; name: string }, b: { util: number; n: number; name: string }) => {
      const byUtil = Math.abs(a.util - b.util) <= 1e-12 ? 0 : a.util - b.util;
      const byCount = a.n - b.n;
      const order = u.load === 0 ? [byCount, byUtil] : [byUtil, byCount];
      for (const d of order) if (d !== 0) return d < 0;
      return a.name < b.name;
    };
    for (const s of w.shards.values()) {
      if (s.name === w.at.get(u.unit) || !fits(w, u, s)) continue;
      const c = { util: (loadOf(w, s.name) + u.load) / s.capacity, n: w.count.get(s.name) ?? 0, name: s.name };
      if (!best || before(c, { util: best.util, n: best.n, name: best.s.name })) best = { s, util: c.util, n: c.n };
    }
    if (!best) {
      problems.push(`no open shard has room for ${u.unit} (load ${u.load}), which must leave ${w.at.get(u.unit)} (${why}): add a shard or raise capacity`);
      continue;
    }
    addMove(w, u, best.s.name, why);
  }
}

/** Open shards that take part in balancing: not dedicated (a dedicated shard holds its tenant only). */
function balanceSet(w: Work): PlanShard[] {
  return [...w.shards.values()].filter((s) => s.status === 'open' && !s.dedicatedTo && s.class !== 'dedicated');
}

/** How far outside the band [mean·(1−tol), mean·(1+tol)] of utilisation each shard is, summed (in load units). */
function violation(w: Work, set: PlanShard[], mean: number, tol: number, loads: Map<string, number>): number {
  let v = 0;
  for (const s of set) {
    const l = loads.get(s.name)!;
    const hi = s.capacity * mean * (1 + tol);
    const lo = s.capacity * mean * (1 - tol);
    v += Math.max(0, l - hi) + Math.max(0, lo - l);
  }
  return v;
}

/** Balancing moves: each the single move that shrinks the band violation most, until none does. */
function balance(w: Work, tol: number, maxMoves: number): boolean {
  const set = balanceSet(w);
  if (set.length < 2) return true;
  const names = new Set(set.map((s) => s.name));
  const loads = new Map(set.map((s) => [s.name, loadOf(w, s.name)]));
  const total = [...loads.values()].reduce((a, b) => a + b, 0);
  const mean = total / set.reduce((a, s) => a + s.capacity, 0);
  const unitsOn = new Map<string, PlanUnit[]>(set.map((s) => [s.name, []]));
  for (const [u, s] of w.at) if (names.has(s)) unitsOn.get(s)!.push(w.units.get(u)!);
  for (let v = violation(w, set, mean, tol, loads); v > 1e-9;) {
    if (w.moves.length >= maxMoves) return false;
    let best: { u: PlanUnit; from: string; to: PlanShard; v: number } | undefined;
    for (const from of set) {
      if (loads.get(from.name)! / from.capacity <= mean) continue;
      for (const u of unitsOn.get(from.name)!) {
        if (!movable(w, u) || u.load <= 0) continue;
        for (const to of set) {
          if (to === from || loads.get(to.name)! / to.capacity >= mean || !fits(w, u, to)) continue;
          loads.set(from.name, loads.get(from.name)! - u.load);
          loads.set(to.name, loads.get(to.name)! + u.load);
          const nv = violation(w, set, mean, tol, loads);
          loads.set(from.name, loads.get(from.name)! + u.load);
          loads.set(to.name, loads.get(to.name)! - u.load);
          if (nv >= v - 1e-9) continue;
          // Most improvement first; then the lighter unit (less to copy), then by name: deterministic.
          if (!best || nv < best.v - 1e-9 || (Math.abs(nv - best.v) <= 1e-9 && (u.load < best.u.load || (u.load === best.u.load && u.unit < best.u.unit))))
            best = { u, from: from.name, to, v: nv };
        }
      }
    }
    if (!best) return false;
    const fromLoad = loads.get(best.from)!;
    const fromCap = w.shards.get(best.from)!.capacity;
    addMove(
      w,
      best.u,
      best.to.name,
      `${best.from} load ${fmt(fromLoad)} (${pct(fromLoad / fromCap)}) is above the fleet mean ${pct(mean)} by more than ${pct(tol)}; ${best.to.name} is below it`,
    );
    loads.set(best.from, fromLoad - best.u.load);
    loads.set(best.to.name, loads.get(best.to.name)! + best.u.load);
    unitsOn.set(
      best.from,
      unitsOn.get(best.from)!.filter((x) => x !== best!.u),
    );
    unitsOn.get(best.to.name)!.push(best.u);
    v = best.v;
  }
  return true;
}

const fmt = (n: number) => String(Math.round(n * 100) / 100);
const pct = (f: number) => `${Math.round(f * 1000) / 10}%`;

function summarize(w: Work): ShardSummary[] {
  return [...w.shards.values()]
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .map((s) => {
      const before = [...w.units.values()].filter((u) => u.shard === s.name);
      const after = [...w.at].filter(([, sh]) => sh === s.name).map(([u]) => w.units.get(u)!);
      return {
        name: s.name,
        status: s.status,
        capacity: s.capacity,
        dedicatedTo: s.dedicatedTo ?? null,
        loadBefore: before.reduce((a, u) => a + u.load, 0),
        loadAfter: after.reduce((a, u) => a + u.load, 0),
        unitsBefore: before.length,
        unitsAfter: after.length,
      };
    });
}

/** Why a unit may not stay where it is, or undefined. */
function stayProblem(u: PlanUnit, s: PlanShard | undefined): string | undefined {
  if (!s) return `shard ${u.shard} is not in the inventory`;
  if (s.status !== 'open') return `${s.name} is ${s.status}`;
  if (s.dedicatedTo && s.dedicatedTo !== u.unit) return `${s.name} is dedicated to ${s.dedicatedTo}`;
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
    if (!t) return { scope, moves: [], shards: [], balanced: false, problems: [`tenant ${scope.tenant} is not in the directory`] };
    const choice = scope.to
      ? namedIsolationShard(shards, units, t, scope.to, opts.headroomFraction ?? 0)
      : isolationShard(shards, units, t, opts.headroomFraction ?? 0);
    if ('problem' in choice) return { scope, moves: [], shards: [], balanced: false, problems: [choice.problem] };
    dedicate = { shard: choice.shard, tenant: t.unit };
    shards = shards.map((x) => (x.name === choice.shard ? { ...x, dedicatedTo: t.unit } : x));
  }
  const w = start(shards, units, opts);
  if (scope.kind === 'drain') evacuate(w, problems, (u) => (w.at.get(u.unit) === scope.shard ? `${scope.shard} is draining` : undefined), maxMoves);
  else if (scope.kind === 'isolate') {
    // The tenant first (onto its dedicated shard, if it is elsewhere), then the others off that shard.
    const t = w.units.get(scope.tenant)!;
    if (t.shard !== dedicate!.shard) {
      if (!movable(w, t)) problems.push(`${t.unit} ${t.state === 'moving' ? 'is moving already' : 'is excluded from this run'}`);
      else addMove(w, t, dedicate!.shard, `isolate ${t.unit} on ${dedicate!.shard}, which holds no other unit`);
    }
    evacuate(w, problems, (u, s) => (s?.name === dedicate!.shard && u.unit !== t.unit ? `${s.name} is being dedicated to ${t.unit}` : undefined), maxMoves);
  } else evacuate(w, problems, stayProblem, maxMoves);
  const balanced = scope.kind === 'rebalance' ? balance(w, tol, maxMoves) : true;
  if (!balanced && w.moves.length >= maxMoves)
    problems.push(`the plan stops at its limit of ${maxMoves} move(s): the fleet stays outside ±${pct(tol)} of the mean`);
  else if (!balanced)
    problems.push(`the fleet stays outside ±${pct(tol)} of the mean: no single further move of an unmoved unit brings it closer within capacity`);
  return { scope, moves: w.moves, shards: summarize(w), balanced, problems, dedicate };
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
        t.load <= usable(s, headroom),
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
  return { shard: to };
}

/** Applies a plan to the units (for checks and for `status`): where each unit ends. */
export function applyPlan(units: readonly PlanUnit[], moves: readonly PlannedMove[]): Map<string, string> {
  const at = new Map(units.map((u) => [u.unit, u.shard]));
  for (const m of moves) at.set(m.unit, m.to);
  return at;
}
