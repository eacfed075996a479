// Validation against the real stack (shard-a → shard-b): a converged copy validates clean, and
// each kind of divergence — a corrupted column, a missing row, an extra row, a difference deep
// inside a TOASTed value, numeric scale — is reported exactly (table, key, column, direction).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool } from 'pg';
import { randomBytes } from 'node:crypto';
import { shardPool, closePools, uniq } from '../helpers/stack';
import { typedFixture } from '../helpers/typed-fixture';
import { listTenantTables, quoteIdent, TenantTable } from '../../lib/shard/tables';
import { copyTenant } from '../../lib/copy';
import { compareTenantRows, validateTenant, formatMismatch } from '../../lib/validate';

const TENANT_COL = 'tenant_id';
const SCHEMA = `ValT_${randomBytes(4).toString('hex')}`;
const S = quoteIdent(SCHEMA);

let source: Pool;
let target: Pool;
let tables: TenantTable[];

// ---- fixture: same DDL on both shards, fenced like a prepared shard --------------------------

const { DDL, AWKWARD_KEYS, asReplica, seedTenant, installBoth, dropBoth } = typedFixture(SCHEMA);

const moveIds: string[] = [];

/** A tenant seeded on the source and copied to the target (the state validation starts from). */
async function copiedTenant(prefix: string, parents: number, opts: { big?: boolean; tagged?: boolean } = {}): Promise<string> {
  const tenant = uniq(prefix);
  await seedTenant(source, tenant, parents, opts);
  const moveId = uniq('move-valtest');
  moveIds.push(moveId);
  await copyTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant, moveId, batchRows: 40 });
  return tenant;
}

const uuidOf = async (tenant: string, i: number) =>
  (await source.query(`select md5($1::text || ':' || $2::text)::uuid::text as id`, [tenant, i])).rows[0].id as string;

const table = (name: string) => tables.find((t) => t.name === name)!;

beforeAll(async () => {
  source = shardPool('shard-a');
  target = shardPool('shard-b');
  tables = await installBoth(source, target);
});

afterAll(async () => {
  await dropBoth([source, target], moveIds);
  await closePools();
});

