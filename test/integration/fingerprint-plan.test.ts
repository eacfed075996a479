// The cutover's delta fingerprint (lib/validate/fingerprint.ts fingerprintKeysSql) runs inside the
// write pause, on a target the copy has just filled: its statistics still say the unit has no rows
// there. The query must read only the rows at the given keys whatever the planner believes. The
// `IN (keys)` form it replaced planned, on such a target, a scan of all of the unit's rows with the
// keys re-parsed for each one (6.6 s for 110 keys of 30k rows), and the first cutover attempt after
// every copy of 100k rows or more overran its fence budget.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool } from 'pg';
import { randomBytes } from 'node:crypto';
import { shardPool, closePools } from '../helpers/stack';
import { listTenantTables, quoteIdent, type TenantTable } from '../../lib/shard/tables';
import { fingerprintKeysSql, fingerprintTable, fingerprintUnitKeys } from '../../lib/validate/fingerprint';

const SCHEMA = `fpplan_${randomBytes(4).toString('hex')}`;
const S = quoteIdent(SCHEMA);
const FRESH = 'fresh-unit';
const FRESH_ROWS = 20_000;

let pool: Pool;
let table: TenantTable;
let freshKeys: string[];

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Join Filter'?: number;
  Plans?: PlanNode[];
}

/** Rows the plan read from the table (every scan node on it: returned plus filtered out, times its loops). */
function rowsReadFrom(node: PlanNode, relation: string): number {
  const own = node['Relation Name'] === relation ? (node['Actual Rows'] + (node['Rows Removed by Filter'] ?? 0)) * node['Actual Loops'] : 0;
  return own + (node.Plans ?? []).reduce((n, p) => n + rowsReadFrom(p, relation), 0);
}

function joinFilterDiscards(node: PlanNode): number {
  return (node['Rows Removed by Join Filter'] ?? 0) + (node.Plans ?? []).reduce((n, p) => n + joinFilterDiscards(p), 0);
}

async function explain(keys: string[]): Promise<PlanNode> {
  const c = await pool.connect();
  try {
    await c.query('begin transaction read only');
    const r = await c.query(`explain (analyze, format json) ${fingerprintKeysSql(table, 'tenant_id')}`, [FRESH, keys]);
    return r.rows[0]['QUERY PLAN'][0].Plan as PlanNode;
  } finally {
    await c.query('rollback').catch(() => {});
    c.release();
  }
}

beforeAll(async () => {
  pool = shardPool('shard-c');
  // Autovacuum off: the statistics stay those of before the "copy", as on a target a moment after it.
  await pool.query(
    `create schema ${S};
     create table ${S}.docs (tenant_id text not null, id uuid not null default gen_random_uuid(), body text, primary key (tenant_id, id))
       with (autovacuum_enabled = false);
     insert into ${S}.docs (tenant_id, body) select 'other-' || (g % 50), 'x' from generate_series(1, 30000) g;
     analyze ${S}.docs;
     insert into ${S}.docs (tenant_id, body) select '${FRESH}', repeat('y', 200) || g from generate_series(1, ${FRESH_ROWS}) g;`,
  );
  [table] = await listTenantTables(pool, { column: 'tenant_id', schemas: [SCHEMA] });
  const k = await pool.query(`select json_build_array(tenant_id, id)::text as k from ${S}.docs where tenant_id = $1 order by id limit 110`, [FRESH]);
  freshKeys = k.rows.map((r) => r.k);
  // The premise: the planner believes the unit has (almost) no rows here.
  const est = await pool.query(`explain (format json) select * from ${S}.docs where tenant_id = $1`, [FRESH]);
  expect(est.rows[0]['QUERY PLAN'][0].Plan['Plan Rows']).toBeLessThan(FRESH_ROWS / 10);
}, 60_000);

afterAll(async () => {
  await pool?.query(`drop schema if exists ${S} cascade`);
  await closePools();
});

describe('the delta fingerprint under stale statistics', () => {
  it('reads only the rows at the keys (primary-key lookups driven by the keys), not the unit', async () => {
    const plan = await explain(freshKeys);
    expect(rowsReadFrom(plan, 'docs')).toBeLessThanOrEqual(freshKeys.length);
    expect(joinFilterDiscards(plan)).toBe(0);
  });

  it('counts each key once, only rows of the unit, and nothing for keys with no row', async () => {
    const some = freshKeys.slice(0, 40);
    const other = (await pool.query(`select json_build_array(tenant_id, id)::text as k from ${S}.docs where tenant_id <> $1 limit 5`, [FRESH])).rows.map(
      (r) => r.k,
    );
    const absent = [JSON.stringify([FRESH, '00000000-0000-4000-8000-000000000000'])];
    const fp = await fingerprintTable(pool, table, 'tenant_id', FRESH, [...some, ...some.slice(0, 10), ...other, ...absent]);
    expect(fp.rows).toBe(40);
    // The same rows, fingerprinted by a query that shares none of its key handling.
    const ref = await pool.query(
      `select md5(string_agg(row(x.body, x.id, x.tenant_id)::text, E'\\n' order by x.tenant_id::text collate "C", x.id::text collate "C")) as h
         from ${S}.docs x where x.tenant_id = $1 and x.id = any($2::uuid[])`,
      [FRESH, some.map((k) => JSON.parse(k)[1])],
    );
    expect(fp.md5).toBe(ref.rows[0].h);
  });

  it('answers a table with no changed keys as the query would, without a connection', async () => {
    // What the query says for no keys...
    const queried = await fingerprintTable(pool, table, 'tenant_id', FRESH, []);
    expect(queried).toEqual({ table: `${SCHEMA}.docs`, rows: 0, md5: '' });
    // ...is what the keyed fingerprint answers without asking: a pool that cannot connect is never used.
    const unusable = { connect: () => Promise.reject(new Error('no connection may be taken for a table without keys')) } as unknown as Pool;
    expect(await fingerprintUnitKeys(unusable, [table], 'tenant_id', FRESH, new Map())).toEqual([queried]);
    expect(await fingerprintUnitKeys(unusable, [table], 'tenant_id', FRESH, new Map([[`${SCHEMA}.docs`, []]]))).toEqual([queried]);
    await expect(fingerprintUnitKeys(unusable, [table], 'tenant_id', FRESH, new Map([[`${SCHEMA}.docs`, freshKeys.slice(0, 1)]]))).rejects.toThrow(
      /no connection may be taken/,
    );
  });
});
