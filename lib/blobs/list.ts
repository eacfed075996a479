// Listing a bucket prefix with ListObjectsV2 pagination, one object's entry by HEAD, plus the S3
// error predicates the blob modules share. Keys are returned exactly as stored (no EncodingType), in S3's key order.
import { HeadObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';

export interface BlobEntry {
  key: string;
  size: number;
  /** ETag without quotes; a content MD5 only for single-part unencrypted uploads. */
  etag: string;
}

export function normalizeEtag(etag: string | undefined): string {
  return (etag ?? '').replace(/^W\//, '').replace(/"/g, '');
}

/** A plain MD5 ETag (32 hex digits, no "-N" part count) identifies content; others do not. */
export function isContentEtag(etag: string): boolean {
  return /^[0-9a-f]{32}$/i.test(etag);
}

/** Every object under `prefix`; with `maxObjects`, stops once it has at least that many (whole pages: it may return more). */
export async function listBlobs(
  s3: S3Client,
  bucket: string,
  prefix: string,
  opts: { pageSize?: number; signal?: AbortSignal; maxObjects?: number } = {},
): Promise<BlobEntry[]> {
  const out: BlobEntry[] = [];
  let token: string | undefined;
  do {
    const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token, MaxKeys: opts.pageSize }), {
      abortSignal: opts.signal,
    });
    for (const o of page.Contents ?? []) {
      // Defensive: a server that ignored Prefix must never widen what we copy or delete.
      if (o.Key === undefined || !o.Key.startsWith(prefix)) continue;
      out.push({ key: o.Key, size: Number(o.Size ?? 0), etag: normalizeEtag(o.ETag) });
    }
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
    if (page.IsTruncated && !token) throw new Error(`ListObjectsV2 on ${bucket}/${prefix} truncated without a continuation token`);
  } while (token && !(opts.maxObjects !== undefined && out.length >= opts.maxObjects));
  return out;
}

/** One object's entry as a listing would show it, or undefined when there is none (404). */
export async function headBlob(s3: S3Client, bucket: string, key: string, signal?: AbortSignal): Promise<BlobEntry | undefined> {
  try {
    const h = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }), { abortSignal: signal });
    return { key, size: Number(h.ContentLength ?? 0), etag: normalizeEtag(h.ETag) };
  } catch (e) {
    if (isNotFound(e)) return undefined;
    throw e;
  }
}

export function s3Status(e: any): number | undefined {
  return e?.$metadata?.httpStatusCode;
}

export function isNotFound(e: any): boolean {
  return e?.name === 'NoSuchKey' || e?.name === 'NotFound' || s3Status(e) === 404;
}

export function isPreconditionFailed(e: any): boolean {
  return e?.name === 'PreconditionFailed' || s3Status(e) === 412;
}
