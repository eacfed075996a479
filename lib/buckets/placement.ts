// Placement arithmetic of resharding (docs/architecture.md, "Buckets"): why routing goes through
// logical buckets. `hash mod N` moves most keys when N changes; a fixed B with buckets assigned
// to shards moves only the buckets reassigned; rendezvous hashing moves only the keys the new
// node wins. No I/O; Node only because the hash is node:crypto (not for workflows).
import { invalidInput } from '../errors';
import { stableHash64 } from './hash';

/** The shard index of a key hash under plain `hash mod N` (the scheme buckets replace). */
export function modNShard(hash: bigint, shards: number): number {
  if (!Number.isInteger(shards) || shards < 1) throw invalidInput(`a shard count is a positive integer, got ${shards}`);
  return Number(hash % BigInt(shards));
}

/**
 * The exact share of keys whose shard changes from `hash mod from` to `hash mod to`, for a
 * uniform hash: count the residues mod lcm(from, to) that land differently. 3 → 4: 9 of 12.
 */
export function modNMovedShare(from: number, to: number): { moved: number; of: number } {
  const of = lcm(from, to);
  let moved = 0;
  for (let r = 0; r < of; r++) if (r % from !== r % to) moved++;
  return { moved, of };
}

export interface BucketMove {
  bucket: number;
  from: string;
  to: string;
}

/**
 * The fewest bucket moves that leave every shard in `shards` holding ⌊B/N⌋ or ⌈B/N⌉ buckets.
 * `owners[b]` is bucket b's shard; buckets on a shard not in `shards` (a drain) all move. The
 * ⌈B/N⌉ quotas go to the shards holding most already (ties by name), so nothing moves twice;
 * a shard gives up its highest-numbered buckets, and the shards short of their quota, in name
 * order, take the freed buckets lowest first (deterministic).
 */
export function evenBucketMoves(owners: readonly string[], shards: readonly string[]): BucketMove[] {
  if (shards.length === 0) throw invalidInput('no shard to place buckets on');
  if (new Set(shards).size !== shards.length) throw invalidInput('duplicate shard in placement');
  const held = new Map<string, number[]>(shards.map((s) => [s, []]));
  const orphans: number[] = [];
  owners.forEach((s, b) => (held.get(s) ?? orphans).push(b));
  const base = Math.floor(owners.length / shards.length);
  const byHolding = [...shards].sort((a, b) => held.get(b)!.length - held.get(a)!.length || (a < b ? -1 : 1));
  const quota = new Map(byHolding.map((s, i) => [s, base + (i < owners.length % shards.length ? 1 : 0)]));
  const freed: Array<{ bucket: number; from: string }> = orphans.map((b) => ({ bucket: b, from: owners[b] }));
  for (const s of [...shards].sort()) {
    const mine = held.get(s)!;
    for (const b of mine.slice(quota.get(s)!)) freed.push({ bucket: b, from: s });
  }
  freed.sort((x, y) => x.bucket - y.bucket);
  const moves: BucketMove[] = [];
  for (const s of [...shards].sort()) {
    for (let n = held.get(s)!.length; n < quota.get(s)!; n++) moves.push({ ...freed.shift()!, to: s });
  }
  return moves.sort((x, y) => x.bucket - y.bucket);
}

/**
 * Rendezvous (highest-random-weight) hashing: the node with the largest
 * stable_hash(`<node>:<item>`), ties by the smaller name. Shard names hold no ':', so the
 * weight's input is unambiguous. Adding a node moves only the items it now wins.
 */
export function rendezvousOwner(item: string, nodes: readonly string[]): string {
  if (nodes.length === 0) throw invalidInput('rendezvous over no nodes');
  let best = '';
  let bestWeight = -1n;
  for (const node of nodes) {
    const w = stableHash64(`${node}:${item}`);
    if (w > bestWeight || (w === bestWeight && node < best)) {
      best = node;
      bestWeight = w;
    }
  }
  return best;
}

function lcm(a: number, b: number): number {
  if (!Number.isInteger(a) || !Number.isInteger(b) || a < 1 || b < 1) throw invalidInput(`shard counts are positive integers, got ${a} and ${b}`);
  const gcd = (x: number, y: number): number => (y === 0 ? x : gcd(y, x % y));
  return (a / gcd(a, b)) * b;
}
