// Chunked validation against the real stack (shard-a → shard-b): a unit of 110k rows is split
// into key ranges hashed on both servers, and every kind of planted difference — a missing row
// (a range's last key), a changed value (the next range's first key), NULL against the empty
// string both ways, a change in the last range, a row only on the target past the source's last
// key — is reported exactly, by key and column, while the same instant written in another time
// zone and read by a target whose sessions default to other output settings counts as equal.
// Also: a partitioned table, a target whose columns sit in another physical order, and a text key
// (compared as one range).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import pg, { type Pool } from 'pg';
import { createHash, randomBytes } from 'node:crypto';
import { shardByName } from '../../lib/config';
import { testConfig, shardPool, closePools, uniq } from '../helpers/stack';
import { listTenantTables, quoteIdent, TenantTable } from '../../lib/shard/tables';
import { compareTenantRows, formatMismatch } from '../../lib/validate';

const SCHEMA = `valchunk_${randomBytes(4).toString('hex')}`;
const S = quoteIdent(SCHEMA);
const ROWS = 110_000;
/** Target sessions default to other output settings, as ALTER ROLE ... SET would give them. */
const SKEWED = ['TimeZone=Asia/Kathmandu', 'DateStyle=SQL,DMY', 'IntervalStyle=sql_standard', 'extra_float_digits=-3'];

let source: Pool;
let target: Pool;
let targetAdmin: Pool;
let tables: TenantTable[];
const table = (name: string) => tables.find((t) => t.name === name)!;

const WIDE_DDL = (cols: string[]) => {
  const types: Record<string, string> = {
    tenant_id: 'text not null',
    id: 'bigint not null',
    a: 'text not null',
    b: 'text',
    at: 'timestamptz not null',
    span: 'interval',
    n: 'integer',
  };
  return `create table ${S}.wide (${cols.map((c) => `${quoteIdent(c)} ${types[c]}`).join(', ')}, primary key (tenant_id, id))`;
};
const WIDE_ROWS = `
  insert into ${S}.wide (tenant_id, id, a, b, at, span, n)
  select $1::text, g, md5(g::text), case when g % 3 = 0 then null else 'b' || g end,
         timestamptz '2026-03-29 01:30:00.123456+00' + g * interval '7 minutes 3.5 seconds', g * interval '1 min 2.25 s', g % 1000
    from generate_series(1, $2::int) g`;

beforeAll(async () => {
  source = shardPool('shard-a');
  targetAdmin = shardPool('shard-b');
  target = new pg.Pool({ connectionString: shardByName(testConfig(), 'shard-b').dsn, max: 4, options: SKEWED.map((s) => `-c ${s}`).join(' ') });
  const common = (ddlWide: string) => `
    create schema ${S};
    ${ddlWide};
    create table ${S}.parted (tenant_id text not null, id bigint not null, v text, primary key (tenant_id, id)) partition by range (id);
    create table ${S}.parted_low partition of ${S}.parted for values from (minvalue) to (10000);
    create table ${S}.parted_high partition of ${S}.parted for values from (10000) to (maxvalue);
    create table ${S}.named (tenant_id text not null, "Key" text not null, v int, primary key (tenant_id, "Key"));`;
  await source.query(common(WIDE_DDL(['tenant_id', 'id', 'a', 'b', 'at', 'span', 'n'])));
  // The target's columns in another physical order: the comparison names them.
  await targetAdmin.query(common(WIDE_DDL(['n', 'span', 'b', 'id', 'at', 'tenant_id', 'a'])));
  tables = await listTenantTables(source, { column: 'tenant_id', schemas: [SCHEMA] });
  const targetTables = await listTenantTables(targetAdmin, { column: 'tenant_id', schemas: [SCHEMA] });
  const names = (ts: TenantTable[]) => ts.find((t) => t.name === 'wide')!.columns.map((c) => c.name);
  expect(names(targetTables)).not.toEqual(names(tables));
});

afterAll(async () => {
  await source?.query(`drop schema if exists ${S} cascade`);
  await targetAdmin?.query(`drop schema if exists ${S} cascade`);
  await target?.end();
  await closePools();
});

async function both(sql: string, params: unknown[]) {
  await source.query(sql, params);
  await targetAdmin.query(sql, params);
}

