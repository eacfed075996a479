import { describe, it, expect } from 'vitest';
import { mergeCompare, excerptPair, KeyedRow } from '../../lib/validate/merge';
import { keyComparator } from '../../lib/validate/keys';

const cmp = keyComparator([
  { name: 'tenant_id', type: 'text', order: 'bytes' },
  { name: 'id', type: 'integer', order: 'int' },
]);
const columns = ['tenant_id', 'id', 'v'];
async function* rows(...rs: [string, (string | null)?][]): AsyncGenerator<KeyedRow> {
  for (const [id, v] of rs) yield { key: ['t', id], values: ['t', id, v ?? null] };
}
const merge = (a: AsyncIterable<KeyedRow>, b: AsyncIterable<KeyedRow>, maxReport = 20) => mergeCompare(a, b, { columns, compareKeys: cmp, maxReport });

describe('mergeCompare', () => {
  it('reports identical streams as equal and counts rows on both sides', async () => {
    const r = await merge(rows(['1', 'a'], ['2', 'b']), rows(['1', 'a'], ['2', 'b']));
    expect(r).toMatchObject({ sourceRows: 2, targetRows: 2, missingCount: 0, extraCount: 0, differentCount: 0 });
  });

  it('reports a key only in the source as missing and only in the target as extra', async () => {
    const r = await merge(rows(['1', 'a'], ['2', 'b'], ['10', 'c']), rows(['2', 'b'], ['3', 'x'], ['10', 'c']));
    expect(r.missing).toEqual([['t', '1']]);
    expect(r.extra).toEqual([['t', '3']]);
    expect(r).toMatchObject({ sourceRows: 3, targetRows: 3, differentCount: 0 });
  });

  it('reports trailing rows of either side once the other side is exhausted', async () => {
    expect((await merge(rows(['1'], ['2']), rows())).missing).toEqual([
      ['t', '1'],
      ['t', '2'],
    ]);
    expect((await merge(rows(), rows(['1']))).extra).toEqual([['t', '1']]);
  });

  it('reports each differing column with both values, NULL distinct from empty text', async () => {
    const r = await merge(rows(['1', '1.0'], ['2', null], ['3', '']), rows(['1', '1.00'], ['2', ''], ['3', null]));
    expect(r.different).toEqual([
      { key: ['t', '1'], column: 'v', source: '1.0', target: '1.00' },
      { key: ['t', '2'], column: 'v', source: null, target: '' },
      { key: ['t', '3'], column: 'v', source: '', target: null },
    ]);
  });

  it('caps each list at maxReport but counts everything', async () => {
    const src = Array.from({ length: 30 }, (_, i) => [String(i), 'a'] as [string, string]);
    const tgt = src.map(([k]) => [k, 'b'] as [string, string]);
    const r = await merge(rows(...src), rows(...tgt), 4);
    expect(r.different).toHaveLength(4);
    expect(r.differentCount).toBe(30);
  });

  it('fails loudly when a side is not in strictly increasing key order', async () => {
    await expect(merge(rows(['2'], ['1']), rows())).rejects.toThrow(/source rows are not in strictly increasing key order/);
    await expect(merge(rows(), rows(['1'], ['1']))).rejects.toThrow(/target rows are not/);
  });
});

describe('excerptPair', () => {
  it('keeps short values whole', () => {
    expect(excerptPair('abc', 'abd')).toEqual(['abc', 'abd']);
  });

  it('truncates long values that differ early to about 80 characters from the start', () => {
    const [a, b] = excerptPair('x' + 'a'.repeat(500), 'y' + 'a'.repeat(500));
    expect(a).toBe('x' + 'a'.repeat(79) + '…');
    expect(b!.startsWith('y')).toBe(true);
  });

  it('centres on the first difference deep inside long values', () => {
    const base = 'q'.repeat(10_000);
    const [a, b] = excerptPair(base + 'SOURCE' + base, base + 'TARGET' + base);
    expect(a).toBe('…' + 'q'.repeat(20) + 'SOURCE' + 'q'.repeat(54) + '…');
    expect(b).toBe('…' + 'q'.repeat(20) + 'TARGET' + 'q'.repeat(54) + '…');
  });

  it('does not split a surrogate pair at the edges', () => {
    const [a] = excerptPair('😀'.repeat(100), '😀'.repeat(99) + 'x');
    expect(a).not.toMatch(/[\uD800-\uDBFF]…$|^…[\uDC00-\uDFFF]/);
    expect(Buffer.from(a!, 'utf8').toString('utf8')).toBe(a);
  });

  it('keeps NULL as null', () => {
    expect(excerptPair(null, 'x')).toEqual([null, 'x']);
  });
});
