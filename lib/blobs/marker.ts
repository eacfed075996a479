// The bucket identity marker: one object, `.shardctl/bucket-id`, written once per shard bucket by
// `shards prepare` (a conditional create: the first shard to claim a bucket keeps it), naming the
// shard and a random id. Every copy into a bucket and every delete from one first proves, by the
// marker, that the bucket is the shard's own; a delete also proves that the unit's owner keeps its
// objects in another bucket. So two shards can never share a bucket, whatever the spelling of
// their endpoints (a DNS alias, two deployments), and no delete runs against the owner's bucket.
import { randomUUID } from 'node:crypto';
import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { ShardctlError } from '../errors';
import { isNotFound, isPreconditionFailed } from './list';

/** Outside every `tenants/<id>/` prefix, so no tenant copy or delete ever lists it. */
export const BUCKET_MARKER_KEY = '.shardctl/bucket-id';

export interface BucketMarker {
  shard: string;
  id: string;
  createdAt: string;
}

/** A shard's bucket as configured: the shard that claims it, its client and name. */
export interface ShardBucket {
  shard: string;
  s3: S3Client;
  bucket: string;
}

function parseMarker(text: string, bucket: string): BucketMarker {
  try {
    const m = JSON.parse(text);
    if (typeof m?.shard === 'string' && typeof m?.id === 'string') return { shard: m.shard, id: m.id, createdAt: String(m.createdAt ?? '') };
  } catch {
    /* fall through */
  }
  throw new ShardctlError('Conflict', `bucket ${bucket} holds an unreadable ${BUCKET_MARKER_KEY}; refusing to treat it as any shard's`);
}

export async function readBucketMarker(ref: Pick<ShardBucket, 's3' | 'bucket'>, signal?: AbortSignal): Promise<BucketMarker | undefined> {
  try {
    const r = await ref.s3.send(new GetObjectCommand({ Bucket: ref.bucket, Key: BUCKET_MARKER_KEY }), { abortSignal: signal });
    return parseMarker(await r.Body!.transformToString(), ref.bucket);
  } catch (e) {
    if (isNotFound(e)) return undefined;
    throw e;
  }
}

const claimedBy = (ref: ShardBucket, m: BucketMarker) =>
  new ShardctlError(
    'Conflict',
    `bucket ${ref.bucket} of shard ${ref.shard} already belongs to shard ${m.shard} (marker ${BUCKET_MARKER_KEY} id ${m.id}, written ${m.createdAt}): ` +
      `two shards cannot share one bucket, or a move's undo or a retire deletes the owner's objects; give ${ref.shard} a bucket of its own`,
    { bucket: ref.bucket, shard: ref.shard, markerShard: m.shard },
  );

/**
 * Claims the bucket for the shard once (create-only PUT: If-None-Match *). Idempotent for the
 * shard that owns the marker; a bucket already claimed by another shard is refused (Conflict).
 */
export async function ensureBucketMarker(ref: ShardBucket): Promise<{ marker: BucketMarker; created: boolean }> {
  const mine: BucketMarker = { shard: ref.shard, id: randomUUID(), createdAt: new Date().toISOString() };
  try {
    await ref.s3.send(
      new PutObjectCommand({ Bucket: ref.bucket, Key: BUCKET_MARKER_KEY, Body: JSON.stringify(mine), ContentType: 'application/json', IfNoneMatch: '*' }),
    );
    return { marker: mine, created: true };
  } catch (e) {
    if (!isPreconditionFailed(e) && (e as { name?: string })?.name !== 'ConditionalRequestConflict') throw e;
  }
  const found = await readBucketMarker(ref);
  if (!found) throw new ShardctlError('Conflict', `bucket ${ref.bucket}: the marker write lost a race and the winner's marker is gone; retry`, undefined, true);
  if (found.shard !== ref.shard) throw claimedBy(ref, found);
  return { marker: found, created: false };
}

/** The bucket's marker must name the shard (PreconditionFailed otherwise, saying what to do). */
export async function assertBucketOf(ref: ShardBucket, doing: string, signal?: AbortSignal): Promise<BucketMarker> {
  const m = await readBucketMarker(ref, signal);
  if (!m) {
    throw new ShardctlError(
      'PreconditionFailed',
      `refusing to ${doing}: bucket ${ref.bucket} of shard ${ref.shard} carries no identity marker (${BUCKET_MARKER_KEY}); run \`shardctl shards prepare --shard ${ref.shard}\``,
      { bucket: ref.bucket, shard: ref.shard },
    );
  }
  if (m.shard !== ref.shard) {
    const e = claimedBy(ref, m);
    throw new ShardctlError('PreconditionFailed', `refusing to ${doing}: ${e.message}`, e.details);
  }
  return m;
}

/**
 * Before deleting a unit's objects from `side`: its bucket must be its own, and the unit's owner
 * must keep its objects in a bucket of its own (its marker names it, so it is not side's bucket).
 */
export async function assertMayDelete(side: ShardBucket, owner: ShardBucket | undefined, doing: string, signal?: AbortSignal): Promise<void> {
  const mine = await assertBucketOf(side, doing, signal);
  if (!owner || owner.shard === side.shard) return;
  const theirs = await readBucketMarker(owner, signal);
  if (!theirs || theirs.shard !== owner.shard || theirs.id === mine.id) {
    throw new ShardctlError(
      'PreconditionFailed',
      `refusing to ${doing}: the owner ${owner.shard}'s bucket ${owner.bucket} ` +
        (theirs ? `carries the marker of shard ${theirs.shard} (id ${theirs.id})` : 'carries no identity marker') +
        `, so it may be the very bucket of ${side.shard} being deleted from; give every shard a bucket of its own and run \`shardctl shards prepare\``,
      { bucket: side.bucket, shard: side.shard, owner: owner.shard },
    );
  }
}
