import { describe, it, expect } from 'vitest';
import { compareBlobManifests, manifestsEqual, ManifestEntry } from '../../lib/blobs/manifest';

const sha = (c: string) => c.repeat(64);
const e = (key: string, size: number, c: string): ManifestEntry => ({ key, size, sha256: sha(c) });

describe('compareBlobManifests', () => {
  it('reports nothing for equal manifests in any order', () => {
    const a = [e('tenants/t/a', 1, 'a'), e('tenants/t/b', 2, 'b')];
    const d = compareBlobManifests(a, [...a].reverse());
    expect(d).toEqual({ missing: [], extra: [], different: [] });
    expect(manifestsEqual(d)).toBe(true);
  });

  it('reports keys only on the source as missing and only on the destination as extra, sorted', () => {
    const d = compareBlobManifests([e('z', 1, 'a'), e('m', 1, 'a'), e('k', 1, 'a')], [e('k', 1, 'a'), e('y', 1, 'a'), e('b', 1, 'a')]);
    expect(d.missing).toEqual(['m', 'z']);
    expect(d.extra).toEqual(['b', 'y']);
    expect(d.different).toEqual([]);
    expect(manifestsEqual(d)).toBe(false);
  });

  it('reports a different size or a different sha256 with both sides', () => {
    const d = compareBlobManifests([e('s', 1, 'a'), e('h', 5, 'a'), e('same', 3, 'c')], [e('s', 2, 'a'), e('h', 5, 'b'), e('same', 3, 'c')]);
    expect(d.different).toEqual([
      { key: 'h', srcSize: 5, dstSize: 5, srcSha: sha('a'), dstSha: sha('b') },
      { key: 's', srcSize: 1, dstSize: 2, srcSha: sha('a'), dstSha: sha('a') },
    ]);
  });

  it('treats sha256 hex case-insensitively', () => {
    expect(compareBlobManifests([e('k', 1, 'A')], [e('k', 1, 'a')]).different).toEqual([]);
  });

  it('refuses a manifest listing a key twice', () => {
    expect(() => compareBlobManifests([e('k', 1, 'a'), e('k', 1, 'a')], [])).toThrow(/twice/);
    expect(() => compareBlobManifests([], [e('k', 1, 'a'), e('k', 2, 'a')])).toThrow(expect.objectContaining({ type: 'InvalidInput' }));
  });
});
