// `rebalance apply --plan FILE`, offline: the plan file's moves are read from what
// `rebalance plan --json` prints (unknown fields ignored), and a plan is checked against the
// directory as it is now, one reason per bad move: stale (the unit moved or is moving), a target
// outside the allowlist, not open, dedicated to another tenant, dedicated-class, outside the unit's
// residency, a unit twice. A valid plan has no problem.
import { describe, it, expect } from 'vitest';
import { parsePlanFile, planMoveProblems, type DirectoryNow } from '../../lib/rebalance/apply';

const shard = (
  name: string,
  o: Partial<{ status: 'open' | 'closed' | 'draining'; dedicatedTo: string | null; class: 'shared' | 'dedicated'; region: string | null }> = {},
) => ({
  name,
  status: o.status ?? 'open',
  dedicatedTo: o.dedicatedTo ?? null,
  class: o.class ?? 'shared',
  region: o.region ?? 'eu',
});

function now(o: Partial<DirectoryNow> = {}): DirectoryNow {
  return {
    allowlist: new Set(['shard-a', 'shard-b', 'shard-c', 'shard-d']),
    shards: new Map([shard('shard-a'), shard('shard-b'), shard('shard-c'), shard('shard-d')].map((s) => [s.name, s])),
    placements: new Map([
      ['t1', { shard: 'shard-a', state: 'active', moveId: null }],
      ['t2', { shard: 'shard-a', state: 'active', moveId: null }],
      ['bucket:ev:7', { shard: 'shard-b', state: 'active', moveId: null }],
    ]),
    inFlight: new Map(),
    residency: new Map(),
    ...o,
  };
}

describe('parsePlanFile', () => {
  it('reads unit, from, to (and load, bytes, reason) of each move of `rebalance plan --json`, ignoring fields it does not know', () => {
    const text = JSON.stringify({
      scope: { kind: 'rebalance' },
      moves: [
        { unit: 't1', from: 'shard-a', to: 'shard-d', load: 3, reason: 'shard-a 3 > 1', bytes: 123456, expectedSeconds: 4 },
        { unit: 'bucket:ev:7', from: 'shard-b', to: 'shard-d', bytes: 9 },
      ],
      shards: [],
      balanced: true,
      problems: [],
      somethingNew: { x: 1 },
    });
    expect(parsePlanFile(text, 'p.json')).toEqual([
      { unit: 't1', from: 'shard-a', to: 'shard-d', load: 3, bytes: 123456, reason: 'shard-a 3 > 1' },
      { unit: 'bucket:ev:7', from: 'shard-b', to: 'shard-d', bytes: 9 },
    ]);
    // `rebalance start --json` prints {plan}: read too.
    expect(parsePlanFile(JSON.stringify({ plan: { moves: [{ unit: 't2', from: 'shard-a', to: 'shard-b' }] } }), 'p.json')).toEqual([
      { unit: 't2', from: 'shard-a', to: 'shard-b' },
    ]);
  });

  it.each([
    ['not JSON', 'moves: t1', /p\.json is not JSON/],
    ['no moves list', '{"scope":{"kind":"rebalance"}}', /p\.json has no "moves" list/],
    ['a move without its target', '{"moves":[{"unit":"t1","from":"shard-a"}]}', /move 1 has no to/],
    ['a unit name that is not one', '{"moves":[{"unit":"","from":"shard-a","to":"shard-b"}]}', /move 1 has no unit/],
  ])('refuses %s with a usage error', (_what, text, message) => {
    let err: any;
    try {
      parsePlanFile(text, 'p.json');
    } catch (e) {
      err = e;
    }
    expect(err?.type).toBe('InvalidInput');
    expect(String(err?.message)).toMatch(message);
  });
});

describe('planMoveProblems', () => {
  it('has no problem for a plan that still holds', () => {
    expect(
      planMoveProblems(
        [
          { unit: 't1', from: 'shard-a', to: 'shard-d' },
          { unit: 'bucket:ev:7', from: 'shard-b', to: 'shard-c' },
        ],
        now(),
      ),
    ).toEqual([]);
  });

  it('refuses a stale plan: a unit no longer on its source, one moving, one gone, each named', () => {
    const n = now({
      placements: new Map([
        ['t1', { shard: 'shard-b', state: 'active', moveId: null }],
        ['t2', { shard: 'shard-a', state: 'active', moveId: null }],
        ['t3', { shard: 'shard-a', state: 'moving', moveId: 'm-3' }],
      ]),
      inFlight: new Map([['t2', 'm-2']]),
    });
    expect(
      planMoveProblems(
        [
          { unit: 't1', from: 'shard-a', to: 'shard-d' },
          { unit: 't2', from: 'shard-a', to: 'shard-d' },
          { unit: 't3', from: 'shard-a', to: 'shard-d' },
          { unit: 't4', from: 'shard-a', to: 'shard-d' },
        ],
        n,
      ),
    ).toEqual([
      'move t1 shard-a -> shard-d: t1 is on shard-b now, not shard-a: the plan is stale, plan again',
      'move t2 shard-a -> shard-d: t2 is moving already (move m-2): the plan is stale, plan again',
      'move t3 shard-a -> shard-d: t3 is moving already (move m-3): the plan is stale, plan again',
      'move t4 shard-a -> shard-d: t4 is not in the directory',
    ]);
  });

  it('refuses targets outside the allowlist, not open, dedicated, dedicated-class or outside the residency, and a unit twice', () => {
    const n = now({
      allowlist: new Set(['shard-a', 'shard-b', 'shard-c', 'shard-d']),
      shards: new Map(
        [
          shard('shard-a'),
          shard('shard-b', { status: 'draining' }),
          shard('shard-c', { dedicatedTo: 'vip' }),
          shard('shard-d', { class: 'dedicated' }),
          shard('shard-x'),
        ].map((s) => [s.name, s]),
      ),
      placements: new Map([
        ['t1', { shard: 'shard-a', state: 'active', moveId: null }],
        ['t2', { shard: 'shard-a', state: 'active', moveId: null }],
        ['t5', { shard: 'shard-a', state: 'active', moveId: null }],
      ]),
      residency: new Map([['t5', ['us']]]),
    });
    expect(
      planMoveProblems(
        [
          { unit: 't1', from: 'shard-a', to: 'shard-x' },
          { unit: 't2', from: 'shard-a', to: 'shard-b' },
          { unit: 't2', from: 'shard-a', to: 'shard-c' },
          { unit: 't1', from: 'shard-a', to: 'shard-d' },
          { unit: 't5', from: 'shard-a', to: 'shard-a' },
        ],
        n,
      ),
    ).toEqual([
      "move t1 shard-a -> shard-x: target shard-x is not in the config's shards: nothing connects to it",
      'move t2 shard-a -> shard-b: target shard-b is draining, not open',
      'move t2 shard-a -> shard-c: t2 is moved more than once in the plan',
      'move t2 shard-a -> shard-c: target shard-c is dedicated to tenant vip: no other unit moves there',
      'move t1 shard-a -> shard-d: t1 is moved more than once in the plan',
      'move t1 shard-a -> shard-d: target shard-d is a dedicated-class shard, kept for an isolated tenant',
      'move t5 shard-a -> shard-a: from and to are both shard-a',
      'move t5 shard-a -> shard-a: target shard-a is in region eu; t5 may reside only in us (`shardctl tenant residency t5`)',
    ]);
  });
});
