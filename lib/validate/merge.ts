// The merge-join at the heart of validation: two key-ordered row streams (source, target) are
// walked together; a key only in the source is missing on the target, a key only in the target
// is extra, and for a shared key every column's text is compared exactly. Streams that are not
// strictly increasing under the comparator fail loudly: that would mean the servers ordered
// keys differently and the report would be garbage. Pure (no I/O).
export type Key = string[];

export interface KeyedRow {
  key: Key;
  /** Every column's `::text` (null for SQL NULL), in `columns` order. */
  values: (string | null)[];
}

export interface ColumnDifference {
  key: Key;
  column: string;
  /** Excerpts (about 80 characters, around the first difference); null is SQL NULL. */
  source: string | null;
  target: string | null;
}

export interface MergeResult {
  sourceRows: number;
  targetRows: number;
  missing: Key[];
  extra: Key[];
  different: ColumnDifference[];
  missingCount: number;
  extraCount: number;
  /** Differing cells (row × column). */
  differentCount: number;
}

export const EXCERPT_WIDTH = 80;

/** Short forms of two differing values: the start if they differ early, else a window around the first difference. */
export function excerptPair(a: string | null, b: string | null, width = EXCERPT_WIDTH): [string | null, string | null] {
  if (a === null || b === null) return [a === null ? null : clip(a, 0, width), b === null ? null : clip(b, 0, width)];
  let i = 0;
  const n = Math.min(a.length, b.length);
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  const start = i < width - 20 ? 0 : i - 20;
  return [clip(a, start, width), clip(b, start, width)];
}

function clip(s: string, start: number, width: number): string {
  // Do not split a surrogate pair at either edge.
  if (start > 0 && isLowSurrogate(s.charCodeAt(start))) start--;
  let end = Math.min(s.length, start + width);
  if (end < s.length && isLowSurrogate(s.charCodeAt(end))) end++;
  return (start > 0 ? '…' : '') + s.slice(start, end) + (end < s.length ? '…' : '');
}

const isLowSurrogate = (c: number) => c >= 0xdc00 && c <= 0xdfff;

export async function mergeCompare(
  source: AsyncIterable<KeyedRow>,
  target: AsyncIterable<KeyedRow>,
  opts: { columns: string[]; compareKeys: (a: Key, b: Key) => number; maxReport: number },
): Promise<MergeResult> {
  const { columns, compareKeys, maxReport } = opts;
  const res: MergeResult = { sourceRows: 0, targetRows: 0, missing: [], extra: [], different: [], missingCount: 0, extraCount: 0, differentCount: 0 };
  const src = ordered(source, 'source', compareKeys);
  const tgt = ordered(target, 'target', compareKeys);
  let s = await src.next();
  let t = await tgt.next();
  while (!s.done || !t.done) {
    const c = s.done ? 1 : t.done ? -1 : compareKeys(s.value.key, t.value.key);
    if (c < 0) {
      res.sourceRows++;
      if (res.missingCount++ < maxReport) res.missing.push(s.value!.key);
      s = await src.next();
    } else if (c > 0) {
      res.targetRows++;
      if (res.extraCount++ < maxReport) res.extra.push(t.value!.key);
      t = await tgt.next();
    } else {
      res.sourceRows++;
      res.targetRows++;
      const a = s.value!.values;
      const b = t.value!.values;
      for (let i = 0; i < columns.length; i++) {
        if (a[i] === b[i]) continue;
        if (res.differentCount++ < maxReport) {
          const [x, y] = excerptPair(a[i], b[i]);
          res.different.push({ key: s.value!.key, column: columns[i], source: x, target: y });
        }
      }
      s = await src.next();
      t = await tgt.next();
    }
  }
  return res;
}

async function* ordered(rows: AsyncIterable<KeyedRow>, side: string, cmp: (a: Key, b: Key) => number): AsyncGenerator<KeyedRow> {
  let prev: Key | undefined;
  for await (const r of rows) {
    if (prev && cmp(prev, r.key) >= 0) {
      throw new Error(`validation: ${side} rows are not in strictly increasing key order at (${r.key.join(', ')}) after (${prev.join(', ')})`);
    }
    prev = r.key;
    yield r;
  }
}
