// Property test of the planner (lib/rebalance/plan.ts) with measured sizes (issue 13): random
// fleets with Zipf unit sizes (bytes and load), byte budgets, residency, dedicated shards (by
// isolation and by class), draining and closed shards, moves in flight (reservations, moving
// units) and unmovable units. Whatever the fleet, for every scope: no target is ever over its
// usable load or bytes even if every incoming move lands before any outgoing one; no move breaks
// policy; every unit ends on exactly one shard, an eligible one unless a problem names it; no unit
// moves twice; a rebalance that reports no problem leaves every open shared shard under its
// headroom; a unit named for a dedicated shard fits no shared shard it may live on.
import { describe, it, expect } from 'vitest';
import { planMoves, applyPlan, type PlanShard, type PlanUnit, type PlanScope, type RebalancePlan } from '../../lib/rebalance/plan';
import { xorshift32 } from '../helpers/xorshift';

const rng = xorshift32;

const REGIONS = ['r1', 'r2', null];

function fleet(seed: number): { shards: PlanShard[]; units: PlanUnit[]; headroom: number } {
  const r = rng(seed);
  const nShards = 2 + Math.floor(r() * 9);
  const nUnits = Math.floor(r() * 80);
  const zipf = 0.8 + r() * 0.6;
  const headroom = [0, 0.1, 0.3][Math.floor(r() * 3)];
  const shards: PlanShard[] = Array.from({ length: nShards }, (_, i) => {
    const x = r();
    return {
      name: `s${i}`,
      capacity: 50 + Math.floor(r() * 200),
      capacityBytes: r() < 0.7 ? 10_000 + Math.floor(r() * 40_000) : null,
      status: x < 0.1 ? 'draining' : x < 0.15 ? 'closed' : 'open',
      class: r() < 0.1 ? 'dedicated' : 'shared',
      region: REGIONS[Math.floor(r() * 3)],
      reserved: r() < 0.1 ? Math.floor(r() * 20) : 0,
    };
  });
  if (!shards.some((s) => s.status === 'open' && s.class === 'shared')) Object.assign(shards[0], { status: 'open', class: 'shared' });
  const units: PlanUnit[] = Array.from({ length: nUnits }, (_, i) => {
    const size = 1 / Math.pow(1 + Math.floor(r() * nUnits), zipf);
    return {
      unit: `u${i}`,
      shard: shards[Math.floor(r() ** 2 * nShards)].name,
      load: Math.round(size * 120 * (0.5 + r())),
      bytes: Math.round(size * 30_000),
      rows: Math.round(size * 300),
      state: r() < 0.05 ? 'moving' : 'active',
      regions: r() < 0.25 ? [r() < 0.5 ? 'r1' : 'r2'] : null,
      ...(r() < 0.03 ? { unmovable: 'is a bucket of a dataset the config does not name' } : {}),
    };
  });
  // One shard dedicated to a tenant living there, sometimes.
  if (units.length && r() < 0.3) {
    const u = units[Math.floor(r() * units.length)];
    const s = shards.find((x) => x.name === u.shard)!;
    if (s.status === 'open') s.dedicatedTo = u.unit;
  }
  return { shards, units, headroom };
}

const eligible = (u: PlanUnit, s: PlanShard) =>
  s.status === 'open' &&
  (!u.regions || (!!s.region && u.regions.includes(s.region))) &&
  (!s.dedicatedTo || s.dedicatedTo === u.unit) &&
  (s.class !== 'dedicated' || s.dedicatedTo === u.unit);

