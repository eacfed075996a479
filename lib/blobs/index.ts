// Tenant blob movement (Node side: S3 and pg). Workflows import the pure modules directly:
// ./manifest (compareBlobManifests) and ./prefix (tenantBlobPrefix).
export { tenantBlobPrefix, assertTenantBlobPrefix } from './prefix';
export { compareBlobManifests, manifestsEqual } from './manifest';
export type { ManifestEntry, BlobManifestDiff, BlobDifference } from './manifest';
export { listBlobs } from './list';
export type { BlobEntry } from './list';
export { hashObject, manifestOf } from './hash';
export { copyBlobPrefix } from './copy';
export type { BucketRef, BlobCopyProgress, CopyBlobPrefixOptions, CopyBlobPrefixResult } from './copy';
export { deleteBlobPrefix, deleteKeys } from './delete';
export { ensureManifestTable, recordManifest, loadManifest, deleteManifest } from './store';
