// Content hashes of stored objects, streamed (never buffering a whole object), and manifests
// built from a bucket prefix. The size recorded is the number of bytes actually hashed.
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import { GetObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { listBlobs, isNotFound } from './list';
import { forEachLimit } from './concurrency';
import type { ManifestEntry } from './manifest';

export interface ObjectHash {
  sha256: string;
  size: number;
  etag?: string;
}

/** Streams one object through sha256. With ifMatch, fails with 412 if the object changed. */
export async function hashObject(s3: S3Client, bucket: string, key: string, ifMatch?: string, signal?: AbortSignal): Promise<ObjectHash> {
  const res = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key, IfMatch: ifMatch ? `"${ifMatch}"` : undefined }), { abortSignal: signal });
  const h = createHash('sha256');
  let size = 0;
  for await (const chunk of res.Body as Readable) {
    h.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  return { sha256: h.digest('hex'), size, etag: res.ETag?.replace(/"/g, '') };
}

/**
 * The manifest of every object under prefix, in listing (S3 key) order. An object deleted between the
 * listing and its read is left out (it no longer exists); stable content needs a quiet prefix.
 */
export async function manifestOf(s3: S3Client, bucket: string, prefix: string, opts: { concurrency?: number } = {}): Promise<ManifestEntry[]> {
  const entries = await listBlobs(s3, bucket, prefix);
  const out: (ManifestEntry | undefined)[] = new Array(entries.length);
  await forEachLimit(entries, opts.concurrency ?? 8, async (e, i) => {
    try {
      const h = await hashObject(s3, bucket, e.key);
      out[i] = { key: e.key, size: h.size, sha256: h.sha256 };
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  });
  return out.filter((x): x is ManifestEntry => x !== undefined);
}
