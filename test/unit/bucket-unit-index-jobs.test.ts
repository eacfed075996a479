// Pure parts of a bucket unit's blob index and jobs (issue 13): which index rows a unit's statements
// address, where a key's version objects go, the shape of a dataset's jobs table, and when prepare
// names a jobs table a bucket move would leave behind.
import { describe, it, expect } from 'vitest';
import { bucketIndexScope, isVersionKey, tenantIndexScope, unitIndexScope, versionKeyOf, bucketBlobIndexDdl } from '../../lib/blobs/index-table';
import { unitBlobPrefix } from '../../lib/blobs/prefix';
import { datasetJobsTableSql } from '../../lib/jobs/worker';
import { jobsTableProblems } from '../../lib/shard/datasets';
import { datasetTables } from '../../lib/unit-rows';

const ds = { name: 'events', column: 'device_id', bucketColumn: 'bucket', buckets: 1024 };
const config = { tenant: { column: 'tenant_id', schemas: ['public'] }, datasets: [ds] };

describe("a bucket unit's blob index", () => {
  it('a unit reads its own rows: a tenant by its column, a bucket by its bucket column in its dataset’s table; a sub-unit or an unknown dataset has none', () => {
    expect(unitIndexScope(config, 'acme')).toEqual(tenantIndexScope('tenant_id', 'acme'));
    expect(unitIndexScope(config, 'acme')).toEqual({ table: 'shardctl.blob_index', columns: ['"tenant_id"'], values: ['acme'] });
    expect(unitIndexScope(config, 'bucket:events:0042')).toEqual({ table: 'shardctl.blob_index_events', columns: ['"bucket"'], values: [42] });
    expect(unitIndexScope(config, 'acme:1')).toBeUndefined();
    expect(unitIndexScope(config, 'bucket:other:0042')).toBeUndefined();
  });

  it("a route's blob names are per key: bucket and key columns, in primary-key order", () => {
    expect(bucketIndexScope(ds, 7, 'dev-1')).toEqual({ table: 'shardctl.blob_index_events', columns: ['"bucket"', '"device_id"'], values: [7, 'dev-1'] });
  });

  it("a key's version objects stay under its bucket's prefix in one folder, whatever the key holds", () => {
    const unit = 'bucket:events:0042';
    for (const key of ['dev-1', 'a/b', '..', '', 'Grüße 東京', '~x']) {
      const k = versionKeyOf(unit, 'doc/v', 'mxaayjii-598f7b2009f21fbc', key);
      expect(k.startsWith(unitBlobPrefix(unit))).toBe(true);
      const rest = k.slice(unitBlobPrefix(unit).length).split('/');
      expect(rest[0]).toBe(`~${encodeURIComponent(key)}`);
      expect(rest.slice(1).join('/')).toBe('doc/v@mxaayjii-598f7b2009f21fbc');
      expect(isVersionKey(k)).toBe(true);
    }
    expect(versionKeyOf('acme', 'doc', 'mxaayjii-598f7b2009f21fbc')).toBe('tenants/acme/doc@mxaayjii-598f7b2009f21fbc');
  });

  it("the dataset's index table is one of its tables: bucket leading the key, bound to the key by the dataset's CHECK", () => {
    const ddl = bucketBlobIndexDdl(ds);
    expect(ddl).toContain('create table if not exists shardctl.blob_index_events');
    expect(ddl).toContain('primary key ("bucket", "device_id", name)');
    expect(ddl).toContain('check ("bucket" = shardctl.bucket_of("device_id", 1024))');
    expect(datasetTables(config, { ...ds }).indexTable).toBe('shardctl.blob_index_events');
  });
});

describe("a dataset's jobs table", () => {
  it('is shaped as a dataset table: bucket leads the primary key, the CHECK binds it to the key', () => {
    const sql = datasetJobsTableSql('app.jobs', ds);
    expect(sql).toContain('create table if not exists "app"."jobs"');
    expect(sql).toContain('primary key ("bucket", id)');
    expect(sql).toContain('check ("bucket" = shardctl.bucket_of(("device_id")::text, 1024))');
    expect(sql).toContain('("bucket", state, run_at)');
    expect(() => datasetJobsTableSql('jobs', ds)).toThrow(/schema\.table/);
  });

  it('prepare names a jobs table that is not one of the dataset’s tables, and only then', () => {
    expect(jobsTableProblems({ name: 'events' }, [])).toEqual([]);
    expect(jobsTableProblems({ name: 'events', jobsTable: 'app.jobs' }, ['"app"."events"', '"app"."jobs"'])).toEqual([]);
    const p = jobsTableProblems({ name: 'events', jobsTable: 'app.jobs' }, ['"app"."events"']);
    expect(p).toHaveLength(1);
    expect(p[0]).toMatch(/jobs table app\.jobs of dataset events is not one of its tables/);
  });
});
