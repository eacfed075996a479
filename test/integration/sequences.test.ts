// Sequences follow the tenant (lib/shard/sequences.ts) against a real shard: serial, identity and
// nextval-default columns are found from the catalog; each is advanced past the unit's largest
// value, and a sequence already ahead (the shard's own tenants drew from it) never moves back.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool } from 'pg';
import { randomBytes } from 'node:crypto';
import { shardPool, closePools, uniq } from '../helpers/stack';
import { listTenantTables, quoteIdent, TenantTable } from '../../lib/shard/tables';
import { advanceSequencesForUnit, feedingSequences } from '../../lib/shard/sequences';

const SCHEMA = `seq_${randomBytes(4).toString('hex')}`;
const S = quoteIdent(SCHEMA);
let pool: Pool;
let tables: TenantTable[];

beforeAll(async () => {
  pool = shardPool('shard-b');
  await pool.query(`create schema ${S};
    create table ${S}.serials (tenant_id text not null, id bigserial, v text, primary key (tenant_id, id));
    create table ${S}.idents (tenant_id text not null, id bigint generated always as identity, primary key (tenant_id, id));
    create sequence ${S}.shared_seq;
    create table ${S}.defaults (tenant_id text not null, k int not null, ref bigint not null default nextval('${SCHEMA}.shared_seq'), primary key (tenant_id, k));
    create table ${S}.plain (tenant_id text not null, id bigint not null, primary key (tenant_id, id));`);
  tables = await listTenantTables(pool, { column: 'tenant_id', schemas: [SCHEMA] });
});

afterAll(async () => {
  await pool?.query(`drop schema if exists ${S} cascade`);
  await closePools();
});

async function seedUnit(unit: string, n: number) {
  await pool.query(`insert into ${S}.serials (tenant_id, id, v) select $1, g, 'v' from generate_series(1, $2) g`, [unit, n]);
  await pool.query(`insert into ${S}.idents (tenant_id, id) overriding system value select $1, g from generate_series(1, $2) g`, [unit, n]);
  await pool.query(`insert into ${S}.defaults (tenant_id, k, ref) select $1, g, g * 10 from generate_series(1, $2) g`, [unit, n]);
}

const nextOf = async (seq: string) => Number((await pool.query(`select nextval($1::regclass)::int as v`, [seq])).rows[0].v);

describe('sequences that feed tenant tables', () => {
  it('finds serial, identity and nextval-default sequences from the catalog, and none for a plain column', async () => {
    const f = await feedingSequences(pool, tables);
    expect(f.map((x) => [x.table, x.column])).toEqual([
      [`${S}."defaults"`, 'ref'],
      [`${S}."idents"`, 'id'],
      [`${S}."serials"`, 'id'],
    ]);
    expect(f.find((x) => x.table === `${S}."defaults"`)!.sequence).toBe(`${SCHEMA}.shared_seq`);
  });

  it('advances each sequence past the unit values, so the next draw is max + 1', async () => {
    const unit = uniq('seq-up');
    await seedUnit(unit, 50);
    const adv = await advanceSequencesForUnit(pool, tables, 'tenant_id', unit);
    expect(adv.map((a) => [a.column, a.unitMax, a.nextAfter])).toEqual([
      ['ref', '500', '501'],
      ['id', '50', '51'],
      ['id', '50', '51'],
    ]);
    // The unit's next insert, without explicit ids, succeeds.
    await pool.query(`insert into ${S}.serials (tenant_id, v) values ($1, 'next')`, [unit]);
    await pool.query(`insert into ${S}.idents (tenant_id) values ($1)`, [unit]);
    expect((await pool.query(`select max(id)::int as m from ${S}.serials where tenant_id = $1`, [unit])).rows[0].m).toBe(51);
  });

  it('never moves a sequence backwards when the shard already drew past the unit values', async () => {
    const unit = uniq('seq-behind');
    await seedUnit(unit, 20);
    for (const f of await feedingSequences(pool, tables)) await pool.query(`select setval($1::regclass, 100000)`, [f.sequence]);
    const adv = await advanceSequencesForUnit(pool, tables, 'tenant_id', unit);
    expect(adv.every((a) => a.nextBefore === '100001' && a.nextAfter === '100001')).toBe(true);
    for (const f of await feedingSequences(pool, tables)) expect(await nextOf(f.sequence)).toBe(100001);
  });

  it('leaves every sequence alone for a unit with no rows', async () => {
    const before = await Promise.all((await feedingSequences(pool, tables)).map((f) => pool.query(`select last_value::text, is_called from ${f.sequence}`)));
    const adv = await advanceSequencesForUnit(pool, tables, 'tenant_id', uniq('seq-none'));
    expect(adv.every((a) => a.unitMax === null && a.nextAfter === a.nextBefore)).toBe(true);
    const after = await Promise.all((await feedingSequences(pool, tables)).map((f) => pool.query(`select last_value::text, is_called from ${f.sequence}`)));
    expect(after.map((r) => r.rows[0])).toEqual(before.map((r) => r.rows[0]));
  });
});
