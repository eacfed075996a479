// Headroom arithmetic with moves in flight (lib/directory/choose.ts, lib/rebalance/plan.ts): a
// shard's committed load is its units' load plus what moves in flight reserve on it, and every
// check — a move's target, a new unit's placement, the rebalance planner — counts both.
import { describe, it, expect } from 'vitest';
import { chooseShardForNewUnit, committedLoad, headroomAfter, moveTargetProblems, type ShardLoad } from '../../lib/directory/choose';
import { planMoves } from '../../lib/rebalance/plan';

const held = (moveId: string, unit: string, load: number) => ({ moveId, unit, load });
const shard = (name: string, load: number, reservations: ReturnType<typeof held>[] = [], capacity = 1000): ShardLoad => ({
  name,
  load,
  capacity,
  status: 'open',
  reserved: reservations.reduce((n, r) => n + r.load, 0),
  reservations,
});

describe('headroom with reservations of moves in flight', () => {
  it('committed load is the units’ load plus the reserved load', () => {
    expect(committedLoad(shard('a', 100, [held('m1', 'u1', 50), held('m2', 'u2', 25)]))).toBe(175);
    expect(committedLoad({ name: 'a', load: 100, capacity: 1000, status: 'open' })).toBe(100);
  });

  it('headroom after a unit subtracts the reserved load', () => {
    expect(headroomAfter(shard('a', 100, [held('m1', 'u1', 300)]), 100, 0.1)).toBe(900 - 100 - 300 - 100);
  });

  it('refuses a move whose unit fits the load but not the load plus a reservation, naming the reservation', () => {
    const s = shard('b', 100, [held('acme.e1.r1', 'acme', 500)]);
    expect(moveTargetProblems(shard('b', 100), 'globex', 500, 0.1)).toEqual([]);
    const [why] = moveTargetProblems(s, 'globex', 500, 0.1);
    expect(why).toContain('target b lacks headroom');
    expect(why).toContain('reserved 500');
    expect(why).toContain('reservation 500 by move acme.e1.r1 of acme');
  });

  it('accepts the move exactly at the usable capacity with reservations counted', () => {
    expect(moveTargetProblems(shard('b', 100, [held('m1', 'u1', 300)]), 'u2', 500, 0.1)).toEqual([]);
    expect(moveTargetProblems(shard('b', 100, [held('m1', 'u1', 300)]), 'u2', 501, 0.1)).toHaveLength(1);
  });

  it('names at most three reservations and counts the rest', () => {
    const s = shard('b', 0, [held('m1', 'u1', 250), held('m2', 'u2', 250), held('m3', 'u3', 250), held('m4', 'u4', 100)]);
    const [why] = moveTargetProblems(s, 'x', 100, 0.1);
    expect(why).toContain('m3');
    expect(why).not.toContain('m4');
    expect(why).toContain('and 1 more');
  });

  it('places a new unit away from a shard whose room is reserved by a move in flight', () => {
    // Without the reservation a has the most room; with it, b does.
    expect(chooseShardForNewUnit([shard('a', 0), shard('b', 100)], 10, 0.1)).toBe('a');
    expect(chooseShardForNewUnit([shard('a', 0, [held('m1', 'u1', 400)]), shard('b', 100)], 10, 0.1)).toBe('b');
  });

  it('finds no shard when reservations take the last room', () => {
    expect(() => chooseShardForNewUnit([shard('a', 400, [held('m1', 'u1', 450)])], 100, 0.1)).toThrow(/no open shard has room/);
  });

  it('the rebalance planner never plans a move into room a move in flight has reserved', () => {
    const units = [
      { unit: 't1', shard: 'a', load: 40, state: 'active' as const },
      { unit: 't2', shard: 'a', load: 40, state: 'active' as const },
    ];
    const open = planMoves(
      [
        { name: 'a', capacity: 100, status: 'open' },
        { name: 'b', capacity: 100, status: 'open' },
      ],
      units,
      { kind: 'drain', shard: 'a' },
      { headroomFraction: 0.1 },
    );
    expect(open.moves.map((m) => m.to)).toEqual(['b', 'b']);
    const reserved = planMoves(
      [
        { name: 'a', capacity: 100, status: 'open' },
        { name: 'b', capacity: 100, status: 'open', reserved: 40 },
      ],
      units,
      { kind: 'drain', shard: 'a' },
      { headroomFraction: 0.1 },
    );
    expect(reserved.moves).toHaveLength(1);
    expect(reserved.problems.join(' ')).toContain('no open shard has room');
  });

  it('the isolate planner does not call a shard with a reservation empty', () => {
    const shards = [
      { name: 'a', capacity: 100, status: 'open' as const },
      { name: 'b', capacity: 100, status: 'open' as const, reserved: 5 },
      { name: 'c', capacity: 50, status: 'open' as const },
    ];
    const units = [
      { unit: 'hot', shard: 'a', load: 5 },
      { unit: 'x', shard: 'a', load: 5 },
      { unit: 'y', shard: 'a', load: 5 },
    ];
    const p = planMoves(shards, units, { kind: 'isolate', tenant: 'hot' });
    expect(p.dedicate?.shard).toBe('c');
  });
});
