// Deleting blobs: batched DeleteObjects that fails loudly on any per-key error (S3 answers 200
// even when single keys fail). Every batch is preceded by the bucket identity check (./marker):
// the bucket must be the side's own and the unit's owner must keep its objects elsewhere, and by
// the caller's own fence (`beforeBatch`, e.g. "my move still holds this direction"), so a delete
// never runs against the owner's bucket. deleteBlobPrefix is the irreversible retire/cancel step:
// it accepts only an exact `tenants/<id>/` prefix and is idempotent (a second run deletes 0).
import { DeleteObjectsCommand } from '@aws-sdk/client-s3';
import { ShardctlError } from '../errors';
import { listBlobs } from './list';
import { assertMayDelete, ShardBucket } from './marker';
import { assertUnitBlobPrefix } from './prefix';

const MAX_BATCH = 1000; // S3's DeleteObjects limit

export interface DeleteOptions {
  /** The shard that owns the unit (its bucket must not be this one); omit only when side is the owner's own cleanup. */
  owner?: ShardBucket;
  batchSize?: number;
  signal?: AbortSignal;
  /** Runs right before each batch is sent, after the keys were chosen: throw to refuse it. */
  beforeBatch?: (keys: readonly string[]) => Promise<void>;
}

function checkBatchSize(batchSize: number): number {
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > MAX_BATCH) {
    throw new ShardctlError('InvalidInput', `batchSize must be an integer in 1..${MAX_BATCH}, got ${batchSize}`);
  }
  return batchSize;
}

/** Deletes exactly these keys from side's bucket; returns how many were deleted. Missing keys count as deleted (S3 semantics). */
export async function deleteKeys(side: ShardBucket, keys: readonly string[], opts: DeleteOptions = {}): Promise<number> {
  const batchSize = checkBatchSize(opts.batchSize ?? MAX_BATCH);
  let deleted = 0;
  for (let i = 0; i < keys.length; i += batchSize) {
    const batch = keys.slice(i, i + batchSize);
    opts.signal?.throwIfAborted();
    await opts.beforeBatch?.(batch);
    await assertMayDelete(side, opts.owner, `delete ${batch.length} object(s) from ${side.bucket}`, opts.signal);
    const r = await side.s3.send(new DeleteObjectsCommand({ Bucket: side.bucket, Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true } }), {
      abortSignal: opts.signal,
    });
    if (r.Errors?.length) {
      const first = r.Errors.slice(0, 5).map((e) => `${e.Key}: ${e.Code} ${e.Message ?? ''}`.trim());
      throw new ShardctlError(
        'Conflict',
        `DeleteObjects on ${side.bucket} failed for ${r.Errors.length} of ${batch.length} keys (${first.join('; ')})`,
        {
          bucket: side.bucket,
          failed: r.Errors.length,
        },
        true,
      );
    }
    deleted += batch.length;
  }
  return deleted;
}

/**
 * Deletes every object under a unit's prefix (a tenant's or a bucket unit's). Lists again after deleting and repeats, so objects
 * that appeared meanwhile are not left behind; gives up (retriably) if they keep appearing.
 */
export async function deleteBlobPrefix(side: ShardBucket, prefix: string, opts: DeleteOptions = {}): Promise<{ deleted: number }> {
  assertUnitBlobPrefix(prefix);
  checkBatchSize(opts.batchSize ?? MAX_BATCH);
  let deleted = 0;
  for (let round = 0; round < 5; round++) {
    const keys = (await listBlobs(side.s3, side.bucket, prefix, { signal: opts.signal })).map((e) => e.key);
    if (keys.length === 0) return { deleted };
    deleted += await deleteKeys(side, keys, opts);
  }
  throw new ShardctlError(
    'Conflict',
    `objects keep appearing under ${side.bucket}/${prefix} while deleting it: is the tenant still being written?`,
    { bucket: side.bucket, prefix, deleted },
    true,
  );
}
