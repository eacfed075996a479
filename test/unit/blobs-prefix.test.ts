import { describe, it, expect } from 'vitest';
import { assertTenantBlobPrefix, assertUnitBlobPrefix, tenantBlobPrefix, unitBlobPrefix } from '../../lib/blobs/prefix';

describe('tenant blob prefixes', () => {
  it('builds tenants/<id>/ for a valid tenant id and refuses an invalid one', () => {
    expect(tenantBlobPrefix('acme-1_x')).toBe('tenants/acme-1_x/');
    expect(() => tenantBlobPrefix('Acme')).toThrow(expect.objectContaining({ type: 'InvalidInput' }));
  });

  it('accepts exactly tenants/<valid id>/ and returns the id', () => {
    expect(assertTenantBlobPrefix('tenants/acme/')).toBe('acme');
    expect(assertTenantBlobPrefix('tenants/0_a-b/')).toBe('0_a-b');
  });

  it.each([
    '',
    '/',
    'tenants',
    'tenants/',
    'tenants//',
    'tenants/acme',
    '/tenants/acme/',
    'tenants/acme/sub/',
    'tenants/Acme/',
    'tenants/../',
    'tenants/*/',
    'tenants/acme /',
    'tenants/-acme/',
    `tenants/${'a'.repeat(64)}/`,
    'other/acme/',
  ])('refuses %j with InvalidInput', (p) => {
    expect(() => assertTenantBlobPrefix(p)).toThrow(expect.objectContaining({ type: 'InvalidInput' }));
  });

  it('refuses non-string prefixes', () => {
    expect(() => assertTenantBlobPrefix(undefined)).toThrow(expect.objectContaining({ type: 'InvalidInput' }));
    expect(() => assertTenantBlobPrefix(42)).toThrow(expect.objectContaining({ type: 'InvalidInput' }));
  });
});

describe('unit blob prefixes (tenants and bucket units)', () => {
  it('builds datasets/<dataset>/<n>/ for a bucket unit, n as its name spells it, and tenants/<id>/ for a tenant', () => {
    expect(unitBlobPrefix('bucket:events:0042')).toBe('datasets/events/0042/');
    expect(unitBlobPrefix('bucket:ev_1:7')).toBe('datasets/ev_1/7/');
    expect(unitBlobPrefix('acme')).toBe('tenants/acme/');
    expect(() => unitBlobPrefix('acme:1')).toThrow(expect.objectContaining({ type: 'InvalidInput' }));
  });

  it('reads back the unit of exactly one prefix of either kind', () => {
    for (const unit of ['bucket:events:0042', 'bucket:ev_1:7', 'acme', '0_a-b']) expect(assertUnitBlobPrefix(unitBlobPrefix(unit))).toBe(unit);
  });

  it('refuses every other shape under datasets/ (shallower, deeper, unnamed, uppercase, signed, too long) with InvalidInput', () => {
    for (const p of [
      'datasets/',
      'datasets/events/',
      'datasets/events/42',
      'datasets/events/42/x/',
      'datasets/events/42/x',
      'datasets/Events/42/',
      'datasets/events/-1/',
      'datasets/events/123456/',
      'datasets//42/',
    ])
      expect(() => assertUnitBlobPrefix(p), p).toThrow(expect.objectContaining({ type: 'InvalidInput' }));
  });

  it.each([
    'datasets/',
    'datasets/events/',
    'datasets/events/42',
    'datasets/events/42/x/',
    'datasets/Events/42/',
    'datasets/events/-1/',
    'datasets/events/123456/',
    'datasets/../42/',
    'datasets//42/',
    '/datasets/events/42/',
    'tenants/acme',
    'other/acme/',
  ])('refuses %j with InvalidInput', (p) => {
    expect(() => assertUnitBlobPrefix(p)).toThrow(expect.objectContaining({ type: 'InvalidInput' }));
  });
});
