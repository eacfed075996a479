// The cutover's final blob delta for an indexed unit (issue 15): the objects named by the
// blob_index rows the change stream wrote since the last full comparison, never a listing of the
// prefix. Why it is enough: the whole-prefix sync before the freeze left on the destination every
// object the source held then; every object written since is a new version key (objects are
// immutable), referenced by an index row that commits after its upload, so through the stream and
// into the delta. An object no longer referenced is the collector's on each side, not the delta's.
// Each referenced object costs one HEAD on the destination (none when the sync before the freeze
// already saw it there) and, when missing, one on the source and the copy: the window's S3
// requests grow with what changed since that sync, not with the tenant.
//
// Safety: both identity markers are checked (distinct buckets, each its shard's); the caller's
// fence runs before every write; objects are verified against the index, never re-read for a hash
// (size on both sides; the streamed copy's sha256 against the recorded one); an object the index
// names that the source lacks, or holds at another size, fails the delta (closed) instead of being
// skipped; an object at the destination that shardctl did not put there is left and reported.
import type { Pool } from 'pg';
import { ShardctlError } from '../errors';
import { allowConcurrentRequests, forEachLimit } from './concurrency';
import { indexRowsNamed, tenantIndexScope, type BlobVersion } from './index-table';
import { headBlob, type BlobEntry } from './list';
import { ledgerEntries, outOfBandChange, recordLedger, type LedgerEntry, type OutOfBandObject } from './ledger';
import { assertBucketOf } from './marker';
import { DEFAULT_LIMITS, serverCopyObject, streamCopyObject, type BucketRef, type TransferLimits } from './transfer';

export interface IndexDeltaOptions {
  src: BucketRef;
  dst: BucketRef;
  srcPool: Pool;
  dstPool: Pool;
  unit: string;
  tenantColumn: string;
  /** The blob names whose index rows changed (the delta's keys of shardctl.blob_index). */
  names: readonly string[];
  sameEndpoint: boolean;
  concurrency?: number;
  limits?: Partial<TransferLimits>;
  signal?: AbortSignal;
  /** The caller's fence, run before anything is written to dst. */
  stillSyncing?: () => Promise<void>;
  /**
   * Objects the whole-prefix sync right before the freeze saw or put at the destination
   * (CopyBlobPrefixResult.atDestination): a row's object found there is judged on that entry
   * instead of a HEAD. Sound because a version key is written once (create-only) and the
   * destination is not the owner (its collector refuses to run there): what that sync saw is what
   * a HEAD would see now, short of a deletion behind shardctl's back, which a HEAD made now could
   * miss just as well a moment later. Absent: every row's object is HEADed.
   */
  seenAtDestination?: ReadonlyMap<string, BlobEntry>;
}

export interface IndexDeltaResult {
  /** Index rows found for the names (the rest were deleted: nothing to bring). */
  referenced: number;
  /** Referenced objects already at the destination as shardctl left them. */
  present: number;
  copied: number;
  bytes: number;
  /** S3 requests made, markers included. */
  requests: number;
  outOfBand: OutOfBandObject[];
}

/** The blob names in the delta's keys of shardctl.blob_index: JSON arrays of the key's values in primary-key order (tenant column, name). */
export function blobNamesOfDeltaKeys(keys: readonly string[], primaryKey: readonly string[]): string[] {
  const at = primaryKey.indexOf('name');
  if (at < 0) throw new ShardctlError('InvalidInput', `shardctl.blob_index has primary key (${primaryKey.join(', ')}), without name`);
  return keys.map((k) => {
    const v = JSON.parse(k);
    if (!Array.isArray(v) || typeof v[at] !== 'string') throw new ShardctlError('InvalidInput', `unreadable blob_index delta key ${k}`);
    return v[at] as string;
  });
}

