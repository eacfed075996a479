import { describe, it, expect } from 'vitest';
import { classifyError, backoffDelayMs, nextWaitMs, FROZEN_BACKOFF, isConnectTimeout } from '../../lib/router/retry';
import { grantCovers, assertGrantCovers } from '../../lib/router/grant';
import { ShardctlError } from '../../lib/errors';

const pgError = (code: string) => Object.assign(new Error(`pg ${code}`), { code });

describe('classifyError', () => {
  it('maps the fence SQLSTATEs to stale and frozen', () => {
    expect(classifyError(pgError('SC421'))).toBe('stale');
    expect(classifyError(pgError('SC423'))).toBe('frozen');
  });

  it('maps serialization failure and deadlock to serialization', () => {
    expect(classifyError(pgError('40001'))).toBe('serialization');
    expect(classifyError(pgError('40P01'))).toBe('serialization');
  });

  it('treats the other fence refusals and ordinary errors as other (propagated unchanged)', () => {
    for (const code of ['SC428', 'SC403', '23505', '25006', 'ECONNREFUSED']) expect(classifyError(pgError(code))).toBe('other');
    expect(classifyError(new Error('boom'))).toBe('other');
    expect(classifyError(undefined)).toBe('other');
    expect(classifyError('SC421')).toBe('other');
    expect(classifyError(new ShardctlError('Frozen', 'x'))).toBe('other');
  });

  it("maps the router's connect-timeout mark to connect (retried within the deadline)", () => {
    expect(classifyError(pgError('ConnectTimeout'))).toBe('connect');
    expect(classifyError(pgError('ConnectionLost'))).toBe('connect');
  });

  it('follows cause chains so a wrapped stale route still retries', () => {
    expect(classifyError(new Error('wrapped', { cause: pgError('SC421') }))).toBe('stale');
    expect(classifyError(new Error('a', { cause: new Error('b', { cause: pgError('40001') }) }))).toBe('serialization');
  });

  it('stops at the first string code instead of digging past it', () => {
    const outer = Object.assign(new Error('outer'), { code: '23505', cause: pgError('SC421') });
    expect(classifyError(outer)).toBe('other');
  });
});

describe('backoffDelayMs', () => {
  it('starts around the base and doubles per attempt with equal jitter', () => {
    expect(backoffDelayMs(0, FROZEN_BACKOFF, () => 0)).toBe(3); // ceiling 5 → [2.5, 5]
    expect(backoffDelayMs(0, FROZEN_BACKOFF, () => 0.999999)).toBe(5);
    expect(backoffDelayMs(1, FROZEN_BACKOFF, () => 0)).toBe(5);
    expect(backoffDelayMs(2, FROZEN_BACKOFF, () => 0.999999)).toBe(20);
  });

  it('never exceeds the cap, even for huge attempt numbers', () => {
    for (const n of [5, 10, 31, 1000, Number.MAX_SAFE_INTEGER]) {
      const d = backoffDelayMs(n, FROZEN_BACKOFF, () => 0.999999);
      expect(d).toBeLessThanOrEqual(100);
      expect(d).toBeGreaterThanOrEqual(50);
    }
  });

  it('tolerates odd attempt numbers and random values', () => {
    expect(backoffDelayMs(-3, FROZEN_BACKOFF, () => 0)).toBe(3);
    expect(backoffDelayMs(1.7, FROZEN_BACKOFF, () => 2)).toBe(10);
  });
});

describe('nextWaitMs', () => {
  it('returns undefined once the deadline has passed', () => {
    expect(nextWaitMs(0, 1000, 1000, FROZEN_BACKOFF)).toBeUndefined();
    expect(nextWaitMs(0, 1001, 1000, FROZEN_BACKOFF)).toBeUndefined();
  });

  it('never sleeps past the deadline', () => {
    expect(nextWaitMs(10, 0, 7, FROZEN_BACKOFF, () => 0.5)).toBe(7);
    expect(nextWaitMs(0, 0, 10_000, FROZEN_BACKOFF, () => 0)).toBe(3);
  });
});

describe('grants', () => {
  it('covers listed tenants and everything for *', () => {
    expect(grantCovers({ tenants: ['a', 'b'] }, 'a')).toBe(true);
    expect(grantCovers({ tenants: '*' }, 'anything')).toBe(true);
  });

  it('refuses unlisted tenants and malformed grants', () => {
    expect(grantCovers({ tenants: ['a'] }, 'b')).toBe(false);
    expect(grantCovers({ tenants: [] }, 'a')).toBe(false);
    for (const g of [undefined, null, {}, { tenants: 'a' }, { tenants: '**' }, 'a', { tenants: [['a']] }]) expect(grantCovers(g, 'a')).toBe(false);
    expect(() => assertGrantCovers({ tenants: ['a'] }, 'b')).toThrowError(expect.objectContaining({ type: 'Forbidden' }));
  });
});

describe('isConnectTimeout', () => {
  it("takes both of node-postgres's connect timeouts for one (the pool's wait and the client's own), and nothing else", () => {
    expect(isConnectTimeout(new Error('timeout exceeded when trying to connect'))).toBe(true);
    expect(isConnectTimeout(new Error('Connection terminated due to connection timeout'))).toBe(true);
    // A connection that died after it was established may have sent a statement: not this.
    expect(isConnectTimeout(new Error('Connection terminated unexpectedly'))).toBe(false);
    expect(isConnectTimeout(new Error('Query read timeout'))).toBe(false);
    expect(isConnectTimeout(undefined)).toBe(false);
  });
});
