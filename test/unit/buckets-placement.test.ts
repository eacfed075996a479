// The arithmetic of docs/architecture.md "Buckets", reproduced: exact shares from residues, and
// the same shares measured on 100k hashed keys.
import { describe, it, expect } from 'vitest';
import { bucketOf, stableHash64 } from '../../lib/buckets/hash';
import { evenBucketMoves, modNMovedShare, modNShard, rendezvousOwner } from '../../lib/buckets/placement';

const KEYS = Array.from({ length: 100_000 }, (_, i) => `customer-${i}`);
const HASHES = KEYS.map(stableHash64);
/** A measured share, within 5 standard deviations of the exact one for `n` keys. */
function expectShare(moved: number, n: number, exact: number) {
  expect(Math.abs(moved / n - exact)).toBeLessThan(5 * Math.sqrt((exact * (1 - exact)) / n));
}

describe('hash mod N', () => {
  it('going from 3 to 4 shards moves 3/4 of the keys: exactly over residues, ~75% measured', () => {
    expect(modNMovedShare(3, 4)).toEqual({ moved: 9, of: 12 });
    const moved = HASHES.filter((h) => modNShard(h, 3) !== modNShard(h, 4)).length;
    expectShare(moved, KEYS.length, 0.75);
  });

  it('moves most keys for any change of N (N → N+1 moves N/(N+1))', () => {
    for (const n of [2, 5, 10]) {
      const { moved, of } = modNMovedShare(n, n + 1);
      expect(moved / of).toBeCloseTo(n / (n + 1), 10);
    }
  });
});

describe('logical buckets', () => {
  const B = 12;
  const roundRobin = Array.from({ length: B }, (_, b) => ['a', 'b', 'c'][b % 3]);

  it('12 buckets on 3 shards: adding a 4th moves 3 buckets, one from each, and 25% of the keys', () => {
    const moves = evenBucketMoves(roundRobin, ['a', 'b', 'c', 'd']);
    expect(moves).toHaveLength(3);
    expect(moves.every((m) => m.to === 'd')).toBe(true);
    expect(new Set(moves.map((m) => m.from))).toEqual(new Set(['a', 'b', 'c']));

    const after = [...roundRobin];
    for (const m of moves) after[m.bucket] = m.to;
    const perShard = new Map<string, number>();
    for (const s of after) perShard.set(s, (perShard.get(s) ?? 0) + 1);
    expect([...perShard.values()]).toEqual([3, 3, 3, 3]);

    const bucketOfKey = KEYS.map((k) => bucketOf(k, B));
    const moved = bucketOfKey.filter((b) => roundRobin[b] !== after[b]).length;
    expectShare(moved, KEYS.length, 0.25);
  });

  it('moves nothing when the buckets are already even, and only the drained shard when one leaves', () => {
    expect(evenBucketMoves(roundRobin, ['a', 'b', 'c'])).toEqual([]);
    const drain = evenBucketMoves(roundRobin, ['a', 'b']);
    expect(drain.map((m) => m.bucket)).toEqual([2, 5, 8, 11]);
    expect(drain.every((m) => m.from === 'c')).toBe(true);
    expect(drain.filter((m) => m.to === 'a')).toHaveLength(2);
  });

  it('gives the extra bucket of an uneven split to shards that already hold it', () => {
    // 10 buckets: a holds 4, b 3, c 3; quotas 4/3/3 on three shards, so nothing moves.
    const owners = ['a', 'a', 'a', 'a', 'b', 'b', 'b', 'c', 'c', 'c'];
    expect(evenBucketMoves(owners, ['a', 'b', 'c'])).toEqual([]);
    // Onto 4 shards: quotas a 3, b 3, c 2, d 2, so a and c give one each and d takes both.
    const moves = evenBucketMoves(owners, ['a', 'b', 'c', 'd']);
    expect(moves).toHaveLength(2);
    expect(moves.every((m) => m.to === 'd')).toBe(true);
    expect(moves.map((m) => m.from).sort()).toEqual(['a', 'c']);
  });
});

describe('rendezvous hashing', () => {
  // Four SHA-256 per key and node count: 20k keys keep this file fast.
  const keys = KEYS.slice(0, 20_000);
  const owners = (nodes: string[]) => keys.map((k) => rendezvousOwner(k, nodes));
  const three = owners(['a', 'b', 'c']);
  const four = owners(['a', 'b', 'c', 'd']);

  it('adding a node moves exactly the keys the new node wins, ~1/N of them', () => {
    const moved = keys.filter((_, i) => three[i] !== four[i]).length;
    const wonByD = keys.filter((_, i) => four[i] === 'd').length;
    const movedElsewhere = keys.filter((_, i) => three[i] !== four[i] && four[i] !== 'd').length;
    expect(movedElsewhere).toBe(0);
    expect(moved).toBe(wonByD);
    expectShare(moved, keys.length, 0.25);
  });

  it('removing a node moves only its own keys', () => {
    const two = owners(['a', 'c']);
    const movedOthers = keys.filter((_, i) => three[i] !== 'b' && two[i] !== three[i]).length;
    expect(movedOthers).toBe(0);
    expect(two.filter((o) => o === 'b')).toEqual([]);
  });

  it('does not depend on the order the nodes are listed in', () => {
    expect(owners(['d', 'c', 'b', 'a'])).toEqual(four);
  });
});
