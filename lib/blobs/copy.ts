// Delta sync of a tenant's blob prefix from the source bucket to the target bucket (copy phase
// and the final delta under the fence). Idempotent and resumable by re-running: afterwards the
// destination prefix holds exactly the source's keys with the source's bytes, and the returned
// manifest is the sha256 of each source object as copied (ETags are not content hashes).
// Destination keys the source no longer has are deleted, so the prefix must be an exact
// tenant prefix. A source object overwritten mid-copy fails its conditional read (412) and is
// re-read; one deleted mid-copy is deleted at the destination too.
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import { ShardctlError } from '../errors';
import { forEachLimit } from './concurrency';
import { deleteKeys } from './delete';
import { hashObject, ObjectHash } from './hash';
import { BlobEntry, isContentEtag, isNotFound, isPreconditionFailed, listBlobs, normalizeEtag } from './list';
import type { ManifestEntry } from './manifest';
import { assertTenantBlobPrefix } from './prefix';
import { BucketRef, DEFAULT_LIMITS, serverCopyObject, streamCopyObject, TransferLimits } from './transfer';

export type { BucketRef } from './transfer';

export interface BlobCopyProgress {
  key: string;
  action: 'copied' | 'skipped' | 'deleted';
  done: number;
  total: number;
  copied: number;
  skipped: number;
  deleted: number;
  bytes: number;
}

export interface CopyBlobPrefixOptions {
  src: BucketRef;
  dst: BucketRef;
  /** Exactly `tenants/<tenant id>/`. */
  prefix: string;
  /** Both buckets live on one S3 endpoint and dst.s3 can read src: copy server-side. */
  sameEndpoint: boolean;
  /** Objects in flight at once (default 8). Each streamed multipart object holds one part in memory. */
  concurrency?: number;
  onProgress?: (p: BlobCopyProgress) => void;
  /** Overrides of the multipart thresholds (tests use small ones). */
  limits?: Partial<TransferLimits>;
  /**
   * Hash unchanged objects for the manifest (default true). The final delta under the fence
   * passes false: it must not read every object of the tenant inside the write pause, and its
   * manifest then lists only what it copied.
   */
  hashUnchanged?: boolean;
}

export interface CopyBlobPrefixResult {
  /** Every source object now at the destination, in source listing order. */
  manifest: ManifestEntry[];
  copied: number;
  skipped: number;
  deleted: number;
  /** Bytes written to the destination. */
  bytes: number;
}

const MAX_ATTEMPTS_PER_KEY = 5;

export async function copyBlobPrefix(opts: CopyBlobPrefixOptions): Promise<CopyBlobPrefixResult> {
  const { src, dst, prefix, sameEndpoint } = opts;
  assertTenantBlobPrefix(prefix);
  if (src.bucket === dst.bucket && (sameEndpoint || src.s3 === dst.s3)) {
    throw new ShardctlError('InvalidInput', `source and destination are the same bucket ${src.bucket}`);
  }
  const limits: TransferLimits = { ...DEFAULT_LIMITS, ...opts.limits };
  const [srcList, dstList] = await Promise.all([listBlobs(src.s3, src.bucket, prefix), listBlobs(dst.s3, dst.bucket, prefix)]);
  const dstByKey = new Map(dstList.map((e) => [e.key, e]));
  const srcKeys = new Set(srcList.map((e) => e.key));
  const extras = dstList.filter((e) => !srcKeys.has(e.key)).map((e) => e.key);

  const stats = { copied: 0, skipped: 0, deleted: 0, bytes: 0 };
  const total = srcList.length + extras.length;
  let done = 0;
  const report = (key: string, action: BlobCopyProgress['action']) => {
    done++;
    opts.onProgress?.({ key, action, done, total, ...stats });
  };

  /** Brings one key in line with the source and returns its manifest entry. */
  const syncOnce = async (e: BlobEntry): Promise<ManifestEntry | undefined> => {
    const d = dstByKey.get(e.key);
    let srcHash: ObjectHash | undefined;
    let same = false;
    if (d && d.size === e.size) {
      if (isContentEtag(e.etag) && e.etag === d.etag) same = true;
      else {
        srcHash = await hashObject(src.s3, src.bucket, e.key, e.etag);
        const dstHash = await hashObject(dst.s3, dst.bucket, e.key).catch((err) => {
          if (isNotFound(err)) return undefined;
          throw err;
        });
        same = dstHash !== undefined && dstHash.size === srcHash.size && dstHash.sha256 === srcHash.sha256;
      }
    }
    if (same) {
      stats.skipped++;
      report(e.key, 'skipped');
      if (opts.hashUnchanged === false && !srcHash) return undefined;
      srcHash ??= await hashObject(src.s3, src.bucket, e.key, e.etag);
    } else {
      if (sameEndpoint) {
        srcHash ??= await hashObject(src.s3, src.bucket, e.key, e.etag);
        await serverCopyObject(src, dst, e, limits);
      } else {
        srcHash = await streamCopyObject(src, dst, e, limits);
      }
      stats.copied++;
      stats.bytes += srcHash.size;
      report(e.key, 'copied');
    }
    return { key: e.key, size: srcHash.size, sha256: srcHash.sha256 };
  };

  const manifest: (ManifestEntry | undefined)[] = new Array(srcList.length);
  await forEachLimit(srcList, opts.concurrency ?? 8, async (listed, i) => {
    let e = listed;
    for (let attempt = 1; ; attempt++) {
      try {
        manifest[i] = await syncOnce(e);
        return;
      } catch (err) {
        if (!(isPreconditionFailed(err) || isNotFound(err)) || attempt >= MAX_ATTEMPTS_PER_KEY) throw err;
      }
      // The source object changed or vanished since it was listed: look again.
      const head = await src.s3.send(new HeadObjectCommand({ Bucket: src.bucket, Key: e.key })).catch((err) => {
        if (isNotFound(err)) return undefined;
        throw err;
      });
      if (!head) {
        await deleteKeys(dst.s3, dst.bucket, [e.key]);
        if (dstByKey.has(e.key)) stats.deleted++;
        report(e.key, 'deleted');
        return;
      }
      e = { key: e.key, size: Number(head.ContentLength ?? 0), etag: normalizeEtag(head.ETag) };
    }
  });

  // Deletes propagate: what the source no longer has goes from the destination too.
  if (extras.length > 0) {
    await deleteKeys(dst.s3, dst.bucket, extras);
    for (const key of extras) {
      stats.deleted++;
      report(key, 'deleted');
    }
  }

  return { manifest: manifest.filter((m): m is ManifestEntry => m !== undefined), ...stats };
}
