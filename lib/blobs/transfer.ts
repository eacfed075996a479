// Moving one object between buckets. Streamed (different endpoints): Get -> sha256 tee -> Put,
// or a hand-rolled multipart upload above the threshold, holding at most one part in memory.
// Server-side (same endpoint): CopyObject, or UploadPartCopy above S3's 5 GiB CopyObject limit.
// Every read of the source is conditional on the listed ETag, so a concurrent overwrite fails
// with 412 (the caller re-heads and retries) instead of mixing two versions.
import { createHash } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  UploadPartCommand,
  UploadPartCopyCommand,
  type CompletedPart,
} from '@aws-sdk/client-s3';
import { normalizeEtag, type BlobEntry } from './list';
import type { ObjectHash } from './hash';
import type { ShardBucket } from './marker';

/** A shard's bucket: copies prove by its identity marker that it is the shard's own (./marker). */
export type BucketRef = ShardBucket;

export interface TransferLimits {
  /** Streamed objects larger than this go up as a multipart upload. */
  multipartThresholdBytes: number;
  /** Part size for multipart uploads and part copies (raised if 10 000 parts would not do). */
  partSizeBytes: number;
  /** Server-side copies larger than this use UploadPartCopy (S3 refuses CopyObject > 5 GiB). */
  serverCopyMaxBytes: number;
}

export const DEFAULT_LIMITS: TransferLimits = {
  multipartThresholdBytes: 8 * 1024 * 1024,
  partSizeBytes: 8 * 1024 * 1024,
  serverCopyMaxBytes: 5 * 1024 * 1024 * 1024,
};

const MAX_PARTS = 10_000;
const MIB = 1024 * 1024;

function partSizeFor(size: number, wanted: number): number {
  const min = Math.ceil(size / MAX_PARTS / MIB) * MIB;
  return Math.max(wanted, min, 5 * MIB);
}

/** The HTTP headers of the object that a copy must carry over (type, encoding, user metadata). */
type ObjectHeaders = Pick<
  PutObjectCommand['input'],
  'ContentType' | 'ContentEncoding' | 'ContentDisposition' | 'ContentLanguage' | 'CacheControl' | 'Metadata'
>;

function headersOf(r: ObjectHeaders): ObjectHeaders {
  return {
    ContentType: r.ContentType,
    ContentEncoding: r.ContentEncoding,
    ContentDisposition: r.ContentDisposition,
    ContentLanguage: r.ContentLanguage,
    CacheControl: r.CacheControl,
    Metadata: r.Metadata,
  };
}

/** Copies one object by streaming it through this process; returns the hash of what was written. */
/** What a copy left at the destination: the ETag the destination gave it. */
export interface CopiedObject {
  dstEtag: string;
}

export async function streamCopyObject(
  src: BucketRef,
  dst: BucketRef,
  entry: BlobEntry,
  limits: TransferLimits,
  signal?: AbortSignal,
  /** Runs once the source answered, before anything is written to the destination: throw to refuse. */
  beforeWrite?: () => Promise<void>,
): Promise<ObjectHash & CopiedObject> {
  const abortSignal = signal;
  const got = await src.s3.send(new GetObjectCommand({ Bucket: src.bucket, Key: entry.key, IfMatch: `"${entry.etag}"` }), { abortSignal });
  const body = got.Body as Readable;
  try {
    await beforeWrite?.();
  } catch (e) {
    body.destroy();
    throw e;
  }
  const length = got.ContentLength;
  if (length === undefined) {
    body.destroy();
    throw new Error(`GetObject ${src.bucket}/${entry.key} returned no Content-Length`);
  }
  const headers = headersOf(got);
  const hash = createHash('sha256');
  let size = 0;
  let dstEtag: string | undefined;
  try {
    if (length > limits.multipartThresholdBytes) {
      dstEtag = await multipartUpload(dst, entry.key, headers, length, limits.partSizeBytes, body, signal, (c) => {
        hash.update(c);
        size += c.length;
      });
    } else {
      const tee = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          hash.update(chunk);
          size += chunk.length;
          cb(null, chunk);
        },
      });
      const piping = pipeline(body, tee);
      piping.catch(() => {}); // observed through Promise.all below
      const put = dst.s3.send(new PutObjectCommand({ Bucket: dst.bucket, Key: entry.key, Body: tee, ContentLength: length, ...headers }), { abortSignal });
      dstEtag = (await Promise.all([put, piping]))[0].ETag;
    }
  } finally {
    body.destroy();
  }
  // A short body would have been refused by the PUT's Content-Length; this is belt and braces.
  if (size !== length) throw new Error(`copied ${size} bytes of ${src.bucket}/${entry.key}, expected ${length}`);
  return { sha256: hash.digest('hex'), size, etag: entry.etag, dstEtag: normalizeEtag(dstEtag) };
}