function check(seed: number, shards: PlanShard[], units: PlanUnit[], headroom: number, scope: PlanScope, plan: RebalancePlan) {
  const at = `seed ${seed} ${scope.kind}`;
  const byName = new Map(shards.map((s) => [s.name, s]));
  const byUnit = new Map(units.map((u) => [u.unit, u]));
  // No unit moves twice; only movable units move, from where they are, with their own size.
  expect(new Set(plan.moves.map((m) => m.unit)).size, `${at}: no unit moves twice`).toBe(plan.moves.length);
  for (const m of plan.moves) {
    const u = byUnit.get(m.unit)!;
    expect(m.from, at).toBe(u.shard);
    expect(u.state, `${at}: ${m.unit} was not moving`).not.toBe('moving');
    expect(u.unmovable, `${at}: ${m.unit} movable`).toBeUndefined();
    expect([m.load, m.bytes], at).toEqual([u.load, u.bytes]);
    // Policy: the target is open, inside its residency, and nobody else's (isolate: the dedicated shard is the tenant's).
    const t = byName.get(m.to)!;
    const target = plan.dedicate?.shard === t.name ? { ...t, dedicatedTo: plan.dedicate.tenant } : t;
    expect(eligible(u, target), `${at}: ${m.unit} -> ${m.to} allowed`).toBe(true);
  }
  // Mid-plan: every target holds at most its load and bytes now (reservations included) plus all that is planned into it.
  for (const s of shards) {
    const into = plan.moves.filter((m) => m.to === s.name);
    if (!into.length) continue;
    const now = units.filter((u) => u.shard === s.name);
    const load = (s.reserved ?? 0) + now.reduce((a, u) => a + u.load, 0) + into.reduce((a, m) => a + m.load, 0);
    expect(load, `${at}: ${s.name} load mid-plan`).toBeLessThanOrEqual(s.capacity * (1 - headroom) + 1e-9);
    if (s.capacityBytes) {
      const bytes = now.reduce((a, u) => a + (u.bytes ?? 0), 0) + into.reduce((a, m) => a + m.bytes, 0);
      expect(bytes, `${at}: ${s.name} bytes mid-plan`).toBeLessThanOrEqual(s.capacityBytes * (1 - headroom) + 1e-9);
    }
  }
  // Every unit ends on exactly one shard of the inventory: an eligible one, unless a problem names it.
  const end = applyPlan(units, plan.moves);
  expect(end.size, at).toBe(units.length);
  if (scope.kind === 'rebalance') {
    for (const [u, s] of end) {
      if (!eligible(byUnit.get(u)!, byName.get(s)!))
        expect(
          plan.problems.some((p) => p.includes(u)),
          `${at}: ${u} left on ${s} is named`,
        ).toBe(true);
    }
    // No problem reported: every open shared shard ends under its headroom, in load and bytes.
    if (!plan.problems.length) {
      for (const x of plan.shards) {
        const s = byName.get(x.name)!;
        if (s.status !== 'open' || s.class === 'dedicated' || s.dedicatedTo) continue;
        expect(x.loadAfter + (s.reserved ?? 0), `${at}: ${s.name} load under headroom`).toBeLessThanOrEqual(s.capacity * (1 - headroom) + 1e-9);
        if (s.capacityBytes) expect(x.bytesAfter, `${at}: ${s.name} bytes under headroom`).toBeLessThanOrEqual(s.capacityBytes * (1 - headroom) + 1e-9);
      }
    }
    // A unit named for a dedicated shard fits no open shared shard it may live on, even empty; and
    // the size it asks for holds it under the headroom.
    for (const d of plan.dedicatedNeeded ?? []) {
      const u = byUnit.get(d.unit)!;
      const room = shards.filter(
        (s) =>
          eligible(u, { ...s, dedicatedTo: null }) &&
          s.class !== 'dedicated' &&
          !s.dedicatedTo &&
          u.load <= s.capacity * (1 - headroom) + 1e-9 &&
          (!s.capacityBytes || (u.bytes ?? 0) <= s.capacityBytes * (1 - headroom) + 1e-9),
      );
      expect(
        room.map((s) => s.name),
        `${at}: ${d.unit} fits no shared shard`,
      ).toEqual([]);
      expect(d.capacityOps * (1 - headroom), at).toBeGreaterThanOrEqual(u.load - 1e-9);
      if (d.capacityBytes !== null) expect(d.capacityBytes * (1 - headroom), at).toBeGreaterThanOrEqual((u.bytes ?? 0) - 1e-9);
      expect(
        plan.problems.some((p) => p.includes(d.unit) && p.includes('dedicated shard')),
        at,
      ).toBe(true);
      expect(d.commands.join('\n'), at).toContain(`tenant isolate --tenant ${d.unit}`);
    }
  }
}

