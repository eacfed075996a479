import { describe, it, expect } from 'vitest';
import { compareUtf8, keyComparator, keyOrderFor, orderExpression } from '../../lib/validate/keys';

const sign = (n: number) => Math.sign(n);

describe('key ordering for validation', () => {
  it('compares strings in UTF-8 byte order (what COLLATE "C" sorts by), not UTF-16 order', () => {
    const samples = ['', 'a', 'B', 'é', 'e', '😀', '\uE000', '\uFFFD', 'ab', 'a\u007f', 'Z', '_', "O'Brien", '😀a', '\uFF21'];
    for (const a of samples) {
      for (const b of samples) {
        expect(sign(compareUtf8(a, b)), `${JSON.stringify(a)} vs ${JSON.stringify(b)}`).toBe(sign(Buffer.compare(Buffer.from(a), Buffer.from(b))));
      }
    }
    // The case UTF-16 gets wrong: a supplementary char sorts after U+E000 in UTF-8.
    expect(compareUtf8('😀', '\uE000')).toBeGreaterThan(0);
    expect('😀' < '\uE000').toBe(true);
  });

  it('orders integer keys numerically and text keys bytewise', () => {
    const cmp = keyComparator([
      { name: 'tenant_id', type: 'text', order: 'bytes' },
      { name: 'n', type: 'bigint', order: 'int' },
    ]);
    expect(cmp(['t', '2'], ['t', '10'])).toBe(-1);
    expect(cmp(['t', '-5'], ['t', '3'])).toBe(-1);
    expect(cmp(['t', '9223372036854775807'], ['t', '9223372036854775806'])).toBe(1);
    expect(cmp(['B', '1'], ['a', '0'])).toBe(-1);
    expect(cmp(['t', '7'], ['t', '7'])).toBe(0);
  });

  it('orders collatable and unknown types by text under "C", integers and uuids natively', () => {
    expect(keyOrderFor('integer')).toBe('int');
    expect(keyOrderFor('uuid')).toBe('uuid');
    expect(keyOrderFor('character varying(20)')).toBe('bytes');
    expect(keyOrderFor('timestamp with time zone')).toBe('bytes');
    expect(orderExpression({ name: 'My"Key', type: 'text', order: 'bytes' })).toBe('("My""Key"::text) collate "C"');
    expect(orderExpression({ name: 'id', type: 'uuid', order: 'uuid' })).toBe('"id"');
  });
});
