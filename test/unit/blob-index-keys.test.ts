// Version keys of the blob index (lib/blobs/index-table.ts): every version id the router makes
// gives a key the collector recognises as a version, under the tenant's exact prefix, and names
// the application chooses are never taken for one unless they end like one (those are refused).
import { describe, it, expect } from 'vitest';
import { isVersionKey, looksLikeVersionName, newVersionId, versionKeyOf } from '../../lib/blobs/index-table';
import { assertTenantBlobPrefix } from '../../lib/blobs/prefix';

describe('blob index version keys', () => {
  it('a fresh version key is a version key under exactly tenants/<id>/, and two versions never share one', () => {
    const ids = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const v = newVersionId();
      ids.add(v);
      const key = versionKeyOf('acme', 'docs/report.pdf', v);
      expect(key).toBe(`tenants/acme/docs/report.pdf@${v}`);
      expect(isVersionKey(key)).toBe(true);
      expect(assertTenantBlobPrefix(key.slice(0, 'tenants/acme/'.length))).toBe('acme');
    }
    expect(ids.size).toBe(200);
    // Old and far-future clocks still give the same shape.
    expect(isVersionKey(versionKeyOf('acme', 'x', newVersionId(0)))).toBe(false); // "0" is shorter than 8 base-36 digits
    expect(isVersionKey(versionKeyOf('acme', 'x', newVersionId(Date.UTC(1975, 0, 1))))).toBe(true);
    expect(isVersionKey(versionKeyOf('acme', 'x', newVersionId(Date.UTC(9999, 0, 1))))).toBe(true);
  });

  it('keys the application manages are not version keys; a name ending like a version is recognised so it can be refused', () => {
    for (const key of [
      'tenants/acme/docs/6f1c0e8e-0d8a-4b6e-9a55-2f1f5c1c7d11',
      'tenants/acme/a@b',
      'tenants/acme/x@mx6bbpnw-4158cd05f3e48706/y',
      'tenants/acme/x@MX6BBPNW-4158CD05F3E48706',
    ]) {
      expect(isVersionKey(key), key).toBe(false);
    }
    expect(looksLikeVersionName(`report@${newVersionId()}`)).toBe(true);
    expect(looksLikeVersionName('report@v2')).toBe(false);
  });
});