describe('rebalance plan on random fleets with measured sizes', () => {
  it('keeps capacity (load and bytes) even mid-plan, policy, one shard per unit and one move per unit, for every scope', () => {
    let moved = 0;
    let dedicated = 0;
    for (let seed = 1; seed <= 500; seed++) {
      const { shards, units, headroom } = fleet(seed);
      const r = rng(seed * 31);
      const scopes: PlanScope[] = [{ kind: 'rebalance' }, { kind: 'drain', shard: shards[Math.floor(r() * shards.length)].name }];
      if (units.length) scopes.push({ kind: 'isolate', tenant: units[Math.floor(r() * units.length)].unit });
      for (const scope of scopes) {
        const tolerance = [0.1, 0.2, 10][Math.floor(r() * 3)];
        const maxMoves = r() < 0.2 ? 1 + Math.floor(r() * 5) : undefined;
        const plan = planMoves(shards, units, scope, { headroomFraction: headroom, tolerance, maxMoves });
        if (maxMoves !== undefined) expect(plan.moves.length).toBeLessThanOrEqual(maxMoves);
        check(seed, shards, units, headroom, scope, plan);
        moved += plan.moves.length;
        dedicated += plan.dedicatedNeeded?.length ?? 0;
      }
    }
    // The fleets exercise the planner: many moves, and some tenants too big for any shared shard.
    expect(moved).toBeGreaterThan(500);
    expect(dedicated).toBeGreaterThan(0);
  });

  it('sheds the fewest bytes: one small unit rather than a big one when either relieves the shard', () => {
    const shards: PlanShard[] = [
      { name: 'a', capacity: 100, capacityBytes: 1000, status: 'open' },
      { name: 'b', capacity: 100, capacityBytes: 1000, status: 'open' },
    ];
    const units: PlanUnit[] = [
      { unit: 'big', shard: 'a', load: 30, bytes: 600 },
      { unit: 'small', shard: 'a', load: 30, bytes: 50 },
      { unit: 'x', shard: 'a', load: 40, bytes: 100 },
    ];
    // a: load 100 > 70 usable (headroom 0.3): 30 must go; bytes 750 > 700: 50 must go.
    const p = planMoves(shards, units, { kind: 'rebalance' }, { headroomFraction: 0.3, tolerance: 10 });
    expect(p.moves.map((m) => [m.unit, m.to, m.bytes])).toEqual([['small', 'b', 50]]);
    expect(p.problems).toEqual([]);
    const a = p.shards.find((s) => s.name === 'a')!;
    expect([a.utilisationBefore, a.utilisationAfter]).toEqual([1, 0.7]);
  });

  it('names a tenant too big for any shared shard, with the dedicated shard it needs and the isolate command', () => {
    const shards: PlanShard[] = [
      { name: 'a', capacity: 100, capacityBytes: 1000, status: 'open' },
      { name: 'b', capacity: 100, capacityBytes: 1000, status: 'open' },
    ];
    const units: PlanUnit[] = [
      { unit: 'whale', shard: 'a', load: 10, bytes: 1500 },
      { unit: 't1', shard: 'a', load: 10, bytes: 10 },
    ];
    const p = planMoves(shards, units, { kind: 'rebalance' }, { headroomFraction: 0.2, tolerance: 10 });
    expect(p.dedicatedNeeded).toEqual([
      expect.objectContaining({
        unit: 'whale',
        shard: 'a',
        capacityOps: 13,
        capacityBytes: 1875,
        commands: [expect.stringContaining('--class dedicated'), 'shardctl tenant isolate --tenant whale --to NEW_SHARD'],
      }),
    ]);
    expect(p.problems.join('\n')).toMatch(/whale \(load 10, 1500 bytes\) is too big for any shared shard .*dedicated shard of capacity 13 and 1875 bytes/);
  });
});
