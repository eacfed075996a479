// Comparing a unit's blobs in two buckets (validate phase: by key, size and sha256) without
// reading what the blob ledgers (./ledger) already prove equal: an object whose ETag and size on
// both sides are the ones a sync recorded when it copied it (and hashed the bytes it wrote) is
// unchanged since, so its recorded sha256 stands. Only objects the ledgers cannot vouch for are
// read (hashed on both sides). ETags are compared only with what this bucket itself reported.
import type { Pool } from 'pg';
import { forEachLimit } from './concurrency';
import { hashObject } from './hash';
import { isNotFound, listBlobs } from './list';
import { compareBlobManifests, type BlobManifestDiff, type ManifestEntry } from './manifest';
import { ledgerSaysEqual, loadLedger, type Ledger } from './ledger';
import { assertUnitBlobPrefix } from './prefix';
import { isVersionKey } from './index-table';
import type { BucketRef } from './transfer';

export interface CompareBlobPrefixesOptions {
  src: BucketRef;
  dst: BucketRef;
  prefix: string;
  ledger?: { src: Pool; dst: Pool; unit: string };
  /**
   * The source's blob index (object key -> sha256 and size recorded at write time): each object it
   * names must be at the destination with that size and sha256 (the source's copy is not read; the
   * destination's only when its ledger does not vouch for it), and version objects it does not name
   * are left out on the source side (./copy.ts `referenced`).
   */
  referenced?: ReadonlyMap<string, { sha256: string; size: number }>;
  concurrency?: number;
  signal?: AbortSignal;
}

export async function compareBlobPrefixes(opts: CompareBlobPrefixesOptions): Promise<BlobManifestDiff & { objectsRead: number }> {
  const { src, dst, prefix, signal } = opts;
  assertUnitBlobPrefix(prefix);
  const [srcListed, dstList, srcLedger, dstLedger] = await Promise.all([
    listBlobs(src.s3, src.bucket, prefix, { signal }),
    listBlobs(dst.s3, dst.bucket, prefix, { signal }),
    opts.ledger ? loadLedger(opts.ledger.src, opts.ledger.unit) : (new Map() as Ledger),
    opts.ledger ? loadLedger(opts.ledger.dst, opts.ledger.unit) : (new Map() as Ledger),
  ]);
  const dstByKey = new Map(dstList.map((e) => [e.key, e]));
  const a: ManifestEntry[] = [];
  const b: ManifestEntry[] = [];
  const toRead: string[] = [];
  const referenced = opts.referenced;
  let srcList = srcListed;
  /** Destination objects to hash (the ledger does not vouch for them), compared with what the index recorded. */
  const dstToRead: string[] = [];
  if (referenced) {
    // Every object a row names, as the row recorded it (listed at the source or not: the index is
    // the authority); the destination's copy vouched for by its ledger (the ETag and size it left
    // there, the sha256 of what it wrote) or read.
    for (const [key, r] of referenced) {
      a.push({ key, size: r.size, sha256: r.sha256 });
      const d = dstByKey.get(key);
      const row = dstLedger.get(key);
      if (!d) continue;
      if (row && row.etag !== null && row.etag === d.etag && row.size === d.size && row.sha256) b.push({ key, size: d.size, sha256: row.sha256 });
      else dstToRead.push(key);
    }
    // The rest as the prefix says, version objects no row names left out.
    srcList = srcListed.filter((e) => !isVersionKey(e.key) && !referenced.has(e.key));
  }
  for (const e of srcList) {
    const d = dstByKey.get(e.key);
    const known = ledgerSaysEqual(e, d, dstLedger.get(e.key), srcLedger.get(e.key));
    if (!d)
      a.push({ key: e.key, size: e.size, sha256: '-' }); // missing: its content does not matter
    else if (known) {
      a.push({ key: e.key, size: e.size, sha256: known });
      b.push({ key: d.key, size: d.size, sha256: known });
    } else toRead.push(e.key);
  }
  const srcKeys = new Set([...srcList.map((e) => e.key), ...(referenced?.keys() ?? [])]);
  // Only on the destination: its presence is the difference, its content does not matter.
  for (const d of dstList) if (!srcKeys.has(d.key)) b.push({ key: d.key, size: d.size, sha256: '-' });
  let objectsRead = 0;
  await forEachLimit(toRead, opts.concurrency ?? 8, async (key) => {
    const [hs, hd] = await Promise.all(
      [src, dst].map((side) =>
        hashObject(side.s3, side.bucket, key, undefined, signal).then(
          (h) => {
            objectsRead++;
            return h;
          },
          (err) => {
            if (isNotFound(err)) return undefined;
            throw err;
          },
        ),
      ),
    );
    if (hs) a.push({ key, size: hs.size, sha256: hs.sha256 });
    if (hd) b.push({ key, size: hd.size, sha256: hd.sha256 });
  });
  await forEachLimit(dstToRead, opts.concurrency ?? 8, async (key) => {
    const hd = await hashObject(dst.s3, dst.bucket, key, undefined, signal).catch((err) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
    if (!hd) return;
    objectsRead++;
    b.push({ key, size: hd.size, sha256: hd.sha256 });
  });
  return { ...compareBlobManifests(a, b), objectsRead };
}
