import { describe, it, expect } from 'vitest';
import { ledgerSaysEqual, outOfBandChange, outOfBandObjects, type LedgerEntry } from '../../lib/blobs/ledger';

const row = (key: string, etag: string | null, size: number | null, src?: { etag: string; size: number }, sha: string | null = 'h'): LedgerEntry => ({
  key,
  etag,
  size,
  sha256: sha,
  srcEtag: src?.etag ?? null,
  srcSize: src?.size ?? null,
});
const listed = (key: string, etag: string, size: number) => ({ key, etag, size });

describe('outOfBandChange', () => {
  it("tells shardctl's own objects (and copies in flight) from ones written, changed or deleted behind its back", () => {
    expect(outOfBandChange(listed('k', 'e1', 3), row('k', 'e1', 3))).toBeUndefined();
    expect(outOfBandChange(listed('k', 'e9', 3), row('k', null, null))).toBeUndefined(); // in flight
    expect(outOfBandChange(undefined, row('k', null, null))).toBeUndefined();
    expect(outOfBandChange(undefined, undefined)).toBeUndefined();
    expect(outOfBandChange(listed('k', 'e1', 3), undefined)).toBe('written');
    expect(outOfBandChange(listed('k', 'e2', 3), row('k', 'e1', 3))).toBe('changed');
    expect(outOfBandChange(listed('k', 'e1', 4), row('k', 'e1', 3))).toBe('changed');
    expect(outOfBandChange(undefined, row('k', 'e1', 3))).toBe('deleted');
  });

  it('lists every difference of a listing from its ledger, by key', () => {
    const ledger = new Map([row('a', 'x', 1), row('b', 'y', 1), row('c', 'z', 1)].map((r) => [r.key, r]));
    expect(outOfBandObjects([listed('a', 'x', 1), listed('c', 'z2', 1), listed('d', 'w', 1)], ledger)).toEqual([
      { key: 'b', change: 'deleted' },
      { key: 'c', change: 'changed' },
      { key: 'd', change: 'written' },
    ]);
  });
});

describe('ledgerSaysEqual', () => {
  const e = { etag: 'src-2', size: 9 };
  const d = { etag: 'dst-md5', size: 9 };
  it('proves equality only when the destination is what a sync copied from exactly this source object', () => {
    expect(ledgerSaysEqual(e, d, row('k', 'dst-md5', 9, { etag: 'src-2', size: 9 }, 'sha'), undefined)).toBe('sha');
    expect(ledgerSaysEqual(e, d, row('k', 'dst-md5', 9, { etag: 'src-1', size: 9 }), undefined)).toBe(false); // the source changed since
    expect(ledgerSaysEqual(e, { etag: 'dst-other', size: 9 }, row('k', 'dst-md5', 9, { etag: 'src-2', size: 9 }), undefined)).toBe(false); // the destination changed
    expect(ledgerSaysEqual(e, undefined, row('k', 'dst-md5', 9, { etag: 'src-2', size: 9 }), undefined)).toBe(false);
    expect(ledgerSaysEqual(e, d, row('k', null, null, { etag: 'src-2', size: 9 }), undefined)).toBe(false); // in flight
  });

  it('also the other way: the source is what a sync copied from exactly this destination object', () => {
    const dstRow = row('k', 'dst-md5', 9); // as listed when the destination was the source
    expect(ledgerSaysEqual(e, d, dstRow, row('k', 'src-2', 9, { etag: 'dst-md5', size: 9 }, 'sha2'))).toBe('sha2');
    expect(ledgerSaysEqual(e, d, dstRow, row('k', 'src-1', 9, { etag: 'dst-md5', size: 9 }))).toBe(false);
  });
});
