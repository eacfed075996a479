// Unit names and key filters: the naming grammar, and the property that after any history of
// splits and moves every key lies in exactly one active unit — proven exactly on the filters
// (pairwise disjoint residue classes whose shares sum to 1) and checked on random keys against
// what the router resolves.
import { describe, it, expect } from 'vitest';
import { stableHash64, bucketOf } from '../../lib/buckets/hash';
import { bucketUnitForKey, tenantUnitForRow } from '../../lib/buckets/route';
import {
  BucketDataset,
  bucketUnitName,
  filterHoldsKey,
  parseUnit,
  resolveUnit,
  RoutingKey,
  splitUnitName,
  unitFilter,
  UnitFilter,
  withSplit,
} from '../../lib/buckets/units';
import { prng } from '../../lib/loadgen/plan';
import { randomKeys } from '../helpers/keys';

const EVENTS: BucketDataset = { name: 'events', column: 'device_id', buckets: 64 };

describe('unit names', () => {
  it('names a bucket bucket:<dataset>:<n>, zero-padded to the digits of B-1', () => {
    expect(bucketUnitName('events', 42, 1024)).toBe('bucket:events:0042');
    expect(bucketUnitName('events', 1023, 1024)).toBe('bucket:events:1023');
    expect(bucketUnitName('events', 42, 100)).toBe('bucket:events:42');
    expect(bucketUnitName('events', 7, 65536)).toBe('bucket:events:00007');
    expect(bucketUnitName('events', 0, 1)).toBe('bucket:events:0');
  });

  it('refuses a bucket outside 0..B-1 and a bad dataset name', () => {
    expect(() => bucketUnitName('events', 1024, 1024)).toThrowError(/outside 0..1023/);
    expect(() => bucketUnitName('events', -1, 1024)).toThrowError(/outside/);
    expect(() => bucketUnitName('Events', 1, 1024)).toThrowError(/invalid dataset name/);
    expect(() => bucketUnitName('9lives', 1, 1024)).toThrowError(/invalid dataset name/);
  });

  it('parses each name as exactly one kind: a tenant id never contains ":", a dataset starts with a letter', () => {
    expect(parseUnit('acme')).toEqual({ kind: 'tenant', tenant: 'acme', path: [] });
    expect(parseUnit('acme:3:0')).toEqual({ kind: 'tenant', tenant: 'acme', path: [3, 0] });
    expect(parseUnit('bucket:events:0042')).toEqual({ kind: 'bucket', dataset: 'events', bucket: 42 });
    // A tenant called "bucket", split: its sub-unit is not a bucket of any dataset.
    expect(parseUnit('bucket:3')).toEqual({ kind: 'tenant', tenant: 'bucket', path: [3] });
    expect(splitUnitName('acme:3', 1)).toBe('acme:3:1');
  });

  it('refuses names of no kind, and non-canonical sub-unit indices', () => {
    for (const bad of ['', 'Acme', 'acme:', 'acme:01', 'acme:x', 'acme::1', 'bucket:Ev:1']) expect(() => parseUnit(bad)).toThrowError(/invalid|empty/);
  });

  it('accepts only the canonical name of a bucket of a known dataset as a unit', () => {
    const ds = [{ ...EVENTS, buckets: 1024 }];
    expect(unitFilter('bucket:events:0042', new Map(), ds)).toEqual({ kind: 'bucket', dataset: 'events', buckets: 1024, bucket: 42 });
    expect(() => unitFilter('bucket:events:42', new Map(), ds)).toThrowError(/not a bucket of events/);
    expect(() => unitFilter('bucket:events:1024', new Map(), ds)).toThrowError(/not a bucket of events/);
    expect(() => unitFilter('bucket:orders:0001', new Map(), ds)).toThrowError(/unknown dataset orders/);
  });
});

