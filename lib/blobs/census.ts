// What a move plan says of a unit's objects: how many, how big, and how many were not written
// through the blob index (./index-table), which decides the cutover's final blob delta — the
// changed index rows when every object is an index version, else a listing of the whole prefix
// inside the write pause, whose cost grows with the objects under it (lib/cutover/live.ts).
import type { S3Client } from '@aws-sdk/client-s3';
import { isVersionKey } from './index-table';
import { listBlobs } from './list';

export interface BlobCensus {
  /** Objects counted (at most the census bound; `truncated` says whether there are more). */
  objects: number;
  bytes: number;
  /** Of those, the ones that are not version objects of the blob index. */
  unversioned: number;
  /**
   * Of those, version objects no index row names (superseded, deleted or never committed: the
   * collector's). The move does not copy them. Present when the source's index was read.
   */
  unreferenced?: number;
  /** What the move copies of those counted: every object but the unreferenced versions. Present when the source's index was read. */
  toCopy?: { objects: number; bytes: number };
  truncated: boolean;
  /**
   * The final blob delta the cutover's window will use as things stand: 'index' when every object
   * counted is an index version, 'prefix' otherwise (also for no objects yet: an empty listing).
   */
  windowDelta: 'index' | 'prefix';
}

/** Default bound of a census: a plan lists at most this many objects (ten pages). */
export const CENSUS_MAX_OBJECTS = 10_000;

/**
 * `referenced`: the object keys the source's blob index names for the unit (lib/blobs/index-table
 * indexedObjectHashes), when the shard has the index: then the census also says which counted
 * objects the move copies (syncUnitBlobs leaves version objects no row names behind).
 */
export async function blobCensus(
  s3: S3Client,
  bucket: string,
  prefix: string,
  opts: { maxObjects?: number; signal?: AbortSignal; referenced?: ReadonlySet<string> | ReadonlyMap<string, unknown> } = {},
): Promise<BlobCensus> {
  const max = opts.maxObjects ?? CENSUS_MAX_OBJECTS;
  const listed = await listBlobs(s3, bucket, prefix, { maxObjects: max + 1, signal: opts.signal });
  const counted = listed.slice(0, max);
  const unversioned = counted.filter((e) => !isVersionKey(e.key)).length;
  const census: BlobCensus = {
    objects: counted.length,
    bytes: counted.reduce((n, e) => n + e.size, 0),
    unversioned,
    truncated: listed.length > max,
    windowDelta: counted.length > 0 && unversioned === 0 ? 'index' : 'prefix',
  };
  const ref = opts.referenced;
  if (ref) {
    const copied = counted.filter((e) => !isVersionKey(e.key) || ref.has(e.key));
    census.unreferenced = counted.length - copied.length;
    census.toCopy = { objects: copied.length, bytes: copied.reduce((n, e) => n + e.size, 0) };
  }
  return census;
}
