// The resharding planner (lib/rebalance/plan.ts) over hand-made fleets and random ones:
// every unit ends on exactly one open shard it may live on, no target over its usable
// capacity even mid-plan, no unit moved twice, no more moves than the tolerance needs, a
// drained shard ends empty, an isolated tenant ends alone on its shard.
import { describe, it, expect } from 'vitest';
import { planMoves, applyPlan, type PlanShard, type PlanUnit, type RebalancePlan, type PlanScope } from '../../lib/rebalance/plan';
import { xorshift32 } from '../helpers/xorshift';

const rng = xorshift32;

const shard = (name: string, capacity = 100, status: PlanShard['status'] = 'open', dedicatedTo?: string): PlanShard => ({
  name,
  capacity,
  status,
  dedicatedTo,
});
const unit = (u: string, s: string, load = 1): PlanUnit => ({ unit: u, shard: s, load, state: 'active' });

/** Utilisation band violation of the open, undedicated shards after `moves`, as the planner defines it. */
function violation(shards: PlanShard[], units: PlanUnit[], moves: RebalancePlan['moves'], tol: number): number {
  const at = applyPlan(units, moves);
  const set = shards.filter((s) => s.status === 'open' && !s.dedicatedTo);
  const load = new Map(set.map((s) => [s.name, 0]));
  for (const u of units) if (load.has(at.get(u.unit)!)) load.set(at.get(u.unit)!, load.get(at.get(u.unit)!)! + u.load);
  const mean = [...load.values()].reduce((a, b) => a + b, 0) / set.reduce((a, s) => a + s.capacity, 0);
  let v = 0;
  for (const s of set) v += Math.max(0, load.get(s.name)! - s.capacity * mean * (1 + tol)) + Math.max(0, s.capacity * mean * (1 - tol) - load.get(s.name)!);
  return v;
}

/** The invariants every plan keeps, whatever its scope. */
function checkInvariants(shards: PlanShard[], units: PlanUnit[], plan: RebalancePlan, headroom: number) {
  const byName = new Map(shards.map((s) => [s.name, s]));
  const units2 = plan.moves.map((m) => m.unit);
  expect(new Set(units2).size, 'no unit moves twice').toBe(units2.length);
  const before = new Map(units.map((u) => [u.unit, u]));
  for (const m of plan.moves) {
    expect(before.get(m.unit)!.shard, `${m.unit} moves from where it is`).toBe(m.from);
    expect(m.to).not.toBe(m.from);
    expect(byName.get(m.to)?.status, `${m.unit} goes to an open shard`).toBe('open');
    expect(m.reason.length).toBeGreaterThan(0);
  }
  // Mid-plan: every target holds at most its load now plus everything planned into it.
  const incoming = new Map<string, number>();
  for (const m of plan.moves) incoming.set(m.to, (incoming.get(m.to) ?? 0) + m.load);
  for (const [name, inc] of incoming) {
    const now = units.filter((u) => u.shard === name).reduce((a, u) => a + u.load, 0);
    expect(now + inc, `${name} never over capacity`).toBeLessThanOrEqual(byName.get(name)!.capacity * (1 - headroom) + 1e-9);
  }
  // Every unit ends on exactly one shard of the inventory; when nothing was refused, an open one it may live on.
  const at = applyPlan(units, plan.moves);
  expect(at.size).toBe(units.length);
  if (plan.problems.length === 0) {
    for (const [u, s] of at) {
      const sh = byName.get(s)!;
      const dedicated = plan.dedicate?.shard === s ? plan.dedicate.tenant : sh.dedicatedTo;
      // A fleet rebalance leaves nothing on a shard that is not open; drain and isolate touch only their shard.
      if (plan.scope.kind === 'rebalance' || plan.moves.some((m) => m.unit === u)) expect(sh.status, `${u} ends on an open shard`).toBe('open');
      if (plan.scope.kind === 'drain') expect(s, `${u} off the drained shard`).not.toBe(plan.scope.shard);
      if (dedicated) expect(u, `${s} holds only ${dedicated}`).toBe(dedicated);
    }
  }
}

