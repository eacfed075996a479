import { describe, it, expect } from 'vitest';
import { ledgerSaysEqual, outOfBandChange, outOfBandObjects, unaccountedObjects, type Ledger, type LedgerEntry } from '../../lib/blobs/ledger';

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

describe('unaccountedObjects (doctor: objects on a shard that does not own the unit, written, changed or deleted)', () => {
  const ledger = (...rows: LedgerEntry[]): Ledger => new Map(rows.map((r) => [r.key, r]));
  it('reports objects no ledger read accounts for: written (no row) or changed (another ETag or size), sorted', () => {
    const l = ledger(row('a', 'e1', 3), row('b', 'e2', 4));
    const listing = [listed('c', 'e3', 1), listed('a', 'e1', 3), listed('b', 'e9', 4)];
    expect(unaccountedObjects(listing, [l, l])).toEqual([
      { key: 'b', change: 'changed' },
      { key: 'c', change: 'written' },
    ]);
  });
  it('an untracked bucket (empty ledger) accounts for nothing', () => {
    expect(unaccountedObjects([listed('a', 'e1', 3)], [new Map(), new Map()])).toEqual([{ key: 'a', change: 'written' }]);
  });
  it('an object a sync recorded between the two reads (or a copy in flight) is shardctl’s own', () => {
    const before = ledger(row('a', 'e1', 3));
    const after = ledger(row('a', 'e2', 3), row('n', 'e5', 1));
    const listing = [listed('a', 'e2', 3), listed('n', 'e5', 1), listed('f', 'e7', 2)];
    expect(unaccountedObjects(listing, [before, after])).toEqual([{ key: 'f', change: 'written' }]);
    expect(unaccountedObjects([listed('f', 'e7', 2)], [ledger(row('f', null, null)), new Map()])).toEqual([]);
  });
  it('reports an object gone from the bucket that every read records as shardctl left it', () => {
    const l = ledger(row('a', 'e1', 3), row('b', 'e2', 4));
    expect(unaccountedObjects([listed('b', 'e2', 4)], [l, l])).toEqual([{ key: 'a', change: 'deleted' }]);
  });
  it('a delete of shardctl’s own between or around the reads (marked pending, or forgotten) is not reported', () => {
    const before = ledger(row('a', 'e1', 3), row('b', 'e2', 4));
    expect(unaccountedObjects([], [before, ledger(row('a', null, null))])).toEqual([]);
    expect(unaccountedObjects([], [before, ledger(row('b', 'e2', 4))])).toEqual([{ key: 'b', change: 'deleted' }]);
    expect(unaccountedObjects([], [ledger(row('a', null, null)), ledger(row('a', null, null))])).toEqual([]);
  });
  it('keys left out by the caller are never called deleted', () => {
    const l = ledger(row('v@1', 'e1', 3), row('x', 'e2', 4));
    expect(unaccountedObjects([], [l, l], (k) => !k.includes('@'))).toEqual([{ key: 'x', change: 'deleted' }]);
  });
});
