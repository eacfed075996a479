import { describe, it, expect } from 'vitest';
import { assertTenantBlobPrefix, tenantBlobPrefix } from '../../lib/blobs/prefix';

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