describe('validateTenant', () => {
  it('reports a converged copy ok, every table, every row counted on both sides', async () => {
    const tenant = await copiedTenant('clean', 90, { big: true, tagged: true });
    const report = await validateTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant });
    expect(report.ok).toBe(true);
    expect(report.tables.map((t) => [t.table, t.sourceRows, t.targetRows])).toEqual([
      [`${SCHEMA}.parents`, 90, 90],
      [`${SCHEMA}.children`, 180, 180],
      [`${SCHEMA}.tagged`, AWKWARD_KEYS.length, AWKWARD_KEYS.length],
    ]);
    expect(formatMismatch(report)).toBe(
      [`${SCHEMA}.parents: 90 rows match`, `${SCHEMA}.children: 180 rows match`, `${SCHEMA}.tagged: ${AWKWARD_KEYS.length} rows match`].join('\n'),
    );
  });

  it('reports a tenant present on neither side as ok with zero rows', async () => {
    const report = await validateTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: uniq('nobody') });
    expect(report.ok).toBe(true);
    expect(report.tables.every((t) => t.sourceRows === 0 && t.targetRows === 0)).toBe(true);
  });

  it('reports a corrupted target column as exactly that table, key and column', async () => {
    const tenant = await copiedTenant('corrupt', 30);
    const id = await uuidOf(tenant, 17);
    await asReplica(target, (q) => q(`update ${S}.parents set "MixedCase" = 'corrupted' where tenant_id = $1 and id = $2`, [tenant, id]));
    const report = await validateTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant });
    expect(report.ok).toBe(false);
    const [parents, children, tagged] = report.tables;
    expect(parents).toMatchObject({ missingCount: 0, extraCount: 0, differentCount: 1, sourceRows: 30, targetRows: 30 });
    expect(parents.different).toEqual([{ key: [tenant, id], column: 'MixedCase', source: `Hello "17" it's a \\ back\nslash\t`, target: 'corrupted' }]);
    expect(children.differentCount + children.missingCount + children.extraCount).toBe(0);
    expect(tagged.differentCount + tagged.missingCount + tagged.extraCount).toBe(0);
    expect(formatMismatch(report).split('\n')).toContain(
      `${SCHEMA}.parents key (${tenant}, ${id}) column MixedCase: source "Hello \\"17\\" it's a \\\\ back\\nslash\\t" vs target "corrupted"`,
    );
  });

  it('tells numeric 1.0 from 1.00 and reports a changed source value in the generated column too', async () => {
    const tenant = await copiedTenant('scale', 12);
    const [id1, id3] = [await uuidOf(tenant, 1), await uuidOf(tenant, 3)];
    // i = 1 was stored as 1.00; make the target 1.0 (numerically equal, textually not).
    await asReplica(target, (q) => q(`update ${S}.parents set exact = 1.0 where tenant_id = $1 and id = $2`, [tenant, id1]));
    // A source change after the copy: amount and the generated "doubled" both differ.
    await asReplica(source, (q) => q(`update ${S}.parents set amount = 5.5 where tenant_id = $1 and id = $2`, [tenant, id3]));
    const r = await compareTenantRows({ source, target, table: table('parents'), tenantColumn: TENANT_COL, unit: tenant });
    expect(r.different).toEqual(
      [
        { key: [tenant, id1], column: 'exact', source: '1.00', target: '1.0' },
        { key: [tenant, id3], column: 'amount', source: '5.500000', target: '3.703701' },
        { key: [tenant, id3], column: 'doubled', source: '11.000000', target: '7.407402' },
        // merge order: by key (uuid), then column order within a row
      ].sort((a, b) => (a.key[1] < b.key[1] ? -1 : a.key[1] > b.key[1] ? 1 : 0)),
    );
  });

  it('reports a row deleted on the target as missing and a row only on the target as extra', async () => {
    const tenant = await copiedTenant('dir', 20, { tagged: true });
    const pid = await uuidOf(tenant, 5);
    await asReplica(target, async (q) => {
      await q(`delete from ${S}.children where tenant_id = $1 and parent_id = $2 and "Seq" = 2`, [tenant, pid]);
      await q(`insert into ${S}.tagged (tenant_id, "Key", moods) values ($1, 'only-on-target', null)`, [tenant]);
    });
    const report = await validateTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant });
    const [parents, children, tagged] = report.tables;
    expect(parents.missingCount + parents.extraCount + parents.differentCount).toBe(0);
    expect(children).toMatchObject({ missing: [[tenant, pid, '2']], extra: [], missingCount: 1, sourceRows: 40, targetRows: 39 });
    expect(tagged).toMatchObject({ missing: [], extra: [[tenant, 'only-on-target']], extraCount: 1, targetRows: AWKWARD_KEYS.length + 1 });
    const lines = formatMismatch(report).split('\n');
    expect(lines).toContain(`${SCHEMA}.children key (${tenant}, ${pid}, 2) missing on target (present on source)`);
    expect(lines).toContain(`${SCHEMA}.tagged key (${tenant}, only-on-target) extra on target (absent on source)`);
  });

  // The verdict, one kind of divergence at a time: a report that counted a missing or an extra
  // row but still said ok would let the move proceed.
  it('fails the verdict when the only divergence is a row missing on the target', async () => {
    const tenant = await copiedTenant('onlymissing', 10);
    const pid = await uuidOf(tenant, 3);
    await asReplica(target, (q) => q(`delete from ${S}.children where tenant_id = $1 and parent_id = $2 and "Seq" = 1`, [tenant, pid]));
    const report = await validateTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant });
    expect(report.tables.map((t) => [t.missingCount, t.extraCount, t.differentCount])).toEqual([
      [0, 0, 0],
      [1, 0, 0],
      [0, 0, 0],
    ]);
    expect(report.ok).toBe(false);
    expect(formatMismatch(report).split('\n')).toContain(`${SCHEMA}.children key (${tenant}, ${pid}, 1) missing on target (present on source)`);
  });

  it('fails the verdict when the only divergence is a row extra on the target', async () => {
    const tenant = await copiedTenant('onlyextra', 10);
    await asReplica(target, (q) => q(`insert into ${S}.tagged (tenant_id, "Key", moods) values ($1, 'stray', null)`, [tenant]));
    const report = await validateTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant });
    expect(report.tables.map((t) => [t.missingCount, t.extraCount, t.differentCount])).toEqual([
      [0, 0, 0],
      [0, 0, 0],
      [0, 1, 0],
    ]);
    expect(report.ok).toBe(false);
    expect(formatMismatch(report).split('\n')).toContain(`${SCHEMA}.tagged key (${tenant}, stray) extra on target (absent on source)`);
  });

  it('shows a difference at the end of a large TOASTed value as a short excerpt around it', async () => {
    const tenant = await copiedTenant('toast', 6, { big: true });
    const id = await uuidOf(tenant, 2);
    await asReplica(target, (q) => q(`update ${S}.parents set big = left(big, -1) || '#' where tenant_id = $1 and id = $2`, [tenant, id]));
    const r = await compareTenantRows({ source, target, table: table('parents'), tenantColumn: TENANT_COL, unit: tenant });
    expect(r.differentCount).toBe(1);
    const d = r.different[0];
    expect(d).toMatchObject({ key: [tenant, id], column: 'big' });
    expect(d.source!.startsWith('…')).toBe(true);
    expect(d.target!.endsWith('#')).toBe(true);
    expect(d.source!.length).toBeLessThanOrEqual(82);
    expect(d.source!.slice(0, -1)).toBe(d.target!.slice(0, -1));
  });

  it('lists at most maxReport mismatches per kind but counts them all', async () => {
    const tenant = await copiedTenant('many', 40);
    await asReplica(target, (q) => q(`update ${S}.parents set qty = qty + 1000 where tenant_id = $1`, [tenant]));
    const r = await compareTenantRows({ source, target, table: table('parents'), tenantColumn: TENANT_COL, unit: tenant, maxReport: 5 });
    expect(r.differentCount).toBe(40);
    expect(r.different).toHaveLength(5);
    expect(formatMismatch(r).split('\n')[0]).toBe(
      `${SCHEMA}.parents: 0 missing on target, 0 extra on target, 40 different values (source 40 rows, target 40 rows; first 5 shown)`,
    );
  });

  it('merges text keys in byte order on both servers (no false missing/extra across collations)', async () => {
    const tenant = await copiedTenant('keys', 1, { tagged: true });
    const r = await compareTenantRows({ source, target, table: table('tagged'), tenantColumn: TENANT_COL, unit: tenant });
    expect(r).toMatchObject({ sourceRows: AWKWARD_KEYS.length, targetRows: AWKWARD_KEYS.length, missingCount: 0, extraCount: 0, differentCount: 0 });
  });

  it('copies and validates text keys whose collation differs between the servers', async () => {
    const ddl = (coll: string) =>
      `create table ${S}.coll (tenant_id text not null, "Key" text collate "${coll}" not null, v int, primary key (tenant_id, "Key"))`;
    await source.query(ddl('C'));
    await target.query(ddl('en-US-x-icu'));
    const [coll] = await listTenantTables(source, { column: TENANT_COL, schemas: [SCHEMA], tables: ['coll'] });
    const tenant = uniq('coll');
    await asReplica(source, async (q) => {
      for (const [i, k] of AWKWARD_KEYS.entries()) await q(`insert into ${S}.coll values ($1, $2, $3)`, [tenant, k, i]);
    });
    const native = async (p: Pool) => (await p.query(`select "Key" from ${S}.coll where tenant_id = $1 order by "Key"`, [tenant])).rows.map((r) => r.Key);
    const moveId = uniq('move-valtest');
    moveIds.push(moveId);
    const copied = await copyTenant({ source, target, tables: [coll], tenantColumn: TENANT_COL, unit: tenant, moveId, batchRows: 3 });
    expect(copied.rowsCopied).toBe(AWKWARD_KEYS.length);
    // The servers really do order these keys differently...
    expect(await native(target)).not.toEqual(await native(source));
    // ...yet the merge sees the same sequence on both sides.
    const r = await compareTenantRows({ source, target, table: coll, tenantColumn: TENANT_COL, unit: tenant });
    expect(r).toMatchObject({ sourceRows: AWKWARD_KEYS.length, targetRows: AWKWARD_KEYS.length, missingCount: 0, extraCount: 0, differentCount: 0 });
  });

  it('refuses an invalid unit', async () => {
    await expect(compareTenantRows({ source, target, table: table('parents'), tenantColumn: TENANT_COL, unit: "a' or '1'='1" })).rejects.toMatchObject({
      type: 'InvalidInput',
    });
  });
});
