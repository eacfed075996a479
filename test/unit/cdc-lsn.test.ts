import { describe, it, expect } from 'vitest';
import { addToLsn, compareLsn, formatLsn, isLsn, lsnDiffBytes, maxLsn, normalizeLsn, parseLsn } from '../../lib/cdc/lsn';

describe('lsn', () => {
  it('compares numerically, not as text', () => {
    expect(compareLsn('0/9', '0/10')).toBe(-1);
    expect(compareLsn('1/0', '0/FFFFFFFF')).toBe(1);
    expect(compareLsn('16/B374D848', '16/b374d848')).toBe(0);
    expect(compareLsn('0/0', '0/1')).toBe(-1);
  });

  it('parses and formats in PostgreSQL spelling', () => {
    expect(parseLsn('1/0')).toBe(1n << 32n);
    expect(formatLsn(0x16b374d848n)).toBe('16/B374D848');
    expect(normalizeLsn('0/000000a0')).toBe('0/A0');
    expect(formatLsn(parseLsn('FFFFFFFF/FFFFFFFF'))).toBe('FFFFFFFF/FFFFFFFF');
  });

  it('rejects malformed positions', () => {
    for (const bad of ['', '0', '0/', '/0', 'x/1', '1/2/3', '123456789/0', ' 0/1']) {
      expect(isLsn(bad)).toBe(false);
      expect(() => parseLsn(bad)).toThrow(/invalid LSN/);
    }
  });

  it('measures lag in bytes, never negative, and carries across the high word', () => {
    expect(lsnDiffBytes('1/10', '0/FFFFFFF0')).toBe(0x20);
    expect(lsnDiffBytes('0/10', '0/20')).toBe(0);
    expect(addToLsn('0/FFFFFFFF', 1)).toBe('1/0');
    expect(addToLsn('1/0', -1n)).toBe('0/FFFFFFFF');
    expect(maxLsn('0/9', '0/10')).toBe('0/10');
  });
});
