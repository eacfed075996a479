// doctor's eyes on the buckets: per shard, the units with objects under `tenants/<unit>/` or
// `datasets/<dataset>/<n>/` (or rows in the shard's blob ledger) that the directory places on
// another shard, and of those objects the ones the shard's blob ledger does not account for (written, changed or deleted behind shardctl's
// back). Reads only: the ledger is read without creating its table, once before and once after the
// listing (see unaccountedObjects). Blob-index version objects are never called deleted: retire
// leaves them out too (an acknowledged one has its index row, moved with the rows and validated).
import { ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import type { Pool } from 'pg';
import { ledgerUnits, listBlobs, readLedger, unaccountedObjects, unitBlobPrefix } from '../blobs';
import { isVersionKey } from '../blobs/index-table';
import type { ForeignBlobFact } from './findings';

/** Keys shown per unit in a finding; the count is always the whole. */
export const FOREIGN_KEYS_SHOWN = 20;

/** The folders right under `prefix` (ListObjectsV2 with a delimiter), as full prefixes. */
async function foldersUnder(s3: S3Client, bucket: string, prefix: string): Promise<string[]> {
  const out: string[] = [];
  let token: string | undefined;
  do {
    const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, Delimiter: '/', ContinuationToken: token }));
    for (const p of page.CommonPrefixes ?? []) if (p.Prefix) out.push(p.Prefix);
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  return out;
}

/**
 * The units with at least one object in the bucket: tenant ids under `tenants/<id>/`, and bucket
 * units `bucket:<dataset>:<n>` under `datasets/<dataset>/<n>/` (only prefixes of exactly a unit's shape).
 */
export async function unitsInBucket(s3: S3Client, bucket: string): Promise<string[]> {
  const out: string[] = [];
  for (const p of await foldersUnder(s3, bucket, 'tenants/')) {
    const m = /^tenants\/([^/]+)\/$/.exec(p);
    if (m) out.push(m[1]);
  }
  for (const d of await foldersUnder(s3, bucket, 'datasets/')) {
    for (const p of await foldersUnder(s3, bucket, d)) {
      const m = /^datasets\/([a-z][a-z0-9_]{0,31})\/([0-9]{1,5})\/$/.exec(p);
      if (m) out.push(`bucket:${m[1]}:${m[2]}`);
    }
  }
  return out;
}

/** Objects of units placed elsewhere (`owners`: unit → owning shard) that this shard's ledger does not account for. */
export async function foreignBlobFacts(
  s3: S3Client,
  bucket: string,
  pool: Pool,
  shard: string,
  owners: ReadonlyMap<string, string>,
): Promise<ForeignBlobFact[]> {
  const out: ForeignBlobFact[] = [];
  // A unit whose every object here was deleted lists nothing: its ledger rows still name it.
  const units = [...new Set([...(await unitsInBucket(s3, bucket)), ...(await ledgerUnits(pool))])].sort();
  for (const unit of units) {
    const owner = owners.get(unit);
    // Only units the directory knows: a prefix of no unit here is another directory's, or a test's.
    if (!owner || owner === shard) continue;
    const before = await readLedger(pool, unit);
    const listing = await listBlobs(s3, bucket, unitBlobPrefix(unit));
    const after = await readLedger(pool, unit);
    const odd = unaccountedObjects(listing, [before, after], (key) => !isVersionKey(key));
    if (odd.length === 0) continue;
    out.push({ shard, bucket, unit, owner, tracked: before.size > 0 || after.size > 0, total: odd.length, objects: odd.slice(0, FOREIGN_KEYS_SHOWN) });
  }
  return out;
}
