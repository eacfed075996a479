// Ordered top-k across shards: each shard returns its rows already sorted (and limited) by the
// same keys, and a k-way merge takes the first k overall. The merge compares values the way
// PostgreSQL sorted them (numbers numerically, int8 and numeric exactly, text by code point
// under COLLATE "C" (lib/validate/keys), NULL greatest, NaN above every number), and a run that is not sorted
// under that comparator fails loudly instead of yielding a silently wrong top-k. Pure (no I/O).
import { escapeIdentifier } from 'pg';
import { invalidInput } from '../errors';
import { compareKeyPart, compareUtf8 } from '../validate/keys';

export interface OrderKey {
  /** A column of the statement's result, as the result names it. */
  column: string;
  descending?: boolean;
}

/** `"score desc, id"`, one key, or a list of either. */
export type OrderSpec = string | OrderKey | readonly (string | OrderKey)[];

/** How a column's values compare in the merge. */
export type CompareKind = 'number' | 'bigint' | 'decimal' | 'boolean' | 'text' | 'time';

export interface TypedOrderKey {
  column: string;
  descending: boolean;
  kind: CompareKind;
}

/** Parses an order spec into keys; throws InvalidInput (one line) on anything malformed. */
export function parseOrderBy(spec: OrderSpec): OrderKey[] {
  const parts = typeof spec === 'string' ? spec.split(',') : Array.isArray(spec) ? spec : [spec as OrderKey];
  const keys = parts.map((p: string | OrderKey) => (typeof p === 'string' ? parseOrderTerm(p) : checkKey(p)));
  if (keys.length === 0) throw invalidInput('orderBy names no column');
  return keys;
}

function parseOrderTerm(term: string): OrderKey {
  const m = /^\s*([^\s,]+)(?:\s+(asc|desc))?\s*$/i.exec(term);
  if (!m) throw invalidInput(`invalid order-by term ${JSON.stringify(term.slice(0, 80))}: use column [asc|desc], separated by commas`);
  return checkKey({ column: m[1], descending: m[2]?.toLowerCase() === 'desc' });
}

function checkKey(k: OrderKey): OrderKey {
  if (!k || typeof k.column !== 'string' || k.column.length === 0 || k.column.length > 63 || k.column.includes('\0')) {
    throw invalidInput(`invalid order-by column ${JSON.stringify(String(k?.column).slice(0, 80))}`);
  }
  return { column: k.column, descending: !!k.descending };
}

// PostgreSQL type oids (pg_type) the merge can compare, and whether they take COLLATE "C".
const KINDS: ReadonlyMap<number, { kind: CompareKind; collatable: boolean }> = new Map([
  [21, { kind: 'number', collatable: false }], // int2
  [23, { kind: 'number', collatable: false }], // int4
  [26, { kind: 'number', collatable: false }], // oid
  [700, { kind: 'number', collatable: false }], // float4
  [701, { kind: 'number', collatable: false }], // float8
  [20, { kind: 'bigint', collatable: false }], // int8
  [1700, { kind: 'decimal', collatable: false }], // numeric
  [16, { kind: 'boolean', collatable: false }], // bool
  [25, { kind: 'text', collatable: true }], // text
  [1043, { kind: 'text', collatable: true }], // varchar
  [19, { kind: 'text', collatable: true }], // name
  [2950, { kind: 'text', collatable: false }], // uuid: byte order = lower-case hex order
  [1082, { kind: 'time', collatable: false }], // date
  [1114, { kind: 'time', collatable: false }], // timestamp
  [1184, { kind: 'time', collatable: false }], // timestamptz
]);

/** The merge's view of a result column type, or undefined when it cannot compare it. */
export function compareKindOf(typeOid: number): { kind: CompareKind; collatable: boolean } | undefined {
  return KINDS.get(typeOid);
}

/** The ORDER BY list a shard sorts by, so that its order is the merge's order. */
export function orderBySql(keys: readonly TypedOrderKey[], collatable: readonly boolean[], alias: string): string {
  return keys.map((k, i) => `${alias}.${escapeIdentifier(k.column)}${collatable[i] ? ' collate "C"' : ''}${k.descending ? ' desc' : ''}`).join(', ');
}

/** Ascending comparison of two non-null values of one kind. */
export function compareNonNull(kind: CompareKind, a: unknown, b: unknown): number {
  switch (kind) {
    case 'number':
      return compareWithNaN(Number(a), Number(b));
    case 'bigint':
      return compareKeyPart('int', String(a), String(b));
    case 'decimal':
      return compareDecimalText(String(a), String(b));
    case 'boolean':
      return Number(a === true || a === 't') - Number(b === true || b === 't');
    case 'text':
      return compareUtf8(String(a), String(b));
    case 'time':
      return compareWithNaN(timeValue(a), timeValue(b));
  }
}

