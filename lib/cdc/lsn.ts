// PostgreSQL log sequence numbers ("X/Y" hex pairs) as exact 64-bit values. Pure: safe to import
// from workflows. Never compare LSN strings lexically: "0/9" > "0/10" as text.

const LSN_RE = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;

export const ZERO_LSN = '0/0';

export function isLsn(s: unknown): s is string {
  return typeof s === 'string' && LSN_RE.test(s);
}

export function parseLsn(s: string): bigint {
  const m = LSN_RE.exec(s);
  if (!m) throw new Error(`invalid LSN ${JSON.stringify(String(s).slice(0, 40))}: expected "X/Y" in hex`);
  return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
}

/** PostgreSQL's own spelling (%X/%X): upper-case hex, no padding. */
export function formatLsn(v: bigint): string {
  if (v < 0n || v > 0xffffffffffffffffn) throw new Error(`LSN out of range: ${v}`);
  return `${(v >> 32n).toString(16).toUpperCase()}/${(v & 0xffffffffn).toString(16).toUpperCase()}`;
}

/** The two 32-bit halves of an LSN as numbers (no BigInt: the apply loop compares LSNs per message). */
function halves(s: string): [number, number] {
  const m = LSN_RE.exec(s);
  if (!m) parseLsn(s); // throws the usual error
  return [parseInt(m![1], 16), parseInt(m![2], 16)];
}

export function compareLsn(a: string, b: string): -1 | 0 | 1 {
  const [ah, al] = halves(a);
  const [bh, bl] = halves(b);
  return ah < bh ? -1 : ah > bh ? 1 : al < bl ? -1 : al > bl ? 1 : 0;
}

export function maxLsn(a: string, b: string): string {
  return compareLsn(a, b) >= 0 ? a : b;
}

/** Bytes from b to a (a - b), clamped at zero: a lag is never negative. */
export function lsnDiffBytes(a: string, b: string): number {
  const d = parseLsn(a) - parseLsn(b);
  return d > 0n ? Number(d) : 0;
}

export function addToLsn(a: string, delta: bigint | number): string {
  return formatLsn(parseLsn(a) + BigInt(delta));
}

export function normalizeLsn(s: string): string {
  return formatLsn(parseLsn(s));
}
