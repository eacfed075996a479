// The planner's plan pinned (issue 13): on one small fixed fleet from bench/planner.ts's generator
// (40 shards, 2,000 Zipf-sized units, byte budgets, residency, draining and dedicated-class
// shards), each scope's whole plan (moves with their reasons, shard summaries, problems, dedicated
// needs) hashes to the value the planner gave before its speed-ups (commit 510d31e), so a change
// meant only to make it faster that changes any plan fails here. The same units in another order
// give the same plan (the planner orders them by name itself).
import { createHash } from 'node:crypto';
import { describe, it, expect } from 'vitest';
import { planMoves, type PlanOptions, type PlanScope, type PlanUnit } from '../../lib/rebalance/plan';
import { makeFleet } from '../../bench/planner';
import { xorshift32 } from '../helpers/xorshift';

const fleet = makeFleet(40, 2000, 1.1, 7);
const digest = (x: unknown) => createHash('sha256').update(JSON.stringify(x)).digest('hex').slice(0, 16);

function shuffled(units: readonly PlanUnit[]): PlanUnit[] {
  const r = xorshift32(3);
  const out = [...units];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

const cases: { name: string; scope: PlanScope; opts: PlanOptions; moves: number; problems: number; digest: string }[] = [
  { name: 'rebalance', scope: { kind: 'rebalance' }, opts: { headroomFraction: 0.3 }, moves: 457, problems: 9, digest: '954084ae04fd6627' },
  { name: 'drain', scope: { kind: 'drain', shard: 's0003' }, opts: { headroomFraction: 0.3 }, moves: 20, problems: 0, digest: '7da38569d3138d87' },
  { name: 'isolate', scope: { kind: 'isolate', tenant: 't000010' }, opts: { headroomFraction: 0.3 }, moves: 25, problems: 0, digest: 'cb594dfc70988814' },
  {
    name: 'rebalance with exclusions and a move limit',
    scope: { kind: 'rebalance' },
    opts: { headroomFraction: 0.2, tolerance: 0.1, exclude: fleet.units.filter((_, i) => i % 7 === 0).map((u) => u.unit), maxMoves: 300 },
    moves: 300,
    problems: 12,
    digest: '0d4f005ac12bac0c',
  },
];

describe('rebalance plan pinned on a fixed fleet', () => {
  it.each(cases)('gives the same whole plan as before its speed-ups: $name', (c) => {
    const p = planMoves(fleet.shards, fleet.units, c.scope, c.opts);
    expect(p.moves.length).toBe(c.moves);
    expect(p.problems.length).toBe(c.problems);
    expect(digest(p)).toBe(c.digest);
  });

  it('gives the same plan whatever order the units come in', () => {
    const units = shuffled(fleet.units);
    expect(units.map((u) => u.unit)).not.toEqual(fleet.units.map((u) => u.unit));
    for (const c of cases) expect(digest(planMoves(fleet.shards, units, c.scope, c.opts))).toBe(c.digest);
  });
});