describe('how the router names the unit of a key', () => {
  const datasets = [{ ...EVENTS, buckets: 1024 }];

  it('a bucketed key: the bucket of stable_hash(key) mod B', () => {
    for (const key of ['device-1', 'Grüße', '']) expect(bucketUnitForKey(datasets, 'events', key)).toBe(bucketUnitName('events', bucketOf(key, 1024), 1024));
    expect(() => bucketUnitForKey(datasets, 'orders', 'k')).toThrowError(/unknown dataset orders \(known: events\)/);
  });

  it('a tenant row: the tenant, or once it is split the sub-unit its split key falls in', () => {
    expect(tenantUnitForRow('acme', undefined, new Map())).toBe('acme');
    expect(tenantUnitForRow('acme', 'order-7', new Map())).toBe('acme');
    const splits = withSplit(new Map(), 'acme', 4);
    expect(tenantUnitForRow('acme', 'order-7', splits)).toBe(`acme:${Number(stableHash64('order-7') % 4n)}`);
    expect(() => tenantUnitForRow('acme', undefined, splits)).toThrowError(/split column/);
  });

  it('a sub-unit of a sub-unit takes the next digit of the hash in mixed radix', () => {
    const splits = withSplit(withSplit(new Map(), 'acme', 4), 'acme:1', 3);
    const h = 4n * 3n * 1000n + 4n * 2n + 1n; // h mod 4 = 1, (h div 4) mod 3 = 2
    expect(resolveUnit({ tenant: 'acme', splitKeyHash: h }, splits, [])).toBe('acme:1:2');
    expect(unitFilter('acme:1:2', splits, [])).toEqual({ kind: 'tenant', tenant: 'acme', modulus: 12n, residue: 9n });
  });

  it('refuses to split a bucket, a unit already split, or a unit that does not exist', () => {
    const splits = withSplit(new Map(), 'acme', 2);
    expect(() => withSplit(splits, 'acme', 2)).toThrowError(/already split/);
    expect(() => withSplit(splits, 'acme:2', 2)).toThrowError(/does not exist/);
    expect(() => withSplit(splits, 'bucket:events:01', 2)).toThrowError(/only tenants/);
    expect(() => withSplit(splits, 'acme:0', 1)).toThrowError(/2 to 1024 ways/);
  });
});

// ---------------------------------------------------------------- property: one active unit per key

interface State {
  splits: Map<string, number>;
  /** Active unit → shard: the model of the directory. */
  placement: Map<string, string>;
}

const SHARDS = ['shard-a', 'shard-b', 'shard-c', 'shard-d'];
const TENANTS = ['acme', 'globex', 'initech', 'bucket', 'u-1'];

function initialState(rnd: () => number): State {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(rnd() * xs.length)];
  const placement = new Map<string, string>();
  for (const t of TENANTS) placement.set(t, pick(SHARDS));
  for (let b = 0; b < EVENTS.buckets; b++) placement.set(bucketUnitName(EVENTS.name, b, EVENTS.buckets), pick(SHARDS));
  return { splits: new Map(), placement };
}

function gcd(a: bigint, b: bigint): bigint {
  return b === 0n ? a : gcd(b, a % b);
}

/**
 * Exact: the active units of each root are pairwise disjoint residue classes (by the Chinese
 * remainder theorem, h ≡ r1 (mod m1) and h ≡ r2 (mod m2) share a solution iff r1 ≡ r2 mod
 * gcd(m1, m2)) whose densities 1/m sum to 1, so together they hold every hash exactly once.
 */
function expectExactPartition(state: State) {
  const byRoot = new Map<string, Array<{ unit: string; m: bigint; r: bigint }>>();
  for (const unit of state.placement.keys()) {
    const f = unitFilter(unit, state.splits, [EVENTS]);
    const [root, m, r] = f.kind === 'tenant' ? [`t/${f.tenant}`, f.modulus, f.residue] : [`d/${f.dataset}`, BigInt(f.buckets), BigInt(f.bucket)];
    byRoot.set(root, [...(byRoot.get(root) ?? []), { unit, m, r }]);
  }
  expect(byRoot.size).toBe(TENANTS.length + 1);
  for (const classes of byRoot.values()) {
    for (let i = 0; i < classes.length; i++) {
      for (let j = i + 1; j < classes.length; j++) {
        const g = gcd(classes[i].m, classes[j].m);
        if (classes[i].r % g === classes[j].r % g) throw new Error(`${classes[i].unit} and ${classes[j].unit} overlap`);
      }
    }
    const lcm = classes.reduce((l, c) => (l / gcd(l, c.m)) * c.m, 1n);
    expect(classes.reduce((s, c) => s + lcm / c.m, 0n)).toBe(lcm);
  }
}

