// Random routing keys for the hash tests (unit and stack alike): seeded, so a failure names a
// reproducible key. Every key is a valid PostgreSQL text value (no NUL, no lone surrogate) and
// mixes 1-, 2-, 3- and 4-byte UTF-8, combining marks and the odd empty or very long key.
import { prng } from '../../lib/loadgen/plan';

/** [first, last] code point ranges, each as likely as the others. */
const RANGES: Array<[number, number]> = [
  [0x01, 0x7f], // ASCII, control characters included (NUL is not a text value)
  [0x80, 0x7ff], // 2-byte: Latin-1, Greek, Cyrillic, Hebrew, Arabic
  [0x300, 0x36f], // combining marks
  [0x800, 0xd7ff], // 3-byte below the surrogates: CJK, Hangul
  [0xe000, 0xfffd], // 3-byte above them: private use, CJK compatibility, U+FFFD itself
  [0x10000, 0x10ffff], // 4-byte: emoji, historic scripts, planes 15-16
];

export function randomKeys(count: number, seed: number): string[] {
  const rnd = prng(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  const keys: string[] = ['', 'a', ' ', 'é', '😀', 'x'.repeat(100_000)];
  while (keys.length < count) {
    const roll = rnd();
    const length = roll < 0.01 ? 0 : roll < 0.0105 ? 1000 + int(20_000) : int(40);
    const cps: number[] = [];
    for (let i = 0; i < length; i++) {
      const [lo, hi] = RANGES[int(RANGES.length)];
      cps.push(lo + int(hi - lo + 1));
    }
    keys.push(String.fromCodePoint(...cps));
  }
  return keys.slice(0, count);
}
