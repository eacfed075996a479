import { describe, it, expect } from 'vitest';
import { compareDecimalText, compareNonNull, mergeSortedRuns, parseOrderBy, rowComparator, UnsortedRunError, type TypedOrderKey } from '../../lib/router/topk';

/** A seeded generator, so a failing case replays. */
function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

type Row = { shard: number; score: number | null; id: number };
const keys: TypedOrderKey[] = [
  { column: 'score', descending: true, kind: 'number' },
  { column: 'id', descending: false, kind: 'number' },
];
const cmp = rowComparator(keys);

describe('mergeSortedRuns', () => {
  it('equals sorting everything and taking k, for random runs, limits and duplicate scores', () => {
    const rand = rng(42);
    for (let round = 0; round < 200; round++) {
      const runs: Row[][] = Array.from({ length: 1 + Math.floor(rand() * 6) }, (_, shard) =>
        Array.from({ length: Math.floor(rand() * 30) }, (_, i) => ({
          shard,
          score: rand() < 0.1 ? null : Math.floor(rand() * 20),
          id: shard * 1000 + i,
        })).sort(cmp),
      );
      const limit = rand() < 0.2 ? undefined : 1 + Math.floor(rand() * 40);
      const all = runs.flat().sort(cmp);
      const expected = limit === undefined ? all : all.slice(0, limit);
      const merged = mergeSortedRuns(runs, cmp, limit);
      expect(merged.map((m) => m.item)).toEqual(expected);
      for (const m of merged) expect(m.item.shard).toBe(m.run);
    }
  });

  it('takes only k rows and keeps run order on ties', () => {
    const a = [{ v: 1 }, { v: 3 }];
    const b = [{ v: 1 }, { v: 2 }];
    const byV = (x: { v: number }, y: { v: number }) => x.v - y.v;
    expect(mergeSortedRuns([a, b], byV, 3)).toEqual([
      { run: 0, item: { v: 1 } },
      { run: 1, item: { v: 1 } },
      { run: 1, item: { v: 2 } },
    ]);
    expect(mergeSortedRuns([[], []], byV, 5)).toEqual([]);
  });

  it('fails loudly on a run that is not sorted under the comparator', () => {
    const byV = (x: number, y: number) => x - y;
    expect(() => mergeSortedRuns([[1, 5, 2], [3]], byV)).toThrow(UnsortedRunError);
  });
});

describe('rowComparator', () => {
  it('puts NULL last ascending and first descending, as PostgreSQL does by default', () => {
    const asc = rowComparator([{ column: 'x', descending: false, kind: 'number' }]);
    const desc = rowComparator([{ column: 'x', descending: true, kind: 'number' }]);
    const rows = [{ x: 2 }, { x: null }, { x: 1 }];
    expect([...rows].sort(asc).map((r) => r.x)).toEqual([1, 2, null]);
    expect([...rows].sort(desc).map((r) => r.x)).toEqual([null, 2, 1]);
  });
});

describe('compareNonNull', () => {
  it('orders text by code point (COLLATE "C"), not by UTF-16 unit or case-insensitively', () => {
    const words = ['b', 'B', 'a', '\u{1F600}', '\uFF21', 'ab', 'a'];
    // U+1F600 is a surrogate pair in UTF-16, which JavaScript's default sort puts below U+FF21.
    expect([...words].sort((x, y) => compareNonNull('text', x, y))).toEqual(['B', 'a', 'a', 'ab', 'b', '\uFF21', '\u{1F600}']);
  });

  it('orders int8 exactly beyond 2^53 and NaN above every float', () => {
    expect(compareNonNull('bigint', '9007199254740993', '9007199254740992')).toBeGreaterThan(0);
    expect(compareNonNull('number', Number.NaN, Number.POSITIVE_INFINITY)).toBeGreaterThan(0);
    expect(compareNonNull('number', Number.NaN, Number.NaN)).toBe(0);
  });

  it('orders timestamps by instant, with infinity at the ends', () => {
    expect(compareNonNull('time', new Date('2024-01-01T00:00:00Z'), new Date('2023-12-31T23:59:59Z'))).toBeGreaterThan(0);
    expect(compareNonNull('time', Number.NEGATIVE_INFINITY, new Date(0))).toBeLessThan(0);
  });
});

describe('compareDecimalText', () => {
  it('orders numeric texts exactly, signs, scales and specials included', () => {
    const sorted = [
      '-Infinity',
      '-10.5',
      '-10.25',
      '-2',
      '-0.001',
      '0',
      '0.0001',
      '0.5',
      '0.51',
      '2',
      '10.001',
      '123456789012345678901234567890',
      'Infinity',
      'NaN',
    ];
    const rand = rng(7);
    for (let i = 0; i < 20; i++) {
      const shuffled = [...sorted].sort(() => rand() - 0.5);
      expect(shuffled.sort(compareDecimalText)).toEqual(sorted);
    }
    expect(compareDecimalText('0', '0.000')).toBe(0);
    expect(compareDecimalText('10.00', '10')).toBe(0);
    expect(compareDecimalText('-0.5', '0.5')).toBeLessThan(0);
  });
});

describe('parseOrderBy', () => {
  it('reads "col [asc|desc]" lists and refuses malformed terms', () => {
    expect(parseOrderBy('score desc, id')).toEqual([
      { column: 'score', descending: true },
      { column: 'id', descending: false },
    ]);
    expect(parseOrderBy({ column: 'x' })).toEqual([{ column: 'x', descending: false }]);
    expect(() => parseOrderBy('score sideways')).toThrow(/invalid order-by term/);
    expect(() => parseOrderBy('')).toThrow(/invalid order-by term/);
    expect(() => parseOrderBy([])).toThrow(/names no column/);
  });
});