describe('every key maps to exactly one active unit', () => {
  const words = randomKeys(600, 5);
  const keys: RoutingKey[] = words.flatMap((w, i) => [
    { tenant: TENANTS[i % TENANTS.length], splitKeyHash: stableHash64(w) },
    { dataset: EVENTS.name, keyHash: stableHash64(w) },
  ]);

  it('over random histories of splits and moves: splits move no key, a move moves only its unit, filters partition the keys', () => {
    // Violations are collected and asserted once per history: an expect per key is slow.
    const wrong: string[] = [];
    for (let seed = 1; seed <= 40; seed++) {
      const rnd = prng(seed);
      const pick = <T>(xs: readonly T[]) => xs[Math.floor(rnd() * xs.length)];
      const state = initialState(rnd);
      const route = (k: RoutingKey) => resolveUnit(k, state.splits, [EVENTS]);
      const shardOf = (k: RoutingKey) => state.placement.get(route(k));
      for (let step = 0; step < 30; step++) {
        const before = keys.map(shardOf);
        const units = [...state.placement.keys()];
        const tenantUnits = units.filter((u) => parseUnit(u).kind === 'tenant');
        if (rnd() < 0.4) {
          const unit = pick(tenantUnits);
          const f = unitFilter(unit, state.splits, []) as Extract<UnitFilter, { kind: 'tenant' }>;
          const ways = 2 + Math.floor(rnd() * 4);
          if (f.modulus * BigInt(ways) > 2n ** 32n) continue;
          const shard = state.placement.get(unit)!;
          state.splits = withSplit(state.splits, unit, ways);
          state.placement.delete(unit);
          // A split is a directory change only: its sub-units start where the unit was.
          for (let k = 0; k < ways; k++) state.placement.set(splitUnitName(unit, k), shard);
          keys.forEach((k, i) => shardOf(k) !== before[i] && wrong.push(`seed ${seed}: split of ${unit} moved ${route(k)}`));
        } else {
          const unit = pick(rnd() < 0.5 ? tenantUnits : units);
          const to = pick(SHARDS.filter((s) => s !== state.placement.get(unit)));
          state.placement.set(unit, to);
          const f = unitFilter(unit, state.splits, [EVENTS]);
          keys.forEach((k, i) => {
            const want = filterHoldsKey(f, k) ? to : before[i];
            if (shardOf(k) !== want) wrong.push(`seed ${seed}: move of ${unit} left a key of ${route(k)} on ${shardOf(k)}, not ${want}`);
          });
        }
        for (const k of keys) if (!state.placement.has(route(k))) wrong.push(`seed ${seed}: ${route(k)} is not an active unit`);
      }
      expectExactPartition(state);
      const filters = [...state.placement.keys()].map((u) => ({ u, f: unitFilter(u, state.splits, [EVENTS]) }));
      for (const k of keys) {
        const holders = filters.filter(({ f }) => filterHoldsKey(f, k)).map(({ u }) => u);
        if (holders.length !== 1 || holders[0] !== route(k)) wrong.push(`seed ${seed}: held by [${holders}], routed to ${route(k)}`);
      }
      expect(state.splits.size).toBeGreaterThan(0);
    }
    expect(wrong.slice(0, 5)).toEqual([]);
  });

  it('the exact check catches an overlap and a gap', () => {
    const rnd = prng(1);
    const overlap = initialState(rnd);
    overlap.splits = withSplit(new Map(), 'acme', 2);
    overlap.placement.delete('acme');
    overlap.placement.set('acme:0', 'shard-a');
    expect(() => expectExactPartition(overlap)).toThrowError(); // acme:1 missing: a gap
    overlap.placement.set('acme:1', 'shard-a');
    expectExactPartition(overlap);
    overlap.placement.set('acme', 'shard-b'); // the parent still active beside its sub-units
    expect(() => expectExactPartition(overlap)).toThrowError(/overlap/);
  });
});
