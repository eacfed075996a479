// Deleting blobs: batched DeleteObjects that fails loudly on any per-key error (S3 answers 200
// even when single keys fail). deleteBlobPrefix is the irreversible retire/cancel step, so it
// accepts only an exact `tenants/<id>/` prefix and is idempotent (a second run deletes 0).
import { DeleteObjectsCommand, S3Client } from '@aws-sdk/client-s3';
import { ShardctlError } from '../errors';
import { listBlobs } from './list';
import { assertTenantBlobPrefix } from './prefix';

const MAX_BATCH = 1000; // S3's DeleteObjects limit

function checkBatchSize(batchSize: number): number {
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > MAX_BATCH) {
    throw new ShardctlError('InvalidInput', `batchSize must be an integer in 1..${MAX_BATCH}, got ${batchSize}`);
  }
  return batchSize;
}

/** Deletes exactly these keys; returns how many were deleted. Missing keys count as deleted (S3 semantics). */
export async function deleteKeys(s3: S3Client, bucket: string, keys: readonly string[], batchSize = MAX_BATCH): Promise<number> {
  checkBatchSize(batchSize);
  let deleted = 0;
  for (let i = 0; i < keys.length; i += batchSize) {
    const batch = keys.slice(i, i + batchSize);
    const r = await s3.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true } }));
    if (r.Errors?.length) {
      const first = r.Errors.slice(0, 5).map((e) => `${e.Key}: ${e.Code} ${e.Message ?? ''}`.trim());
      throw new ShardctlError(
        'Conflict',
        `DeleteObjects on ${bucket} failed for ${r.Errors.length} of ${batch.length} keys (${first.join('; ')})`,
        {
          bucket,
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
 * Deletes every object under a tenant prefix. Lists again after deleting and repeats, so objects
 * that appeared meanwhile are not left behind; gives up (retriably) if they keep appearing.
 */
export async function deleteBlobPrefix(s3: S3Client, bucket: string, prefix: string, opts: { batchSize?: number } = {}): Promise<{ deleted: number }> {
  assertTenantBlobPrefix(prefix);
  const batchSize = checkBatchSize(opts.batchSize ?? MAX_BATCH);
  let deleted = 0;
  for (let round = 0; round < 5; round++) {
    const keys = (await listBlobs(s3, bucket, prefix)).map((e) => e.key);
    if (keys.length === 0) return { deleted };
    deleted += await deleteKeys(s3, bucket, keys, batchSize);
  }
  throw new ShardctlError(
    'Conflict',
    `objects keep appearing under ${bucket}/${prefix} while deleting it: is the tenant still being written?`,
    { bucket, prefix, deleted },
    true,
  );
}