export async function syncIndexedBlobDelta(opts: IndexDeltaOptions): Promise<IndexDeltaResult> {
  const { src, dst, unit, signal } = opts;
  allowConcurrentRequests(signal, 2 * (opts.concurrency ?? 8) + 16);
  const limits: TransferLimits = { ...DEFAULT_LIMITS, ...opts.limits };
  const result: IndexDeltaResult = { referenced: 0, present: 0, copied: 0, bytes: 0, requests: 2, outOfBand: [] };
  const [srcMarker, dstMarker, rows] = await Promise.all([
    assertBucketOf(src, `copy the changed blobs of ${unit} from ${src.shard}`, signal),
    assertBucketOf(dst, `copy the changed blobs of ${unit} into ${dst.shard}`, signal),
    // The destination's rows: after the final apply they are the source's, and what the new owner will serve.
    indexRowsNamed(opts.dstPool, tenantIndexScope(opts.tenantColumn, unit), [...new Set(opts.names)]),
  ]);
  if (srcMarker.id === dstMarker.id) {
    throw new ShardctlError(
      'PreconditionFailed',
      `refusing to copy the blobs of ${unit}: ${src.shard} and ${dst.shard} are one bucket (marker id ${srcMarker.id})`,
    );
  }
  result.referenced = rows.length;
  if (rows.length === 0) return result;
  const keys = rows.map((r) => r.key);
  const [dstLedger, srcLedger] = await Promise.all([ledgerEntries(opts.dstPool, unit, keys), ledgerEntries(opts.srcPool, unit, keys)]);

  const missing: BlobVersion[] = [];
  await forEachLimit(rows, opts.concurrency ?? 8, async (row) => {
    signal?.throwIfAborted();
    let d = opts.seenAtDestination?.get(row.key);
    if (!d) {
      result.requests++;
      d = await headBlob(dst.s3, dst.bucket, row.key, signal);
    }
    const mine = dstLedger.get(row.key);
    if (d && mine && mine.etag !== null && outOfBandChange(d, mine) === undefined && d.size === row.size) {
      result.present++;
      return;
    }
    // A destination object shardctl did not leave there (or changed since) is reported, never overwritten.
    const change = d ? outOfBandChange(d, mine) : undefined;
    if (d && change && !(mine && mine.etag === null)) {
      result.outOfBand.push({ key: row.key, change });
      return;
    }
    missing.push(row);
  });
  if (missing.length === 0) return result;

  const fenceBeforeWrite = async () => {
    signal?.throwIfAborted();
    await opts.stillSyncing?.();
  };
  // Copies in flight are recorded first, as copyBlobPrefix does: a delta killed mid-copy leaves rows that say "ours".
  await fenceBeforeWrite();
  await recordLedger(
    opts.dstPool,
    unit,
    missing.map((m) => ({ key: m.key, etag: null, size: null, sha256: null, srcEtag: null, srcSize: null })),
  );
  const dstRows: LedgerEntry[] = [];
  const srcRows: LedgerEntry[] = [];
  await forEachLimit(missing, opts.concurrency ?? 8, async (row) => {
    result.requests++;
    const e = await headBlob(src.s3, src.bucket, row.key, signal);
    if (!e)
      throw new ShardctlError('PreconditionFailed', `the blob index of ${unit} names ${row.key} (${row.name}), which ${src.shard}'s bucket does not hold`);
    if (e.size !== row.size) {
      throw new ShardctlError('PreconditionFailed', `${row.key} on ${src.shard} holds ${e.size} bytes; the blob index of ${unit} recorded ${row.size}`);
    }
    let dstEtag: string;
    if (opts.sameEndpoint) {
      await fenceBeforeWrite();
      result.requests++;
      dstEtag = (await serverCopyObject(src, dst, e, limits, signal)).dstEtag;
    } else {
      result.requests += 2;
      const copied = await streamCopyObject(src, dst, e, limits, signal, fenceBeforeWrite);
      if (copied.sha256 !== row.sha256 || copied.size !== row.size) {
        throw new ShardctlError('PreconditionFailed', `${row.key} on ${src.shard} does not hash to the sha256 the blob index of ${unit} recorded`);
      }
      dstEtag = copied.dstEtag;
    }
    result.copied++;
    result.bytes += row.size;
    dstRows.push({ key: row.key, etag: dstEtag, size: row.size, sha256: row.sha256, srcEtag: e.etag, srcSize: e.size });
    // The source as seen, should it become a destination (a rollback); an existing row for exactly this object is kept.
    const seen = srcLedger.get(row.key);
    if (!(seen && seen.etag === e.etag && seen.size === e.size))
      srcRows.push({ key: row.key, etag: e.etag, size: e.size, sha256: row.sha256, srcEtag: null, srcSize: null });
  });
  await recordLedger(opts.dstPool, unit, dstRows);
  await opts.stillSyncing?.();
  await recordLedger(opts.srcPool, unit, srcRows);
  return result;
}