describe('chunked validation', () => {
  it('reports exactly the planted keys of a 110k-row unit and nothing else, reading only the ranges that differ', async () => {
    const unit = uniq('chunks');
    await both(WIDE_ROWS, [unit, ROWS]);
    const w = `${S}.wide`;
    const q = (sql: string, params: unknown[] = []) => targetAdmin.query(sql, [unit, ...params]);
    // Ranges of 20,000 source rows: (..20000], (20000..40000], ..., (100000..] (the last, 10,000 rows).
    await q(`delete from ${w} where tenant_id = $1 and id = 40000`); // the last key of a range
    await q(`update ${w} set a = 'changed' where tenant_id = $1 and id = 40001`); // the first key of the next
    await q(`update ${w} set b = null where tenant_id = $1 and id = 77777`); // source '' (below), target NULL
    await source.query(`update ${w} set b = '' where tenant_id = $1 and id = 77777`, [unit]);
    await q(`update ${w} set b = '' where tenant_id = $1 and id = 77778`); // source NULL, target ''
    await source.query(`update ${w} set b = null where tenant_id = $1 and id = 77778`, [unit]);
    await q(`update ${w} set n = -1 where tenant_id = $1 and id = 109999`); // in the last range
    await q(`insert into ${w} (tenant_id, id, a, at) values ($1, 200000, 'stray', now())`); // past the source's last key
    // The same instant, written on the target in another zone: equal, however a session renders it.
    await q(`update ${w} set at = '2026-05-01 18:15:00+05:45' where tenant_id = $1 and id = 55555`);
    await source.query(`update ${w} set at = '2026-05-01 12:30:00+00' where tenant_id = $1 and id = 55555`, [unit]);
    const rendered = async (p: Pool) => (await p.query(`select at::text from ${w} where tenant_id = $1 and id = 55555`, [unit])).rows[0].at;
    expect(await rendered(target)).not.toBe(await rendered(source));

    const r = await compareTenantRows({ source, target, table: table('wide'), tenantColumn: 'tenant_id', unit });
    expect(r.ranges).toEqual({ hashed: 6, read: 4 });
    expect(r).toMatchObject({ sourceRows: ROWS, targetRows: ROWS, missingCount: 1, extraCount: 1, differentCount: 4 });
    expect(r.missing).toEqual([[unit, '40000']]);
    expect(r.extra).toEqual([[unit, '200000']]);
    expect(r.different).toEqual([
      { key: [unit, '40001'], column: 'a', source: createHash('md5').update('40001').digest('hex'), target: 'changed' },
      { key: [unit, '77777'], column: 'b', source: '', target: null },
      { key: [unit, '77778'], column: 'b', source: null, target: '' },
      { key: [unit, '109999'], column: 'n', source: '999', target: '-1' },
    ]);
  });

  it('validates a partitioned table across its partitions and range boundaries, clean first, then exactly the planted keys', async () => {
    const unit = uniq('parted');
    await both(`insert into ${S}.parted select $1::text, g, 'v' || g from generate_series(1, 20000) g`, [unit]);
    const input = { source, target, table: table('parted'), tenantColumn: 'tenant_id', unit, chunkRows: 3000 };
    const clean = await compareTenantRows(input);
    expect(clean).toMatchObject({ sourceRows: 20000, targetRows: 20000, missingCount: 0, extraCount: 0, differentCount: 0, ranges: { hashed: 7, read: 0 } });
    // 9999 and 10000 sit in different partitions but in the same range (9000..12000].
    await targetAdmin.query(`update ${S}.parted set v = 'x' where tenant_id = $1 and id = 9999`, [unit]);
    await targetAdmin.query(`delete from ${S}.parted where tenant_id = $1 and id = 10000`, [unit]);
    await targetAdmin.query(`insert into ${S}.parted values ($1, 25000, 'stray')`, [unit]);
    const r = await compareTenantRows(input);
    expect(r).toMatchObject({ sourceRows: 20000, targetRows: 20000, missing: [[unit, '10000']], extra: [[unit, '25000']], ranges: { hashed: 7, read: 2 } });
    expect(r.different).toEqual([{ key: [unit, '9999'], column: 'v', source: 'v9999', target: 'x' }]);
  });

  it('compares a table keyed by text as one range, still reporting exactly', async () => {
    const unit = uniq('named');
    await both(`insert into ${S}.named select $1::text, 'k' || g, g from generate_series(1, 5000) g`, [unit]);
    await targetAdmin.query(`update ${S}.named set v = 0 where tenant_id = $1 and "Key" = 'k42'`, [unit]);
    await targetAdmin.query(`delete from ${S}.named where tenant_id = $1 and "Key" = 'k4999'`, [unit]);
    const r = await compareTenantRows({ source, target, table: table('named'), tenantColumn: 'tenant_id', unit, chunkRows: 100 });
    expect(r).toMatchObject({ sourceRows: 5000, targetRows: 4999, missing: [[unit, 'k4999']], ranges: { hashed: 1, read: 1 } });
    expect(r.different).toEqual([{ key: [unit, 'k42'], column: 'v', source: '42', target: '0' }]);
    expect(formatMismatch(r).split('\n')[0]).toBe(
      `${SCHEMA}.named: 1 missing on target, 0 extra on target, 1 different values (source 5000 rows, target 4999 rows)`,
    );
  });
});
