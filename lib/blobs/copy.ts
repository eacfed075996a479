// Delta sync of a tenant's blob prefix from the source bucket to the target bucket (copy phase,
// validation, soak and the final delta under the fence). Idempotent and resumable by re-running:
// afterwards the destination prefix holds the source's keys with the source's bytes, and the
// returned manifest is the sha256 of each source object as copied (ETags are not content hashes).
// Destination keys the source no longer has are deleted, so the prefix must be an exact tenant
// prefix. A source object overwritten mid-copy fails its conditional read (412) and is re-read;
// one deleted mid-copy is deleted at the destination too.
//
// Safety (each a refusal, never a silent skip of the check):
//  - both buckets prove by their identity markers that they are their shards' own, and differ;
//  - `stillSyncing` (the caller's fence: its move still holds this direction) runs before every
//    delete batch and every object written, after the observation or read that justifies it (a
//    write already in flight when the fence moves is the one that can still land);
//    `signal` (the activity's cancellation) stops the sync between and inside requests;
//  - with the ledger (./ledger), an object unchanged on both sides since the last sync is skipped
//    without being read, and in a tracked destination an object shardctl did not put there (or
//    one it left there that was changed or deleted) is never overwritten or deleted: it is
//    reported in `outOfBand` for the operator, and blocks retire.
import type { Pool } from 'pg';
import { ShardctlError } from '../errors';
import { allowConcurrentRequests, forEachLimit } from './concurrency';
import { deleteKeys } from './delete';
import { hashObject, ObjectHash } from './hash';
import { BlobEntry, headBlob, isContentEtag, isNotFound, isPreconditionFailed, listBlobs } from './list';
import type { ManifestEntry } from './manifest';
import { assertBucketOf } from './marker';
import { assertUnitBlobPrefix } from './prefix';
import { isVersionKey } from './index-table';
import { Ledger, LedgerEntry, ledgerSaysEqual, loadLedger, OutOfBandObject, outOfBandChange, recordLedger, forgetLedger, replaceLedger } from './ledger';
import { BucketRef, DEFAULT_LIMITS, serverCopyObject, streamCopyObject, TransferLimits } from './transfer';

export type { BucketRef } from './transfer';

export interface BlobCopyProgress {
  key: string;
  action: 'copied' | 'skipped' | 'deleted' | 'out-of-band';
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
   * manifest then lists only what it copied or what the ledger knows.
   */
  hashUnchanged?: boolean;
  /**
   * sha256 and size recorded at write time by the blob index, by object key: a server-side copy of
   * such an object (same size as listed) takes its hash from here instead of reading the source
   * (issue 15: nothing is re-hashed). Version objects are written once, never overwritten.
   */
  knownHashes?: ReadonlyMap<string, { sha256: string; size: number }>;
  /**
   * The source's blob index for the unit (object key -> sha256 and size as recorded at write
   * time), given when the source shard has the index: a version object (./index-table's key shape)
   * is synced only when a row names it, so a superseded or deleted version, or the upload of a put
   * the fence refused, is neither copied nor kept at the destination (it is the collector's on the
   * source). Objects of any other shape (written beside the index) are synced as the prefix says.
   * Implies `knownHashes`.
   */
  referenced?: ReadonlyMap<string, { sha256: string; size: number }>;
  /** Stops the sync (the activity's cancellation). */
  signal?: AbortSignal;
  /**
   * The caller's fence: throws when this sync may no longer write into dst (its move no longer
   * holds this direction). Run before every delete batch and every object written, after the read
   * that justifies it.
   */
  stillSyncing?: () => Promise<void>;
  /** Both shards' blob ledgers for the unit (see ./ledger). */
  ledger?: { src: Pool; dst: Pool; unit: string };
  /**
   * Called with the key of an object written (or whose write was attempted) while the fence moved:
   * the write passed `stillSyncing` and was in flight when the sync's move ended, so it can land
   * after the move's clean-up emptied dst. The caller removes it when dst is nobody's way back.
   */
  landedAfterFence?: (key: string) => Promise<void>;
}

export interface CopyBlobPrefixResult {
  /** Every source object now at the destination, in source listing order (unchanged ones only when their hash is known). */
  manifest: ManifestEntry[];
  copied: number;
  skipped: number;
  deleted: number;
  /** Bytes written to the destination. */
  bytes: number;
  /** Objects read in full (copied or hashed), on either side. */
  objectsRead: number;
  /** Destination objects written, changed or deleted behind shardctl's back, left as they are. */
  outOfBand: OutOfBandObject[];
  /** Source objects listed, and how many of them are not version objects (blob index, ./index-table): 0 of N > 0 is a unit written only through the index. */
  sourceObjects: number;
  unversioned: number;
  /** Version objects of the source that no index row names, left out of the sync (with `referenced` only; else 0). */
  unreferenced: number;
  /**
   * The source's objects at the destination as this sync left them: listed there equal (key, size,
   * ETag as listed) or copied (the ETag the write returned). Out-of-band and deleted keys are not in it.
   */
  atDestination: Map<string, BlobEntry>;
}

