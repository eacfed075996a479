// Comparisons do not depend on a server's settings (DESIGN.md §4): the same rows on two shards
// whose sessions default to a different TimeZone, DateStyle, IntervalStyle, extra_float_digits
// and bytea_output, in tables whose columns sit in a different physical order, fingerprint and
// validate equal; a real one-value difference is still found by both.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import pg, { type Pool } from 'pg';
import { randomBytes } from 'node:crypto';
import { shardByName } from '../../lib/config';
import { testConfig, shardPool, closePools, uniq } from '../helpers/stack';
import { listTenantTables, quoteIdent, TenantTable } from '../../lib/shard/tables';
import { fingerprintTable, fingerprintDiff, validateTenant } from '../../lib/validate';

const SCHEMA = `fp_${randomBytes(4).toString('hex')}`;
const S = quoteIdent(SCHEMA);
/** Session defaults of the target's connections, as ALTER ROLE/DATABASE ... SET would give them. */
const SKEWED = ['TimeZone=Pacific/Chatham', 'DateStyle=SQL,DMY', 'IntervalStyle=sql_standard', 'extra_float_digits=-3', 'bytea_output=escape'];

let source: Pool;
let target: Pool;
let targetAdmin: Pool;
let sourceTables: TenantTable[];
let targetTables: TenantTable[];

const ROWS = `
  select $1::text, g::bigint, timestamptz '2026-03-29 01:30:00.123456+00' + g * interval '7 hours 3 minutes',
         interval '1 year 2 mons 3 days 04:05:06.789' * g, 1 / (g + 0.1)::float8, pg_catalog.decode(md5(g::text), 'hex'),
         date '2026-12-31' - g, (g * 1.5)::real
    from generate_series(1, 40) g`;

beforeAll(async () => {
  source = shardPool('shard-a');
  targetAdmin = shardPool('shard-b');
  target = new pg.Pool({
    connectionString: shardByName(testConfig(), 'shard-b').dsn,
    max: 4,
    options: SKEWED.map((s) => `-c ${s}`).join(' '),
  });
  const cols = {
    tenant_id: 'text not null',
    id: 'bigint not null',
    at: 'timestamptz not null',
    span: 'interval',
    ratio: 'float8',
    raw: 'bytea',
    day: 'date',
    approx: 'real',
  } as const;
  const ddl = (order: (keyof typeof cols)[]) =>
    `create schema ${S}; create table ${S}.events (${order.map((c) => `${quoteIdent(c)} ${cols[c]}`).join(', ')}, primary key (tenant_id, id))`;
  await source.query(ddl(['tenant_id', 'id', 'at', 'span', 'ratio', 'raw', 'day', 'approx']));
  await targetAdmin.query(ddl(['raw', 'approx', 'span', 'id', 'day', 'tenant_id', 'ratio', 'at']));
  const opts = { column: 'tenant_id', schemas: [SCHEMA] };
  sourceTables = await listTenantTables(source, opts);
  targetTables = await listTenantTables(targetAdmin, opts);
  expect(sourceTables[0].columns.map((c) => c.name)).not.toEqual(targetTables[0].columns.map((c) => c.name));
});

afterAll(async () => {
  await source?.query(`drop schema if exists ${S} cascade`);
  await targetAdmin?.query(`drop schema if exists ${S} cascade`);
  await target?.end();
  await closePools();
});

async function seed(unit: string) {
  const ins = `insert into ${S}.events (tenant_id, id, at, span, ratio, raw, day, approx) ${ROWS}`;
  await source.query(ins, [unit]);
  await targetAdmin.query(ins, [unit]);
}

describe('comparisons under different server settings and column order', () => {
  it('the skewed target session really renders values differently (the test can fail)', async () => {
    const q = `select at::text, span::text, ratio::text, raw::text from ${S}.events where tenant_id = $1 and id = 3`;
    const unit = uniq('fp-probe');
    await seed(unit);
    const [a, b] = await Promise.all([source.query(q, [unit]), target.query(q, [unit])]);
    for (const c of ['at', 'span', 'ratio', 'raw']) expect(b.rows[0][c]).not.toBe(a.rows[0][c]);
  });

  it('fingerprints identical rows equal on both shards, whichever catalog names the columns', async () => {
    const unit = uniq('fp-same');
    await seed(unit);
    for (const tables of [sourceTables, targetTables]) {
      const a = await fingerprintTable(source, tables[0], 'tenant_id', unit);
      const b = await fingerprintTable(target, tables[0], 'tenant_id', unit);
      expect(a.rows).toBe(40);
      expect(fingerprintDiff([a], [b])).toEqual([]);
    }
  });

  it('still finds one changed value under the skewed settings', async () => {
    const unit = uniq('fp-diff');
    await seed(unit);
    await targetAdmin.query(`update ${S}.events set at = at + interval '1 microsecond' where tenant_id = $1 and id = 17`, [unit]);
    const a = await fingerprintTable(source, sourceTables[0], 'tenant_id', unit);
    const b = await fingerprintTable(target, sourceTables[0], 'tenant_id', unit);
    expect(fingerprintDiff([a], [b])).toEqual([`${SCHEMA}.events: same row count (40) but contents differ`]);
  });

  it('row-by-row validation agrees: equal rows validate clean, one changed value is reported by key and column', async () => {
    const unit = uniq('fp-val');
    await seed(unit);
    const clean = await validateTenant({ source, target, tables: sourceTables, tenantColumn: 'tenant_id', unit });
    expect(clean.ok).toBe(true);
    expect(clean.tables[0].sourceRows).toBe(40);
    await targetAdmin.query(`update ${S}.events set raw = '\\x00' where tenant_id = $1 and id = 5`, [unit]);
    const dirty = await validateTenant({ source, target, tables: sourceTables, tenantColumn: 'tenant_id', unit });
    expect(dirty.ok).toBe(false);
    expect(dirty.tables[0].differentCount).toBe(1);
  });

  it('leaves the pooled session settings as they were (settings are transaction-local)', async () => {
    const unit = uniq('fp-leak');
    await seed(unit);
    await fingerprintTable(target, sourceTables[0], 'tenant_id', unit);
    const c = await target.connect();
    try {
      expect((await c.query('show timezone')).rows[0].TimeZone).toBe('Pacific/Chatham');
    } finally {
      c.release();
    }
  });
});
