// Tenant blob movement (Node side: S3 and pg). Workflows import the pure modules directly:
// ./manifest (compareBlobManifests), ./prefix (tenantBlobPrefix), ./bucket-identity.
export { tenantBlobPrefix, assertTenantBlobPrefix, unitBlobPrefix, assertUnitBlobPrefix } from './prefix';
export { compareBlobManifests, manifestsEqual } from './manifest';
export type { ManifestEntry, BlobManifestDiff, BlobDifference } from './manifest';
export { listBlobs } from './list';
export { blobCensus, CENSUS_MAX_OBJECTS, type BlobCensus } from './census';
export type { BlobEntry } from './list';
export { hashObject, manifestOf } from './hash';
export { copyBlobPrefix } from './copy';
export type { BucketRef, BlobCopyProgress, CopyBlobPrefixOptions, CopyBlobPrefixResult } from './copy';
export { deleteBlobPrefix, deleteKeys } from './delete';
export type { DeleteOptions } from './delete';
export { ensureManifestTable, recordManifest, loadManifest, deleteManifest } from './store';
export { BUCKET_MARKER_KEY, readBucketMarker, ensureBucketMarker, assertBucketOf, assertMayDelete } from './marker';
export type { BucketMarker, ShardBucket } from './marker';
export { bucketIdentity, sharedBucketProblems, shardBucketIdentity } from './bucket-identity';
export { readLedger, ledgerUnits, unaccountedObjects } from './ledger';
export { loadLedger, recordLedger, forgetLedger, replaceLedger, outOfBandObjects, outOfBandChange } from './ledger';
export type { Ledger, LedgerEntry, OutOfBandObject, OutOfBandChange } from './ledger';
export { compareBlobPrefixes } from './verify';
export { ledgerSaysEqual } from './ledger';
