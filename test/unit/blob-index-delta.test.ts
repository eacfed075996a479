// The bounded final blob delta reads the changed blob names out of the stream's delta keys
// (lib/blobs/index-delta.ts): JSON arrays of the key's values in primary-key order.
import { describe, it, expect } from 'vitest';
import { blobNamesOfDeltaKeys } from '../../lib/blobs/index-delta';

describe('blobNamesOfDeltaKeys', () => {
  it('takes the name by its place in the primary key, whatever the tenant column is called', () => {
    expect(blobNamesOfDeltaKeys(['["acme","docs/a"]', '["acme","ünï/b c"]'], ['tenant_id', 'name'])).toEqual(['docs/a', 'ünï/b c']);
    expect(blobNamesOfDeltaKeys(['["docs/a","acme"]'], ['name', 'org'])).toEqual(['docs/a']);
  });

  it('refuses a primary key without name and a key it cannot read, instead of syncing nothing', () => {
    expect(() => blobNamesOfDeltaKeys(['["acme","a"]'], ['tenant_id', 'key'])).toThrow(/without name/);
    expect(() => blobNamesOfDeltaKeys(['not json'], ['tenant_id', 'name'])).toThrow();
    expect(() => blobNamesOfDeltaKeys(['["acme"]'], ['tenant_id', 'name'])).toThrow(/unreadable/);
  });
});
