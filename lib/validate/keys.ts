// How validation orders primary keys so that both servers stream rows in the same order and
// this process can merge them. A collatable key column (text, varchar, ...) sorts differently
// under different collations (and glibc versions), so it is ordered by its bytes:
// `col::text COLLATE "C"`, compared here as UTF-8 bytes. Integers keep their native order
// (index-friendly) and compare as BigInt; uuid's native order equals its text order. Pure.
import { escapeIdentifier } from 'pg';
export type KeyOrder = 'int' | 'uuid' | 'bytes';

export interface KeyColumn {
  name: string;
  type: string;
  order: KeyOrder;
}

const INT_TYPES = new Set(['smallint', 'integer', 'bigint']);

export function keyOrderFor(type: string): KeyOrder {
  if (INT_TYPES.has(type)) return 'int';
  if (type === 'uuid') return 'uuid';
  return 'bytes';
}

/** The ORDER BY expression for a key column (identical on both servers). */
export function orderExpression(col: KeyColumn, alias?: string): string {
  // Qualified by the table alias: an unqualified name in ORDER BY would bind to the select
  // list's `col::text` output column first and sort integers as text.
  const q = alias ? `${alias}.${escapeIdentifier(col.name)}` : escapeIdentifier(col.name);
  return col.order === 'bytes' ? `(${q}::text) collate "C"` : q;
}

/** Byte order of UTF-8, which is what COLLATE "C" sorts by (JS `<` on strings is UTF-16 order). */
export function compareUtf8(a: string, b: string): number {
  // Fast path: UTF-16 and UTF-8 order agree unless a surrogate pair meets a BMP char >= U+E000.
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    if (x < 0xd800 && y < 0xd800) return x - y;
    return Buffer.compare(Buffer.from(a.slice(i), 'utf8'), Buffer.from(b.slice(i), 'utf8'));
  }
  return a.length - b.length;
}

export function compareKeyPart(order: KeyOrder, a: string, b: string): number {
  if (order === 'int') {
    const x = BigInt(a);
    const y = BigInt(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  return compareUtf8(a, b);
}

/** Compares two keys (text values in key-column order) in the order orderExpression produces. */
export function keyComparator(cols: KeyColumn[]): (a: string[], b: string[]) => number {
  return (a, b) => {
    for (let i = 0; i < cols.length; i++) {
      const c = compareKeyPart(cols[i].order, a[i], b[i]);
      if (c !== 0) return c < 0 ? -1 : 1;
    }
    return 0;
  };
}