const MAX_ATTEMPTS_PER_KEY = 5;

/** A destination ledger row that says "shardctl's own, in flight" (no ETag yet, or none any more). */
const pendingRow = (key: string): LedgerEntry => ({ key, etag: null, size: null, sha256: null, srcEtag: null, srcSize: null });

export async function copyBlobPrefix(opts: CopyBlobPrefixOptions): Promise<CopyBlobPrefixResult> {
  const { src, dst, prefix, sameEndpoint, signal } = opts;
  assertUnitBlobPrefix(prefix);
  if (src.bucket === dst.bucket && (sameEndpoint || src.s3 === dst.s3)) {
    throw new ShardctlError('InvalidInput', `source and destination are the same bucket ${src.bucket}`);
  }
  const limits: TransferLimits = { ...DEFAULT_LIMITS, ...opts.limits };
  // Per object in flight a GET and a PUT (or a part upload), beside the listings and the markers.
  allowConcurrentRequests(signal, 2 * (opts.concurrency ?? 8) + 16);
  const [srcMarker, dstMarker, srcListed, dstList, srcLedger, dstLedger] = await Promise.all([
    assertBucketOf(src, `copy ${prefix} from ${src.shard}`, signal),
    assertBucketOf(dst, `copy ${prefix} into ${dst.shard}`, signal),
    listBlobs(src.s3, src.bucket, prefix, { signal }),
    listBlobs(dst.s3, dst.bucket, prefix, { signal }),
    opts.ledger ? loadLedger(opts.ledger.src, opts.ledger.unit) : (new Map() as Ledger),
    opts.ledger ? loadLedger(opts.ledger.dst, opts.ledger.unit) : (new Map() as Ledger),
  ]);
  if (srcMarker.id === dstMarker.id) {
    throw new ShardctlError('PreconditionFailed', `refusing to copy ${prefix}: ${src.shard} and ${dst.shard} are one bucket (marker id ${srcMarker.id})`);
  }
  // With the index: what the sync brings over (the source as the index sees it). The source's ledger
  // still records all it holds.
  const referenced = opts.referenced;
  const srcList = referenced ? srcListed.filter((e) => !isVersionKey(e.key) || referenced.has(e.key)) : srcListed;
  const knownHashes = opts.knownHashes ?? referenced;
  // A destination with ledger rows for the unit is tracked: only shardctl's own objects there are touched.
  const tracked = opts.ledger !== undefined && dstLedger.size > 0;
  const dstByKey = new Map(dstList.map((e) => [e.key, e]));
  const srcKeys = new Set(srcList.map((e) => e.key));

  // Right before anything is written to the destination (after the read it copies, so whatever
  // happened before that read — a cancel, a switch — is seen): the caller's fence, and the signal.
  const fenceBeforeWrite = async () => {
    signal?.throwIfAborted();
    await opts.stillSyncing?.();
  };
  // Before a batch is deleted (and after the fence allows it), its keys are marked in flight in the
  // destination's ledger, as copies are: until the sync forgets them at its end, a reader of the
  // ledger (doctor) must not take an object gone with its row still standing for a delete behind
  // shardctl's back.
  const deleteOpts = {
    owner: src,
    signal,
    beforeBatch: async (batch: readonly string[]) => {
      await opts.stillSyncing?.();
      if (opts.ledger) await recordLedger(opts.ledger.dst, opts.ledger.unit, batch.map(pendingRow));
    },
  };

  const outOfBand: OutOfBandObject[] = [];
  const atDestination = new Map<string, BlobEntry>();
  const stats = { copied: 0, skipped: 0, deleted: 0, bytes: 0, objectsRead: 0 };
  const manifest: (ManifestEntry | undefined)[] = new Array(srcList.length);
  const dstRows: LedgerEntry[] = [];
  const forgotten: string[] = [];
  const work: { e: BlobEntry; i: number }[] = [];

  for (const [i, e] of srcList.entries()) {
    const d = dstByKey.get(e.key);
    const r = dstLedger.get(e.key);
    const change = tracked ? outOfBandChange(d, r) : undefined;
    if (change) {
      outOfBand.push({ key: e.key, change });
      continue;
    }
    const known = ledgerSaysEqual(e, d, r, srcLedger.get(e.key));
    if (known !== false) {
      stats.skipped++;
      if (d) atDestination.set(e.key, d);
      if (known) manifest[i] = { key: e.key, size: e.size, sha256: known };
      dstRows.push({ ...r!, sha256: known, srcEtag: e.etag, srcSize: e.size });
      continue;
    }
    work.push({ e, i });
  }
  const extras: string[] = [];
  for (const d of dstList) {
    if (srcKeys.has(d.key)) continue;
    const change = tracked ? outOfBandChange(d, dstLedger.get(d.key)) : undefined;
    if (change) outOfBand.push({ key: d.key, change });
    else extras.push(d.key);
  }
  // Rows of objects gone from both sides: nothing to track.
  for (const key of dstLedger.keys()) if (!srcKeys.has(key) && !dstByKey.has(key)) forgotten.push(key);

  const total = srcList.length + extras.length;
  let done = stats.skipped + outOfBand.length;
  const report = (key: string, action: BlobCopyProgress['action']) => {
    done++;
    const { objectsRead: _r, ...shown } = stats;
    opts.onProgress?.({ key, action, done, total, ...shown });
  };
  for (const o of outOfBand) opts.onProgress?.({ key: o.key, action: 'out-of-band', done, total, ...stats });

  // Copies in flight are recorded first: a sync killed mid-copy leaves rows that say "ours". An
  // untracked destination's extras are adopted the same way (this sync deletes them; if it dies
  // first, the next one, then tracked, must not mistake them for objects written behind its back).
  const pending = [
    ...work.map(({ e }) => ({ key: e.key, srcEtag: e.etag as string | null, srcSize: e.size as number | null })),
    ...(tracked ? [] : extras.map((key) => ({ key, srcEtag: null, srcSize: null }))),
  ];
  if (opts.ledger && pending.length > 0) {
    await fenceBeforeWrite();
    await recordLedger(
      opts.ledger.dst,
      opts.ledger.unit,
      pending.map((p) => ({ ...p, etag: null, size: null, sha256: null })),
    );
  }

  const hashSrc = async (e: BlobEntry): Promise<ObjectHash> => {
    stats.objectsRead++;
    return hashObject(src.s3, src.bucket, e.key, e.etag, signal);
  };
  /** The hash the blob index recorded for this object, when it names it at the listed size. */
  const knownHash = (e: BlobEntry): ObjectHash | undefined => {
    const k = knownHashes?.get(e.key);
    return k && k.size === e.size ? { sha256: k.sha256, size: k.size } : undefined;
  };

  /**
   * A write, and the fence asked again once it is over (landed, failed or aborted): a write that
   * passed the fence before the move ended can land after its clean-up. When the fence moved
   * meanwhile, the caller's `landedAfterFence` removes what may have landed, and the sync stops.
   */
  const fencedAfterWrite = async <T>(key: string, write: () => Promise<T>): Promise<T> => {
    if (!opts.landedAfterFence || !opts.stillSyncing) return write();
    let result: T;
    try {
      result = await write();
    } catch (err) {
      await opts.stillSyncing().catch(() => opts.landedAfterFence!(key));
      throw err;
    }
    try {
      await opts.stillSyncing();
    } catch (fenced) {
      await opts.landedAfterFence(key);
      throw fenced;
    }
    return result;
  };

  /** Brings one key in line with the source and returns its manifest entry and ledger row. */
  const syncOnce = async (e: BlobEntry): Promise<{ m?: ManifestEntry; row: LedgerEntry }> => {
    const d = dstByKey.get(e.key);
    const r = dstLedger.get(e.key);
    // The destination still holds what a sync copied from an older version of this source object:
    // it differs, no need to read both to find out.
    const changedSinceCopy = !!d && !!r && r.etag === d.etag && r.size === d.size && (r.srcEtag !== e.etag || r.srcSize !== e.size);
    let srcHash: ObjectHash | undefined;
    let same = false;
    if (d && d.size === e.size && !changedSinceCopy) {
      if (isContentEtag(e.etag) && e.etag === d.etag) same = true;
      else {
        srcHash = await hashSrc(e);
        stats.objectsRead++;
        const dstHash = await hashObject(dst.s3, dst.bucket, e.key, undefined, signal).catch((err) => {
          if (isNotFound(err)) return undefined;
          throw err;
        });
        same = dstHash !== undefined && dstHash.size === srcHash.size && dstHash.sha256 === srcHash.sha256;
      }
    }
    const row = (dstEtag: string, sha: string | null): LedgerEntry => ({
      key: e.key,
      etag: dstEtag,
      size: e.size,
      sha256: sha,
      srcEtag: e.etag,
      srcSize: e.size,
    });
    if (same) {
      stats.skipped++;
      atDestination.set(e.key, d!);
      report(e.key, 'skipped');
      const knownSha = srcHash?.sha256 ?? (srcLedger.get(e.key)?.etag === e.etag ? srcLedger.get(e.key)?.sha256 : null) ?? null;
      if (opts.hashUnchanged === false && !knownSha) return { row: row(d!.etag, null) };
      srcHash ??= knownSha ? { sha256: knownSha, size: e.size } : (knownHash(e) ?? (await hashSrc(e)));
      return { m: { key: e.key, size: srcHash.size, sha256: srcHash.sha256 }, row: row(d!.etag, srcHash.sha256) };
    }
    let dstEtag: string;
    if (sameEndpoint) {
      srcHash ??= knownHash(e) ?? (await hashSrc(e));
      await fenceBeforeWrite();
      dstEtag = (await fencedAfterWrite(e.key, () => serverCopyObject(src, dst, e, limits, signal))).dstEtag;
    } else {
      stats.objectsRead++;
      const copied = await fencedAfterWrite(e.key, () => streamCopyObject(src, dst, e, limits, signal, fenceBeforeWrite));
      srcHash = copied;
      dstEtag = copied.dstEtag;
    }
    stats.copied++;
    stats.bytes += srcHash.size;
    atDestination.set(e.key, { key: e.key, size: srcHash.size, etag: dstEtag });
    report(e.key, 'copied');
    return { m: { key: e.key, size: srcHash.size, sha256: srcHash.sha256 }, row: row(dstEtag, srcHash.sha256) };
  };

  await forEachLimit(work, opts.concurrency ?? 8, async ({ e: listed, i }) => {
    let e = listed;
    for (let attempt = 1; ; attempt++) {
      signal?.throwIfAborted();
      try {
        const r = await syncOnce(e);
        manifest[i] = r.m;
        dstRows.push(r.row);
        return;
      } catch (err) {
        if (!(isPreconditionFailed(err) || isNotFound(err)) || attempt >= MAX_ATTEMPTS_PER_KEY) throw err;
      }
      // The source object changed or vanished since it was listed: look again.
      const head = await headBlob(src.s3, src.bucket, e.key, signal);
      if (!head) {
        // Deleted at the source: delete here too, unless the caller's fence, checked after the
        // 404 (so after whatever deleted it), says this direction is no longer ours.
        await deleteKeys(dst, [e.key], deleteOpts);
        atDestination.delete(e.key);
        forgotten.push(e.key);
        if (dstByKey.has(e.key)) stats.deleted++;
        report(e.key, 'deleted');
        return;
      }
      e = head;
    }
  });

  // Deletes propagate: what the source no longer has goes from the destination too.
  if (extras.length > 0) {
    await deleteKeys(dst, extras, deleteOpts);
    forgotten.push(...extras);
    for (const key of extras) {
      stats.deleted++;
      report(key, 'deleted');
    }
  }

  if (opts.ledger) {
    const { unit } = opts.ledger;
    await recordLedger(opts.ledger.dst, unit, dstRows);
    await forgetLedger(opts.ledger.dst, unit, forgotten);
    // The source as this sync saw it: what shardctl knows it held, should it become a destination.
    // Only while the sync still holds its direction (a stale sync must not rewrite the old owner's record).
    await opts.stillSyncing?.();
    const shaOf = new Map(manifest.filter((m): m is ManifestEntry => m !== undefined).map((m) => [m.key, m.sha256]));
    await replaceLedger(
      opts.ledger.src,
      unit,
      srcListed.map((e) => {
        const rs = srcLedger.get(e.key);
        const same = rs && rs.etag === e.etag && rs.size === e.size;
        return {
          key: e.key,
          etag: e.etag,
          size: e.size,
          sha256: shaOf.get(e.key) ?? (same ? rs.sha256 : null),
          srcEtag: same ? rs.srcEtag : null,
          srcSize: same ? rs.srcSize : null,
        };
      }),
    );
  }

  return {
    manifest: manifest.filter((m): m is ManifestEntry => m !== undefined),
    ...stats,
    outOfBand,
    sourceObjects: srcListed.length,
    unversioned: srcListed.filter((e) => !isVersionKey(e.key)).length,
    unreferenced: srcListed.length - srcList.length,
    atDestination,
  };
}
