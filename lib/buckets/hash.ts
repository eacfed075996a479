// The routing hash (docs/architecture.md, "Buckets"): the first 8 bytes of SHA-256 of the key's
// UTF-8 bytes, read as an unsigned 64-bit big-endian integer. The shards compute the same value
// in SQL (`shardctl.stable_hash`, `shardctl.bucket_of`, lib/shard/schema.ts); a change here is a
// change of every key's bucket, so the spec is frozen. Node (node:crypto): not for workflows.
import { createHash } from 'node:crypto';
import { invalidInput } from '../errors';
import { validateBucketCount } from './units';

/** Lone surrogates: a string that is not well-formed Unicode has no UTF-8 form. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

/**
 * The UTF-8 bytes of a routing key. Refuses keys a PostgreSQL text column cannot hold (NUL, lone
 * surrogates): the shard could never compute their hash, so Node must not invent one (TextEncoder
 * would silently turn a lone surrogate into U+FFFD and alias two keys).
 */
export function routingKeyBytes(key: string): Buffer {
  if (typeof key !== 'string') throw invalidInput(`a routing key is a string, got ${typeof key}`);
  if (key.includes('\u0000')) throw invalidInput('a routing key cannot contain NUL (PostgreSQL text cannot hold it)');
  if (LONE_SURROGATE.test(key)) throw invalidInput('a routing key must be well-formed Unicode (it contains a lone surrogate)');
  return Buffer.from(key, 'utf8');
}

/** stable_hash(key): unsigned 64-bit, 0 ≤ h < 2^64. */
export function stableHash64(key: string): bigint {
  return createHash('sha256').update(routingKeyBytes(key)).digest().readBigUInt64BE(0);
}

/** bucket = stable_hash(key) mod B, 0 ≤ bucket < B. */
export function bucketOf(key: string, buckets: number): number {
  return Number(stableHash64(key) % BigInt(validateBucketCount(buckets)));
}