/** Compares rows on the keys: NULL is greater than any value (PostgreSQL's default), desc reverses. */
export function rowComparator(keys: readonly TypedOrderKey[]): (a: Record<string, unknown>, b: Record<string, unknown>) => number {
  return (a, b) => {
    for (const k of keys) {
      const x = a[k.column];
      const y = b[k.column];
      const xNull = x === null || x === undefined;
      const yNull = y === null || y === undefined;
      const c = xNull || yNull ? Number(xNull) - Number(yNull) : compareNonNull(k.kind, x, y);
      if (c !== 0) return k.descending ? -c : c;
    }
    return 0;
  };
}

function compareWithNaN(x: number, y: number): number {
  // PostgreSQL sorts NaN above every other number (and equal to itself).
  if (Number.isNaN(x) || Number.isNaN(y)) return Number(Number.isNaN(x)) - Number(Number.isNaN(y));
  return x < y ? -1 : x > y ? 1 : 0;
}

function timeValue(v: unknown): number {
  if (v instanceof Date) return v.getTime();
  if (typeof v === 'number') return v; // node-pg gives ±Infinity for 'infinity'
  if (v === 'infinity') return Number.POSITIVE_INFINITY;
  if (v === '-infinity') return Number.NEGATIVE_INFINITY;
  return new Date(String(v)).getTime();
}

/** Exact order of two numeric texts as PostgreSQL prints them ("-12.50", "NaN", "Infinity"). */
export function compareDecimalText(a: string, b: string): number {
  const x = decimalParts(a);
  const y = decimalParts(b);
  if (x.rank !== y.rank) return x.rank < y.rank ? -1 : 1;
  if (x.rank !== 1 && x.rank !== -1) return 0; // zero, ±Infinity, NaN: equal within their rank
  const c = compareMagnitude(x, y);
  return x.rank === 1 ? c : -c;
}

interface DecimalParts {
  /** -3 -Infinity, -1 negative, 0 zero, 1 positive, 3 Infinity, 4 NaN. */
  rank: number;
  int: string;
  frac: string;
}

function decimalParts(s: string): DecimalParts {
  const t = s.trim();
  if (t === 'NaN') return { rank: 4, int: '', frac: '' };
  if (t === 'Infinity') return { rank: 3, int: '', frac: '' };
  if (t === '-Infinity') return { rank: -3, int: '', frac: '' };
  const m = /^([+-])?(\d*)(?:\.(\d*))?$/.exec(t);
  if (!m) throw new Error(`not a numeric value: ${JSON.stringify(s.slice(0, 40))}`);
  const int = m[2].replace(/^0+/, '');
  const frac = (m[3] ?? '').replace(/0+$/, '');
  if (!int && !frac) return { rank: 0, int, frac };
  return { rank: m[1] === '-' ? -1 : 1, int, frac };
}

function compareMagnitude(x: DecimalParts, y: DecimalParts): number {
  if (x.int.length !== y.int.length) return x.int.length < y.int.length ? -1 : 1;
  if (x.int !== y.int) return x.int < y.int ? -1 : 1;
  if (x.frac === y.frac) return 0;
  return x.frac < y.frac ? -1 : 1; // digit strings without trailing zeros: a prefix is smaller
}

export class UnsortedRunError extends Error {
  constructor(
    readonly run: number,
    readonly index: number,
  ) {
    super(`run ${run} is not sorted under the merge's order at row ${index}`);
  }
}

/**
 * Merges runs that are each sorted under `cmp` into the first `limit` items overall (all when
 * undefined), each tagged with its run. Ties keep run order. Throws UnsortedRunError when a run
 * is out of order at a row the merge looks at.
 */
export function mergeSortedRuns<T>(runs: readonly (readonly T[])[], cmp: (a: T, b: T) => number, limit?: number): { run: number; item: T }[] {
  const total = runs.reduce((n, r) => n + r.length, 0);
  const want = limit === undefined ? total : Math.min(limit, total);
  const pos = runs.map(() => 0);
  // A binary min-heap of run indices, keyed by each run's current head.
  const before = (r: number, s: number) => {
    const c = cmp(runs[r][pos[r]], runs[s][pos[s]]);
    return c < 0 || (c === 0 && r < s);
  };
  const heap: number[] = [];
  const siftUp = (i: number) => {
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(heap[i], heap[p])) return;
      [heap[i], heap[p]] = [heap[p], heap[i]];
      i = p;
    }
  };
  const siftDown = (i: number) => {
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < heap.length && before(heap[l], heap[m])) m = l;
      if (r < heap.length && before(heap[r], heap[m])) m = r;
      if (m === i) return;
      [heap[i], heap[m]] = [heap[m], heap[i]];
      i = m;
    }
  };
  runs.forEach((run, r) => {
    if (run.length > 0) {
      heap.push(r);
      siftUp(heap.length - 1);
    }
  });
  const out: { run: number; item: T }[] = [];
  while (out.length < want) {
    const r = heap[0];
    const item = runs[r][pos[r]++];
    out.push({ run: r, item });
    if (pos[r] < runs[r].length) {
      if (cmp(item, runs[r][pos[r]]) > 0) throw new UnsortedRunError(r, pos[r]);
      siftDown(0);
    } else {
      heap[0] = heap[heap.length - 1];
      heap.pop();
      siftDown(0);
    }
  }
  return out;
}
