import { describe, it, expect } from 'vitest';
import { bucketOf, routingKeyBytes, stableHash64 } from '../../lib/buckets/hash';

describe('the routing hash', () => {
  it('is the first 8 bytes of SHA-256, big-endian: the FIPS 180-2 vectors', () => {
    // SHA-256("") = e3b0c44298fc1c14..., SHA-256("abc") = ba7816bf8f01cfea...
    expect(stableHash64('')).toBe(0xe3b0c44298fc1c14n);
    expect(stableHash64('abc')).toBe(0xba7816bf8f01cfean);
    expect(stableHash64('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq')).toBe(0x248d6a61d20638b8n);
  });

  it('hashes the UTF-8 bytes of the key, not its UTF-16 code units', () => {
    // `printf 'é' | sha256sum` (the bytes c3 a9) = 4a99557e4033c353...
    expect(routingKeyBytes('é')).toEqual(Buffer.from([0xc3, 0xa9]));
    expect(stableHash64('é')).toBe(0x4a99557e4033c353n);
    expect(routingKeyBytes('😀')).toEqual(Buffer.from([0xf0, 0x9f, 0x98, 0x80]));
    expect(stableHash64('é')).not.toBe(stableHash64('e\u0301'));
  });

  it('refuses keys a PostgreSQL text value cannot hold, instead of aliasing them', () => {
    expect(() => stableHash64('a\u0000b')).toThrowError(/NUL/);
    expect(() => stableHash64('\ud83d')).toThrowError(/lone surrogate/);
    expect(() => stableHash64('x\ude00')).toThrowError(/lone surrogate/);
    expect(() => stableHash64(7 as any)).toThrowError(/is a string/);
  });

  it('spreads distinct keys evenly over the B buckets', () => {
    const counts = new Array(16).fill(0);
    for (let i = 0; i < 32_000; i++) counts[bucketOf(`user-${i}`, 16)]++;
    // 2000 expected per bucket; 5 standard deviations (≈ 217) either side.
    for (const c of counts) expect(Math.abs(c - 2000)).toBeLessThan(217);
    expect(bucketOf('anything', 1)).toBe(0);
  });

  it('refuses a bucket count outside 1..65536', () => {
    for (const b of [0, -4, 1.5, 65537, NaN]) expect(() => bucketOf('k', b)).toThrowError(/bucket count/);
  });
});