async function multipartUpload(
  dst: BucketRef,
  key: string,
  headers: ObjectHeaders,
  length: number,
  wantedPartSize: number,
  body: Readable,
  abortSignal: AbortSignal | undefined,
  onChunk: (c: Buffer) => void,
): Promise<string | undefined> {
  const partSize = partSizeFor(length, wantedPartSize);
  const { UploadId } = await dst.s3.send(new CreateMultipartUploadCommand({ Bucket: dst.bucket, Key: key, ...headers }), { abortSignal });
  if (!UploadId) throw new Error(`CreateMultipartUpload ${dst.bucket}/${key} returned no UploadId`);
  const parts: CompletedPart[] = [];
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const flush = async () => {
    const Body = Buffer.concat(pending, pendingBytes);
    pending = [];
    pendingBytes = 0;
    const PartNumber = parts.length + 1;
    const r = await dst.s3.send(new UploadPartCommand({ Bucket: dst.bucket, Key: key, UploadId, PartNumber, Body, ContentLength: Body.length }), {
      abortSignal,
    });
    parts.push({ ETag: r.ETag, PartNumber });
  };
  try {
    for await (const chunk of body) {
      const c = chunk as Buffer;
      onChunk(c);
      pending.push(c);
      pendingBytes += c.length;
      if (pendingBytes >= partSize) await flush();
    }
    if (pendingBytes > 0 || parts.length === 0) await flush();
    const done = await dst.s3.send(new CompleteMultipartUploadCommand({ Bucket: dst.bucket, Key: key, UploadId, MultipartUpload: { Parts: parts } }), {
      abortSignal,
    });
    return done.ETag;
  } catch (e) {
    // An abandoned upload holds storage until aborted: never leave one behind.
    await dst.s3.send(new AbortMultipartUploadCommand({ Bucket: dst.bucket, Key: key, UploadId })).catch(() => {});
    throw e;
  }
}

/** S3 wants CopySource URL-encoded; keep the slashes so both S3 and moto parse bucket/key. */
export function copySourceOf(bucket: string, key: string): string {
  return `${bucket}/${key.split('/').map(encodeURIComponent).join('/')}`;
}

/** Copies one object inside the S3 endpoint (the client of dst must be able to read src). */
export async function serverCopyObject(src: BucketRef, dst: BucketRef, entry: BlobEntry, limits: TransferLimits, signal?: AbortSignal): Promise<CopiedObject> {
  const abortSignal = signal;
  const CopySource = copySourceOf(src.bucket, entry.key);
  const CopySourceIfMatch = `"${entry.etag}"`;
  if (entry.size <= limits.serverCopyMaxBytes) {
    const r = await dst.s3.send(new CopyObjectCommand({ Bucket: dst.bucket, Key: entry.key, CopySource, CopySourceIfMatch, MetadataDirective: 'COPY' }), {
      abortSignal,
    });
    return { dstEtag: normalizeEtag(r.CopyObjectResult?.ETag) };
  }
  const head = await src.s3.send(new HeadObjectCommand({ Bucket: src.bucket, Key: entry.key, IfMatch: CopySourceIfMatch }), { abortSignal });
  const partSize = partSizeFor(entry.size, limits.partSizeBytes);
  const { UploadId } = await dst.s3.send(new CreateMultipartUploadCommand({ Bucket: dst.bucket, Key: entry.key, ...headersOf(head) }), { abortSignal });
  if (!UploadId) throw new Error(`CreateMultipartUpload ${dst.bucket}/${entry.key} returned no UploadId`);
  try {
    const parts: CompletedPart[] = [];
    for (let start = 0; start < entry.size; start += partSize) {
      const end = Math.min(start + partSize, entry.size) - 1;
      const PartNumber = parts.length + 1;
      const r = await dst.s3.send(
        new UploadPartCopyCommand({
          Bucket: dst.bucket,
          Key: entry.key,
          UploadId,
          PartNumber,
          CopySource,
          CopySourceIfMatch,
          CopySourceRange: `bytes=${start}-${end}`,
        }),
        { abortSignal },
      );
      parts.push({ ETag: r.CopyPartResult?.ETag, PartNumber });
    }
    const done = await dst.s3.send(new CompleteMultipartUploadCommand({ Bucket: dst.bucket, Key: entry.key, UploadId, MultipartUpload: { Parts: parts } }), {
      abortSignal,
    });
    return { dstEtag: normalizeEtag(done.ETag) };
  } catch (e) {
    await dst.s3.send(new AbortMultipartUploadCommand({ Bucket: dst.bucket, Key: entry.key, UploadId })).catch(() => {});
    throw e;
  }
}