describe('rebalance plan', () => {
  it('moves nothing when the fleet is already even', () => {
    const shards = [shard('a'), shard('b'), shard('c')];
    const units = [unit('t1', 'a'), unit('t2', 'b'), unit('t3', 'c')];
    const p = planMoves(shards, units, { kind: 'rebalance' });
    expect(p.moves).toEqual([]);
    expect(p.balanced).toBe(true);
  });

  it('spreads three tenants on one shard over three shards in exactly two moves, with reasons', () => {
    const shards = [shard('a'), shard('b'), shard('c')];
    const units = [unit('t1', 'a'), unit('t2', 'a'), unit('t3', 'a')];
    const p = planMoves(shards, units, { kind: 'rebalance' });
    expect(p.moves).toHaveLength(2);
    expect(new Set(p.moves.map((m) => m.to))).toEqual(new Set(['b', 'c']));
    expect(p.moves[0].reason).toMatch(/a load 3 .* above the fleet mean/);
    expect(p.shards.map((s) => s.loadAfter)).toEqual([1, 1, 1]);
    expect(p.balanced).toBe(true);
  });

  it('prefers the lighter unit when either would balance', () => {
    const p = planMoves([shard('a'), shard('b')], [unit('big', 'a', 10), unit('small', 'a', 4), unit('x', 'b', 6)], { kind: 'rebalance' });
    expect(p.moves.map((m) => m.unit)).toEqual(['small']);
  });

  it('never plans a target over its usable capacity and says what it could not balance', () => {
    const p = planMoves([shard('a', 100), shard('b', 10)], [unit('t1', 'a', 60), unit('t2', 'a', 30)], { kind: 'rebalance' }, { headroomFraction: 0.1 });
    expect(p.moves).toEqual([]);
    expect(p.balanced).toBe(false);
    expect(p.problems[0]).toMatch(/outside ±20%/);
  });

  it('says a shard stays over its headroom because of units outside the run (units), not for want of room', () => {
    const shards = [shard('a', 100), shard('b', 100), shard('c', 100)];
    const units = [unit('t1', 'a', 30), unit('o1', 'a', 50), unit('o2', 'a', 50)];
    const p = planMoves(shards, units, { kind: 'rebalance' }, { headroomFraction: 0.1, tolerance: 10, units: ['t1'] });
    expect(p.moves.map((m) => m.unit)).toEqual(['t1']);
    expect(p.problems).toEqual([
      expect.stringMatching(/^a stays over its headroom \(80% > 90%\)|^a stays over its headroom .*2 other unit\(s\) on it are outside the run/),
    ]);
    // The same fleet with every unit movable: room enough, no such problem.
    const all = planMoves(shards, units, { kind: 'rebalance' }, { headroomFraction: 0.1, tolerance: 10 });
    expect(all.problems).toEqual([]);
  });

  it('moves units off draining and closed shards in a fleet rebalance', () => {
    const p = planMoves([shard('a'), shard('b'), shard('c', 100, 'draining')], [unit('t1', 'a'), unit('t2', 'c'), unit('t3', 'c')], { kind: 'rebalance' });
    expect(p.moves.filter((m) => m.from === 'c')).toHaveLength(2);
    expect(p.moves.find((m) => m.unit === 't2')!.reason).toBe('c is draining');
  });

  it('leaves a moving unit where it is and reports it when it had to leave', () => {
    const p = planMoves([shard('a'), shard('b')], [{ ...unit('t1', 'a'), state: 'moving' }], { kind: 'drain', shard: 'a' });
    expect(p.moves).toEqual([]);
    expect(p.problems[0]).toMatch(/t1 must leave a .* is moving already/);
  });

  it('drains a shard onto the least loaded shards and leaves it empty', () => {
    const shards = [shard('a'), shard('b'), shard('c')];
    const units = [unit('t1', 'a', 5), unit('t2', 'a', 3), unit('t3', 'b', 4), unit('t4', 'c', 1)];
    const p = planMoves(shards, units, { kind: 'drain', shard: 'a' });
    expect(p.moves.map((m) => [m.unit, m.to])).toEqual([
      ['t1', 'c'],
      ['t2', 'b'],
    ]);
    expect(p.shards.find((s) => s.name === 'a')!.unitsAfter).toBe(0);
  });

  it('drains bucket units (load 0) spread over the other shards by unit count, never onto a dedicated shard', () => {
    const shards = [shard('a'), shard('b'), shard('c'), shard('d', 100, 'open', 'vip')];
    const buckets = [0, 1, 2, 3, 4, 5].map((n) => unit(`bucket:ev:${n}`, 'a', 0));
    const p = planMoves(shards, [...buckets, unit('t1', 'b', 2), unit('vip', 'd', 5)], { kind: 'drain', shard: 'a' });
    expect(p.problems).toEqual([]);
    expect(p.moves.map((m) => m.unit).sort()).toEqual(buckets.map((b) => b.unit));
    const into = (s: string) => p.moves.filter((m) => m.to === s).length;
    expect(into('d'), 'dedicated shard takes none').toBe(0);
    // Load 0 adds no load anywhere: the fewest units decides, so b (holding t1) and c end one apart.
    expect(Math.abs(1 + into('b') - into('c'))).toBeLessThanOrEqual(1);
    expect(p.shards.find((s) => s.name === 'a')!.unitsAfter).toBe(0);
  });

  it('spreads zero-load buckets evenly when the targets are equally loaded', () => {
    const buckets = [0, 1, 2, 3, 4, 5].map((n) => unit(`bucket:ev:${n}`, 'a', 0));
    const p = planMoves([shard('a'), shard('b'), shard('c')], buckets, { kind: 'drain', shard: 'a' });
    expect(p.moves.filter((m) => m.to === 'b')).toHaveLength(3);
    expect(p.moves.filter((m) => m.to === 'c')).toHaveLength(3);
  });

  it('never plans an unmovable unit (a bucket of a dataset the config does not name) and names it when it had to leave', () => {
    const p = planMoves(
      [shard('a'), shard('b')],
      [{ ...unit('bucket:gone:1', 'a', 0), unmovable: 'is a bucket of dataset gone, which the config does not name' }],
      {
        kind: 'drain',
        shard: 'a',
      },
    );
    expect(p.moves).toEqual([]);
    expect(p.problems).toEqual(['bucket:gone:1 must leave a (a is draining) but is a bucket of dataset gone, which the config does not name']);
  });

  it('refuses to drain into a fleet without room, naming the unit', () => {
    const p = planMoves([shard('a', 10), shard('b', 10)], [unit('t1', 'a', 8), unit('t2', 'b', 8)], { kind: 'drain', shard: 'a' });
    expect(p.moves).toEqual([]);
    expect(p.problems[0]).toMatch(/no open shard has room for t1/);
  });

  it('isolates a tenant by moving it to an empty shard when its shard holds others', () => {
    const p = planMoves([shard('a'), shard('b'), shard('d')], [unit('hot', 'a', 5), unit('t2', 'a'), unit('t3', 'a'), unit('t4', 'b')], {
      kind: 'isolate',
      tenant: 'hot',
    });
    expect(p.moves).toEqual([expect.objectContaining({ unit: 'hot', from: 'a', to: 'd' })]);
    expect(p.dedicate).toEqual({ shard: 'd', tenant: 'hot' });
  });

  it('isolates a tenant in place by moving the one other unit when no shard is empty', () => {
    const p = planMoves([shard('a'), shard('b')], [unit('hot', 'a', 5), unit('t2', 'a'), unit('t3', 'b')], { kind: 'isolate', tenant: 'hot' });
    expect(p.moves).toEqual([expect.objectContaining({ unit: 't2', from: 'a', to: 'b' })]);
    expect(p.dedicate).toEqual({ shard: 'a', tenant: 'hot' });
  });

  it('keeps other units off a dedicated shard when rebalancing', () => {
    const p = planMoves([shard('a'), shard('b'), shard('d', 100, 'open', 'hot')], [unit('hot', 'd'), unit('t1', 'a'), unit('t2', 'a'), unit('t3', 'a')], {
      kind: 'rebalance',
    });
    expect(p.moves.every((m) => m.to !== 'd')).toBe(true);
    expect(p.moves).toHaveLength(1);
  });

  it('never moves an excluded unit (a move that failed in this run)', () => {
    const p = planMoves([shard('a'), shard('b')], [unit('t1', 'a'), unit('t2', 'a')], { kind: 'rebalance' }, { exclude: ['t1'] });
    expect(p.moves.map((m) => m.unit)).toEqual(['t2']);
  });

  it('moves only the units it is limited to, counting the others for load', () => {
    const p = planMoves([shard('a'), shard('b')], [unit('t1', 'a', 3), unit('t2', 'a', 3), unit('x', 'a', 2)], { kind: 'rebalance' }, { units: ['t1', 't2'] });
    expect(p.moves.map((m) => [m.unit, m.to])).toEqual([['t1', 'b']]);
  });

  it('keeps its invariants on random fleets, for every scope', () => {
    for (let seed = 1; seed <= 400; seed++) {
      const r = rng(seed);
      const nShards = 2 + Math.floor(r() * 6);
      const shards: PlanShard[] = Array.from({ length: nShards }, (_, i) =>
        shard(`s${i}`, 50 + Math.floor(r() * 200), r() < 0.15 ? 'draining' : r() < 0.05 ? 'closed' : 'open'),
      );
      if (!shards.some((s) => s.status === 'open')) shards[0].status = 'open';
      const nUnits = Math.floor(r() * 40);
      // Zipf-ish loads: a few heavy units, many light ones.
      const units: PlanUnit[] = Array.from({ length: nUnits }, (_, i) =>
        unit(`u${i}`, shards[Math.floor(r() ** 2 * nShards)].name, Math.max(0, Math.floor(30 / (1 + Math.floor(r() * 20))))),
      );
      const headroom = r() < 0.5 ? 0 : 0.1;
      const tol = [0.05, 0.2, 0.5][Math.floor(r() * 3)];
      const scopes: PlanScope[] = [{ kind: 'rebalance' }, { kind: 'drain', shard: shards[Math.floor(r() * nShards)].name }];
      if (units.length) scopes.push({ kind: 'isolate', tenant: units[Math.floor(r() * units.length)].unit });
      for (const scope of scopes) {
        const plan = planMoves(shards, units, scope, { tolerance: tol, headroomFraction: headroom });
        checkInvariants(shards, units, plan, headroom);
        if (scope.kind === 'drain' && plan.problems.length === 0)
          expect(plan.shards.find((s) => s.name === scope.shard)!.unitsAfter, `seed ${seed}: drained shard empty`).toBe(0);
        if (scope.kind === 'rebalance') {
          // Minimal: balancing stops at the first plan inside the band, so without its last move it was not.
          const balancing = plan.moves.filter((m) => / above the fleet mean /.test(m.reason));
          if (balancing.length) {
            const withoutLast = plan.moves.slice(0, -1);
            expect(violation(shards, units, withoutLast, tol), `seed ${seed}: last move was needed`).toBeGreaterThan(1e-9);
          }
          if (plan.balanced) expect(violation(shards, units, plan.moves, tol), `seed ${seed}: balanced means inside the band`).toBeLessThanOrEqual(1e-9);
          // A fleet already inside the band with nothing forced to leave (off a shard not open,
          // or off a shard over its headroom) is left alone.
          const loadOn = (name: string) => units.filter((u) => u.shard === name).reduce((a, u) => a + u.load, 0);
          const forced =
            units.some((u) => shards.find((s) => s.name === u.shard)!.status !== 'open') ||
            shards.some((s) => s.status === 'open' && loadOn(s.name) > s.capacity * (1 - headroom) + 1e-9);
          if (!forced && violation(shards, units, [], tol) <= 1e-9) expect(plan.moves, `seed ${seed}`).toEqual([]);
        }
      }
    }
  });

  it('stops at --max-moves: a rebalance says it stopped at its limit, a drain names each unit it left', () => {
    const shards = [shard('a'), shard('b'), shard('c'), shard('d')];
    const units = ['t1', 't2', 't3', 't4'].map((u) => unit(u, 'a'));
    const p = planMoves(shards, units, { kind: 'rebalance' }, { maxMoves: 2 });
    expect(p.moves).toHaveLength(2);
    expect(p.balanced).toBe(false);
    expect(p.problems).toEqual(['the plan stops at its limit of 2 move(s): the fleet stays outside ±20% of the mean']);
    expect(planMoves(shards, units, { kind: 'rebalance' }).moves).toHaveLength(3);
    const d = planMoves(shards, units, { kind: 'drain', shard: 'a' }, { maxMoves: 3 });
    expect(d.moves).toHaveLength(3);
    expect(d.problems).toEqual([expect.stringMatching(/^t\d must leave a \(a is draining\) but the plan is at its limit of 3 moves$/)]);
  });

  describe('residency (the regions a unit may live in)', () => {
    const inRegion = (name: string, region: string | null, capacity = 100): PlanShard => ({ ...shard(name, capacity), region });
    const resident = (u: string, s: string, regions: string[], load = 1): PlanUnit => ({ ...unit(u, s, load), regions });

    it('moves a unit off a shard outside its residency into one inside it, saying why; never into a shard with no region', () => {
      const shards = [inRegion('a', 'us-east'), inRegion('b', null), inRegion('c', 'eu-west'), inRegion('d', 'eu-west')];
      const units = [resident('gdpr', 'a', ['eu-west'], 3), unit('t1', 'c', 5), unit('t2', 'd', 1)];
      const p = planMoves(shards, units, { kind: 'rebalance' }, { tolerance: 10 });
      expect(p.moves).toEqual([{ unit: 'gdpr', from: 'a', to: 'd', load: 3, bytes: 0, reason: "a (region us-east) is outside gdpr's residency eu-west" }]);
      expect(p.problems).toEqual([]);
    });

    it('drains a shard without placing a resident unit outside its regions, and names the unit it cannot place', () => {
      const shards = [inRegion('a', 'eu-west'), inRegion('b', 'us-east'), inRegion('c', 'eu-west', 3)];
      const units = [resident('gdpr', 'a', ['eu-west'], 2), resident('big', 'a', ['eu-west'], 5), unit('t1', 'a', 1)];
      const p = planMoves(shards, units, { kind: 'drain', shard: 'a' });
      const to = new Map(p.moves.map((m) => [m.unit, m.to]));
      expect(to.get('gdpr')).toBe('c');
      expect(to.has('big')).toBe(false);
      expect(p.problems.join('\n')).toMatch(/no open shard has room for big .*must leave a/);
    });

    it('isolates a resident tenant only on a shard inside its residency', () => {
      const shards = [inRegion('a', 'eu-west'), inRegion('e1', 'us-east'), inRegion('e2', 'eu-west')];
      const units = [resident('hot', 'a', ['eu-west'], 5), unit('t1', 'a', 1), unit('t2', 'a', 1)];
      expect(planMoves(shards, units, { kind: 'isolate', tenant: 'hot' }).dedicate).toEqual({ shard: 'e2', tenant: 'hot' });
      expect(planMoves(shards, units, { kind: 'isolate', tenant: 'hot', to: 'e1' }).problems).toEqual([
        "cannot isolate hot on e1: it is in region us-east, outside the tenant's residency eu-west",
      ]);
    });

    it('never plans a unit outside its residency on random fleets, for every scope', () => {
      const REGIONS = ['r1', 'r2', null];
      for (let seed = 1; seed <= 300; seed++) {
        const r = rng(seed * 7919);
        const nShards = 2 + Math.floor(r() * 6);
        const shards = Array.from({ length: nShards }, (_, i) => ({
          ...shard(`s${i}`, 50 + Math.floor(r() * 200), r() < 0.15 ? ('draining' as const) : ('open' as const)),
          region: REGIONS[Math.floor(r() * 3)],
        }));
        if (!shards.some((s) => s.status === 'open')) shards[0].status = 'open';
        const units: PlanUnit[] = Array.from({ length: Math.floor(r() * 40) }, (_, i) => ({
          ...unit(`u${i}`, shards[Math.floor(r() ** 2 * nShards)].name, Math.max(0, Math.floor(30 / (1 + Math.floor(r() * 20))))),
          regions: r() < 0.3 ? [r() < 0.5 ? 'r1' : 'r2'] : r() < 0.1 ? ['r1', 'r2'] : null,
        }));
        const scopes: PlanScope[] = [{ kind: 'rebalance' }, { kind: 'drain', shard: shards[Math.floor(r() * nShards)].name }];
        if (units.length) scopes.push({ kind: 'isolate', tenant: units[Math.floor(r() * units.length)].unit });
        const byName = new Map(shards.map((s) => [s.name, s]));
        const inside = (u: PlanUnit, s: string) => !u.regions || u.regions.includes(byName.get(s)!.region as string);
        for (const scope of scopes) {
          const plan = planMoves(shards, units, scope, { tolerance: 0.2 });
          checkInvariants(shards, units, plan, 0);
          const byUnit = new Map(units.map((u) => [u.unit, u]));
          for (const m of plan.moves) expect(inside(byUnit.get(m.unit)!, m.to), `seed ${seed}: ${m.unit} to ${m.to}`).toBe(true);
          // A fleet rebalance that reports nothing it could not do leaves every unit inside its residency.
          if (scope.kind === 'rebalance' && plan.problems.length === 0) {
            for (const [u, s] of applyPlan(units, plan.moves)) expect(inside(byUnit.get(u)!, s), `seed ${seed}: ${u} on ${s}`).toBe(true);
          }
        }
      }
    });
  });

  it('a dedicated-class shard takes no shared unit, and is where an isolated tenant goes first', () => {
    const ded: PlanShard = { ...shard('e', 100), class: 'dedicated' };
    const shards = [shard('a', 100), shard('b', 100), ded, shard('f', 400)];
    const units = [unit('t1', 'a', 40), unit('t2', 'a', 30), unit('t3', 'a', 20), unit('t4', 'b', 5)];
    const p = planMoves(shards, units, { kind: 'rebalance' }, { headroomFraction: 0 });
    expect(p.moves.length).toBeGreaterThan(0);
    expect(p.moves.filter((m) => m.to === 'e')).toEqual([]);
    // Isolation prefers the shard added for it, over the larger empty shared one.
    const iso = planMoves(shards, units, { kind: 'isolate', tenant: 't1' }, { headroomFraction: 0 });
    expect(iso.dedicate).toEqual({ shard: 'e', tenant: 't1' });
    expect(iso.moves).toEqual([expect.objectContaining({ unit: 't1', from: 'a', to: 'e' })]);
    // A unit found on a dedicated-class shard not dedicated to it leaves on a rebalance.
    const stray = planMoves(shards, [...units, unit('t5', 'e', 1)], { kind: 'rebalance' }, { headroomFraction: 0 });
    expect(stray.moves).toContainEqual(expect.objectContaining({ unit: 't5', from: 'e' }));
  });

  it('isolate --to names the shard: it must be open, empty and fit the tenant', () => {
    const shards = [shard('a', 100), shard('b', 100), shard('c', 10), shard('d', 100, 'draining')];
    const units = [unit('t1', 'a', 40), unit('t2', 'a', 30), unit('t3', 'b', 5)];
    const to = (s: string) => planMoves(shards, units, { kind: 'isolate', tenant: 't1', to: s }, { headroomFraction: 0 });
    expect(to('b').problems).toEqual([expect.stringMatching(/cannot isolate t1 on b: it holds 1 other unit\(s\) \(t3\)/)]);
    expect(to('c').problems).toEqual([expect.stringMatching(/cannot isolate t1 on c: its usable capacity 10 is below the tenant's load 40/)]);
    expect(to('d').problems).toEqual([expect.stringMatching(/cannot isolate t1 on d: it is draining/)]);
    expect(to('zz').problems).toEqual([expect.stringMatching(/not in the inventory/)]);
    const ok = planMoves([...shards, shard('e', 100)], units, { kind: 'isolate', tenant: 't1', to: 'e' }, { headroomFraction: 0 });
    expect(ok.problems).toEqual([]);
    expect(ok.moves).toEqual([expect.objectContaining({ unit: 't1', to: 'e' })]);
  });
});

// A split tenant T is its sub-units T:0 .. T:K-1 in the directory (no unit T), each with its own
// measured load and bytes (lib/rebalance/measure.ts): the planner places each on its own.
describe("rebalance plan with a split tenant's sub-units", () => {
  const sub = (k: number, s: string, load: number, bytes = 1000): PlanUnit => ({ ...unit(`T:${k}`, s, load), bytes });

  it('moves a hot sub-unit off its shard apart from its siblings, which stay together; no move names the tenant', () => {
    const shards = [shard('a', 10), shard('b', 10), shard('c', 10)];
    const units = [sub(0, 'a', 1), sub(1, 'a', 6), sub(2, 'a', 1), sub(3, 'a', 1), unit('u1', 'b', 1), unit('u2', 'c', 1)];
    const plan = planMoves(shards, units, { kind: 'rebalance' }, { headroomFraction: 0.3 });
    checkInvariants(shards, units, plan, 0.3);
    // shard-a (9 > 7 usable) sheds the one unit that covers its excess with the fewest bytes: the hot sub-unit.
    expect(plan.moves[0]).toMatchObject({ unit: 'T:1', from: 'a' });
    expect(plan.moves.map((m) => m.unit)).not.toContain('T');
    const at = applyPlan(units, plan.moves);
    expect(['T:0', 'T:2', 'T:3'].map((u) => at.get(u))).not.toContain(at.get('T:1'));
    expect(plan.shards.every((s) => s.loadAfter <= 7)).toBe(true);
  });

  it('a drain moves every sub-unit on its own, spread over the shards that have room (their sum fits on none)', () => {
    const shards = [shard('a', 20), shard('b', 10), shard('c', 10)];
    const units = [sub(0, 'a', 3), sub(1, 'a', 3), sub(2, 'a', 3), sub(3, 'a', 3)];
    const plan = planMoves(shards, units, { kind: 'drain', shard: 'a' }, { headroomFraction: 0.3 });
    checkInvariants(shards, units, plan, 0.3);
    expect(plan.problems).toEqual([]);
    expect(plan.moves.map((m) => m.unit).sort()).toEqual(['T:0', 'T:1', 'T:2', 'T:3']);
    expect(new Set(plan.moves.map((m) => m.to))).toEqual(new Set(['b', 'c']));
  });
});

describe('a shard dedicated to a tenant that was split afterwards', () => {
  it('keeps the sub-units of its tenant (they are the tenant), and still sheds any other unit', () => {
    const shards = [shard('a', 100, 'open', 'hot'), shard('b', 100)];
    const units = [unit('hot:0', 'a', 5), unit('hot:1', 'a', 5), unit('x', 'a', 1), unit('hotx:0', 'a', 1)];
    const plan = planMoves(shards, units, { kind: 'rebalance' }, { headroomFraction: 0.1, tolerance: 10 });
    expect(plan.moves.map((m) => m.unit).sort()).toEqual(['hotx:0', 'x']);
    expect(plan.problems).toEqual([]);
    // A sub-unit of hot elsewhere may go onto hot's shard; another tenant's may not.
    const back = planMoves(shards, [unit('hot:2', 'b', 1), unit('u', 'b', 1)], { kind: 'drain', shard: 'b' }, { headroomFraction: 0.1 });
    expect(back.moves.map((m) => [m.unit, m.to])).toEqual([['hot:2', 'a']]);
    expect(back.problems.join('\n')).toContain('no open shard has room for u');
  });
});

describe('tenant isolate of a split tenant', () => {
  it('is refused naming the split and what to do instead, planning nothing', () => {
    const shards = [shard('a', 100), shard('b', 100)];
    const units = [unit('hot:0', 'a', 5), unit('hot:1', 'a', 5), unit('x', 'a', 1)];
    const plan = planMoves(shards, units, { kind: 'isolate', tenant: 'hot' }, { headroomFraction: 0.1 });
    expect(plan.moves).toEqual([]);
    expect(plan.problems).toEqual([
      'tenant hot is split into 2 sub-units (hot:0 ..): isolating a split tenant is not supported yet; move its sub-units with `shardctl move start --unit` or let the rebalancer place them',
    ]);
    expect(planMoves(shards, units, { kind: 'isolate', tenant: 'nope' }).problems).toEqual(['tenant nope is not in the directory']);
  });
});
