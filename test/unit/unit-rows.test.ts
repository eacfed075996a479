// The unit row predicate (lib/unit-rows.ts): what every row-selecting statement of a move means
// for a tenant and for a bucket, and the refusals for names of no movable kind.
import { describe, it, expect } from 'vitest';
import { unitRows, unitRowPredicateSql, bucketUnitSqlExpr, bucketCheckSql, validateUnitName, unitFromOptions, type UnitRowsConfig } from '../../lib/unit-rows';
import { validateTenantId } from '../../lib/ids';

const config: UnitRowsConfig = {
  tenant: { column: 'tenant_id', schemas: ['public', 'app'], tables: undefined },
  datasets: [
    { name: 'events', column: 'device_id', buckets: 1024, bucketColumn: 'bucket' },
    { name: 'small', column: 'k', buckets: 10, bucketColumn: 'b"x', tables: ['app.small'] },
  ],
};

describe('unit row predicate', () => {
  it('a tenant selects its tenant tables by tenant column = id', () => {
    const r = unitRows(config, 'acme');
    expect(r).toMatchObject({ kind: 'tenant', column: 'tenant_id', value: 'acme', tables: { column: 'tenant_id', schemas: ['public', 'app'] } });
    expect(unitRowPredicateSql(r, 'x')).toBe(`x."tenant_id" = 'acme'`);
  });

  it('a bucket selects its dataset tables by bucket column = n, never tables with the tenant column', () => {
    const r = unitRows(config, 'bucket:events:0042');
    expect(r).toMatchObject({ kind: 'bucket', column: 'bucket', value: '42' });
    expect(r.tables).toEqual({
      column: 'bucket',
      alsoColumn: 'device_id',
      withoutColumn: 'tenant_id',
      schemas: ['public', 'app'],
      tables: undefined,
      indexTable: 'shardctl.blob_index_events',
    });
    expect(unitRowPredicateSql(r)).toBe(`"bucket" = 42`);
    const s = unitRows(config, 'bucket:small:7');
    expect(s.tables.tables).toEqual(['app.small']);
    expect(unitRowPredicateSql(s, 't')).toBe(`t."b""x" = 7`);
  });

  it('refuses a bucket of an unknown dataset, out of range, or not in its canonical padding', () => {
    expect(() => unitRows(config, 'bucket:orders:0001')).toThrow(/not in config.datasets/);
    expect(() => unitRows(config, 'bucket:events:1024')).toThrow(/not a bucket of events/);
    expect(() => unitRows(config, 'bucket:events:42')).toThrow(/not a bucket of events \(B = 1024: bucket:events:0000 .. bucket:events:1023\)/);
    expect(() => unitRows(config, 'bucket:small:07')).toThrow(/not a bucket of small/);
  });

  it("refuses a sub-unit whose split is not given (K is the directory's), and names of no kind", () => {
    expect(() => unitRows(config, 'acme:1')).toThrow(/split sub-unit, and the split of acme is not known/);
    expect(() => unitRows(config, 'Acme')).toThrow(/invalid tenant id/);
    expect(() => validateUnitName('bucket:events')).toThrow(/invalid tenant id|invalid unit/);
    expect(validateUnitName('bucket:events:0042')).toBe('bucket:events:0042');
    expect(() => validateUnitName('x'.repeat(64))).toThrow(/longer than 63/);
  });

  it('the row unit expression builds the padded unit name from the bucket column, every name qualified', () => {
    expect(bucketUnitSqlExpr({ name: 'events', buckets: 1024, bucketColumn: 'bucket' }, 'new')).toBe(
      `('bucket:events:'::pg_catalog.text operator(pg_catalog.||) pg_catalog.lpad((new."bucket")::pg_catalog.text, 4, '0'))`,
    );
    expect(bucketUnitSqlExpr({ name: 'small', buckets: 10, bucketColumn: 'b' }, 'old')).toContain(`lpad((old."b")::pg_catalog.text, 1, '0')`);
    expect(bucketCheckSql({ column: 'device_id', buckets: 1024, bucketColumn: 'bucket' })).toBe(
      `check ("bucket" = shardctl.bucket_of(("device_id")::text, 1024))`,
    );
  });

  it('move commands take exactly one of --tenant and --unit', () => {
    expect(unitFromOptions({ tenant: 'acme' }, validateTenantId)).toBe('acme');
    expect(unitFromOptions({ unit: 'bucket:events:0001' }, validateTenantId)).toBe('bucket:events:0001');
    expect(() => unitFromOptions({}, validateTenantId)).toThrow(/exactly one/);
    expect(() => unitFromOptions({ tenant: 'a', unit: 'b' }, validateTenantId)).toThrow(/exactly one/);
    expect(() => unitFromOptions({ tenant: 'bucket:events:0001' }, validateTenantId)).toThrow(/invalid tenant id/);
    // With the config, a bucket must be a configured dataset's, in its canonical name.
    expect(() => unitFromOptions({ unit: 'bucket:events:1' }, validateTenantId, config)).toThrow(/not a bucket of events/);
    expect(() => unitFromOptions({ unit: 'bucket:orders:1' }, validateTenantId, config)).toThrow(/not in config.datasets/);
    expect(unitFromOptions({ unit: 'bucket:events:0001' }, validateTenantId, config)).toBe('bucket:events:0001');
  });
});
