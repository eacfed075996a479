// Blob manifests and their comparison (validate phase: blobs by key, size and checksum). Pure:
// safe to import from workflows. sha256 is of the object bytes; ETags are not compared here
// because multipart and copied objects carry ETags that are not content hashes.
import { ShardctlError } from '../errors';

export interface ManifestEntry {
  key: string;
  size: number;
  /** Lower-case hex sha256 of the object's bytes. */
  sha256: string;
}

export interface BlobDifference {
  key: string;
  srcSize: number;
  dstSize: number;
  srcSha: string;
  dstSha: string;
}

export interface BlobManifestDiff {
  /** On the source, not on the destination. */
  missing: string[];
  /** On the destination, not on the source. */
  extra: string[];
  /** On both, with a different size or sha256. */
  different: BlobDifference[];
}

function byKey(entries: ManifestEntry[], side: string): Map<string, ManifestEntry> {
  const m = new Map<string, ManifestEntry>();
  for (const e of entries) {
    if (m.has(e.key)) throw new ShardctlError('InvalidInput', `${side} manifest lists key ${JSON.stringify(e.key)} twice`);
    m.set(e.key, e);
  }
  return m;
}

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Both directions, sorted by key; an empty diff (all three empty) means equal content. */
export function compareBlobManifests(src: ManifestEntry[], dst: ManifestEntry[]): BlobManifestDiff {
  const s = byKey(src, 'source');
  const d = byKey(dst, 'destination');
  const missing: string[] = [];
  const different: BlobDifference[] = [];
  for (const [key, a] of s) {
    const b = d.get(key);
    if (!b) missing.push(key);
    else if (a.size !== b.size || a.sha256.toLowerCase() !== b.sha256.toLowerCase()) {
      different.push({ key, srcSize: a.size, dstSize: b.size, srcSha: a.sha256, dstSha: b.sha256 });
    }
  }
  const extra = [...d.keys()].filter((k) => !s.has(k));
  missing.sort(cmp);
  extra.sort(cmp);
  different.sort((x, y) => cmp(x.key, y.key));
  return { missing, extra, different };
}

export function manifestsEqual(diff: BlobManifestDiff): boolean {
  return diff.missing.length === 0 && diff.extra.length === 0 && diff.different.length === 0;
}
