// Bulk copy against the real stack (shard-a → shard-b): rows converge byte-exact for awkward
// types, a copy interrupted after N batches resumes without re-copying or losing rows, rows
// already on the target turn the direct COPY into the upsert path (found at the start, or by a
// unique violation mid-copy), batches are sized in bytes and read off the key index, the move's
// own sessions never fire the write audit, other tenants are never touched, and the batched
// delete removes exactly one tenant.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool, PoolClient } from 'pg';
import { randomBytes } from 'node:crypto';
import { shardPool, closePools, uniq, testConfig } from '../helpers/stack';
import { openPool } from '../../lib/connections';
import { shardByName } from '../../lib/config';
import { inTransaction } from '../../lib/pg';
import { installWriteAudit, writeAuditSchemaSql } from '../../lib/shard/write-audit';
import { REPLICA_ROLE_SQL, SOURCE_PLAN_SQL, batchKeyQuery, copyOutSql } from '../../lib/copy/sql';
import { typedFixture } from '../helpers/typed-fixture';
import { quoteIdent, TenantTable } from '../../lib/shard/tables';
import {
  copyTenant,
  copyTenantTable,
  copyProgress,
  clearCopyProgress,
  deleteTenantRows,
  estimateRows,
  chooseCopyFormat,
  STABLE_TEXT_SETTINGS_SQL,
} from '../../lib/copy';
import { validateTenant } from '../../lib/validate';

const TENANT_COL = 'tenant_id';
const SCHEMA = `CopyT_${randomBytes(4).toString('hex')}`;
const S = quoteIdent(SCHEMA);

let source: Pool;
let target: Pool;
let tables: TenantTable[];
const moveIds: string[] = [];

// ---- fixture: same DDL on both shards, fenced like a prepared shard --------------------------

const { DDL, AWKWARD_KEYS, asReplica, seedTenant, installBoth, dropBoth } = typedFixture(SCHEMA);

/** Every row of a tenant as the text of every column (bytea and big text also by md5), key-ordered bytewise. */
async function dumpTenant(pool: Pool, table: string, tenant: string): Promise<string[][]> {
  const c = await pool.connect();
  try {
    await c.query('begin');
    await c.query(STABLE_TEXT_SETTINGS_SQL);
    const extra = table === 'parents' ? ', md5(raw), md5(big), octet_length(big)::text' : '';
    const r = await c.query({
      text: `select t::text${extra} from ${S}.${table} t where tenant_id = $1 order by t::text collate "C"`,
      values: [tenant],
      rowMode: 'array',
    });
    await c.query('commit');
    return r.rows;
  } finally {
    c.release();
  }
}

/** A digest of everything a tenant has in every fixture table (to prove "untouched"). */
async function tenantDigest(pool: Pool, tenant: string): Promise<string> {
  const parts: string[] = [];
  for (const t of ['parents', 'children', 'tagged']) parts.push(JSON.stringify(await dumpTenant(pool, t, tenant)));
  return parts.join('\n');
}

async function countRows(pool: Pool, table: string, tenant: string): Promise<number> {
  const r = await pool.query(`select count(*)::int as n from ${S}.${table} where tenant_id = $1`, [tenant]);
  return r.rows[0].n;
}

/** The copy of one tenant's `parents` from source to target, as a move would run it. */
function parentsCopy(unit: string, moveId: string) {
  return { source, target, table: tables[0], tenantColumn: TENANT_COL, unit, moveId };
}

function newMoveId() {
  const id = uniq('move-copytest');
  moveIds.push(id);
  return id;
}

beforeAll(async () => {
  source = shardPool('shard-a');
  target = shardPool('shard-b');
  tables = await installBoth(source, target);
});

afterAll(async () => {
  await dropBoth([source, target], moveIds);
  await closePools();
});

// ---- tests ------------------------------------------------------------------------------------

describe('copyTenant', () => {
  it('orders tables parents first and picks text COPY only for the enum-array table', async () => {
    expect(tables.map((t) => t.name)).toEqual(['parents', 'children', 'tagged']);
    expect((await chooseCopyFormat(source, tables[0])).format).toBe('binary');
    expect((await chooseCopyFormat(source, tables[1])).format).toBe('binary');
    const tagged = await chooseCopyFormat(source, tables[2]);
    expect(tagged.format).toBe('text');
    expect(tagged.reasons.join()).toMatch(/moods/);
  });

  it('copies a tenant into a fenced target and every column round-trips byte-exact', async () => {
    const tenant = uniq('acme');
    await seedTenant(source, tenant, 120, { big: true, tagged: true });
    // The big values really are out-of-line and uncompressed on the source.
    const toast = await source.query(
      `select pg_column_size(big) as size, pg_column_compression(big) as comp from ${S}.parents where tenant_id = $1 and big is not null`,
      [tenant],
    );
    expect(toast.rows).toHaveLength(2);
    for (const r of toast.rows) {
      expect(r.size).toBeGreaterThan(200_000);
      expect(r.comp).toBeNull();
    }

    const res = await copyTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant, moveId: newMoveId(), batchRows: 25 });
    expect(res.tables.map((t) => [t.table, t.rowsCopied])).toEqual([
      [`${SCHEMA}.parents`, 120],
      [`${SCHEMA}.children`, 240],
      [`${SCHEMA}.tagged`, AWKWARD_KEYS.length],
    ]);
    expect(res.tables[0].batches).toBe(5); // 4 full batches + the short one that marks it done
    expect(res.tables.map((t) => t.path)).toEqual(['direct', 'direct', 'direct']); // nothing was there: straight into the tables

    for (const t of ['parents', 'children', 'tagged']) {
      const [a, b] = [await dumpTenant(source, t, tenant), await dumpTenant(target, t, tenant)];
      expect(b.length).toBeGreaterThan(0);
      expect(b).toEqual(a); // includes the generated column, recomputed on the target
    }
    expect((await target.query(`select "Key" from ${S}.tagged where tenant_id = $1`, [tenant])).rows.map((r) => r.Key).sort()).toEqual(
      [...AWKWARD_KEYS].sort(),
    );
    const report = await validateTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant });
    expect(report.ok).toBe(true);
    expect(await estimateRows(source, tables[1], TENANT_COL, tenant)).toBe(240);
  });

  it('resumes after an interruption from its checkpoint: no row copied twice or lost, checkpoint monotone', async () => {
    const tenant = uniq('resume');
    await seedTenant(source, tenant, 230);
    const moveId = newMoveId();
    const seen: number[] = [];
    const crash = new Error('fault point after-copy-batch');
    await expect(
      copyTenantTable({
        source,
        target,
        table: tables[0],
        tenantColumn: TENANT_COL,
        unit: tenant,
        moveId,
        batchRows: 50,
        onBatch: (p) => {
          seen.push(p.rowsCopied);
          if (seen.length === 2) throw crash;
        },
      }),
    ).rejects.toBe(crash);
    const [cp] = await copyProgress(target, moveId);
    expect(cp).toMatchObject({ table: `${SCHEMA}.parents`, rowsCopied: 100, batches: 2, done: false });
    expect(await countRows(target, 'parents', tenant)).toBe(100);

    const resumed = await copyTenant({
      source,
      target,
      tables,
      tenantColumn: TENANT_COL,
      unit: tenant,
      moveId,
      batchRows: 50,
      onBatch: (p) => {
        if (p.table === `${SCHEMA}.parents`) seen.push(p.rowsCopied);
      },
    });
    expect(seen).toEqual([50, 100, 150, 200, 230]);
    // The target holds only rows up to the checkpoint: the resume stays on the direct path.
    expect(resumed.tables[0]).toMatchObject({ rowsCopied: 230, batches: 3, path: 'direct' });
    expect(await countRows(target, 'parents', tenant)).toBe(230);
    expect(await dumpTenant(target, 'parents', tenant)).toEqual(await dumpTenant(source, 'parents', tenant));
    expect(await dumpTenant(target, 'children', tenant)).toEqual(await dumpTenant(source, 'children', tenant));

    // A finished copy returns at once from its checkpoint.
    const again = await copyTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant, moveId, batchRows: 50 });
    expect(again.tables.map((t) => t.batches)).toEqual([0, 0, 0]);
    expect(again.tables.map((t) => t.rowsCopied)).toEqual([230, 460, 0]);
    expect((await copyProgress(target, moveId)).every((p) => p.done)).toBe(true);
  });

  it('stops at an abort between batches, keeping the committed batch, and resumes', async () => {
    const tenant = uniq('abort');
    await seedTenant(source, tenant, 60);
    const moveId = newMoveId();
    const ac = new AbortController();
    const base = { source, target, table: tables[0], tenantColumn: TENANT_COL, unit: tenant, moveId, batchRows: 20 };
    await expect(copyTenantTable({ ...base, signal: ac.signal, onBatch: () => ac.abort(new Error('cancelled by test')) })).rejects.toThrow('cancelled by test');
    expect((await copyProgress(target, moveId))[0]).toMatchObject({ rowsCopied: 20, done: false });
    expect(await countRows(target, 'parents', tenant)).toBe(20);
    const done = await copyTenantTable(base);
    expect(done).toMatchObject({ rowsCopied: 60, done: true });
    expect(await dumpTenant(target, 'parents', tenant)).toEqual(await dumpTenant(source, 'parents', tenant));
  });

  it('overwrites a stale target row on re-copy (upsert) after its checkpoint is cleared', async () => {
    const tenant = uniq('upsert');
    await seedTenant(source, tenant, 10);
    const moveId = newMoveId();
    const base = { source, target, table: tables[0], tenantColumn: TENANT_COL, unit: tenant, moveId, batchRows: 100 };
    await copyTenantTable(base);
    await asReplica(target, (q) => q(`update ${S}.parents set "MixedCase" = 'stale', exact = 1.0000 where tenant_id = $1`, [tenant]));
    expect(await clearCopyProgress(target, moveId)).toBe(1);
    expect(await copyTenantTable(base)).toMatchObject({ path: 'upsert', rowsCopied: 10 });
    expect(await dumpTenant(target, 'parents', tenant)).toEqual(await dumpTenant(source, 'parents', tenant));
  });

  it('a row that reaches the target past the checkpoint mid-copy turns the batch to the upsert path: redone once, nothing lost or counted twice', async () => {
    const tenant = uniq('collide');
    await seedTenant(source, tenant, 90);
    const moveId = newMoveId();
    // A row of the second batch (source key order), as the target would get it from another writer.
    const planted = (await source.query(`select id::text from ${S}.parents where tenant_id = $1 order by tenant_id, id offset 45 limit 1`, [tenant])).rows[0]
      .id as string;
    const seen: number[] = [];
    const res = await copyTenantTable({
      ...parentsCopy(tenant, moveId),
      batchRows: 30,
      onBatch: async (p) => {
        seen.push(p.rowsCopied);
        if (seen.length === 1) {
          await asReplica(target, (q) => q(`insert into ${S}.parents (tenant_id, id, "MixedCase") values ($1, $2, 'stale')`, [tenant, planted]));
        }
      },
    });
    expect(res).toMatchObject({ path: 'upsert', rowsCopied: 90, batches: 3 });
    expect(seen).toEqual([30, 60, 90]);
    expect((await copyProgress(target, moveId))[0]).toMatchObject({ rowsCopied: 90, batches: 3, done: true });
    expect(await dumpTenant(target, 'parents', tenant)).toEqual(await dumpTenant(source, 'parents', tenant));
  });

  it('sizes batches in bytes without a row cap, and checkpoints the bytes with the rows', async () => {
    const tenant = uniq('bytes');
    await seedTenant(source, tenant, 3000);
    const moveId = newMoveId();
    const batchBytes = 100_000;
    const batches: { rows: number; bytes: number }[] = [];
    let prev = { rowsCopied: 0, bytesCopied: 0 };
    const res = await copyTenantTable({
      ...parentsCopy(tenant, moveId),
      batchBytes,
      onBatch: (p) => {
        batches.push({ rows: p.rowsCopied - prev.rowsCopied, bytes: p.bytesCopied - prev.bytesCopied });
        prev = p;
      },
    });
    expect(res.rowsCopied).toBe(3000);
    expect(batches[0].rows).toBe(1000); // before any width is known
    // Every later batch but the final, shorter one carries about batchBytes (the rows are near-uniform).
    const sized = batches.slice(1, -1);
    expect(sized.length).toBeGreaterThanOrEqual(3);
    for (const b of sized) {
      expect(b.bytes).toBeGreaterThan(batchBytes * 0.75);
      expect(b.bytes).toBeLessThan(batchBytes * 1.25);
    }
    const [cp] = await copyProgress(target, moveId);
    expect(cp.bytesCopied).toBe(res.bytesCopied);
    expect(cp.bytesCopied).toBe(batches.reduce((n, b) => n + b.bytes, 0));
    expect(await countRows(target, 'parents', tenant)).toBe(3000);
  });

  it('reads every batch off the primary key index: no sort in the source plans', async () => {
    const tenant = uniq('plan');
    await seedTenant(source, tenant, 50, { tagged: true });
    // Key bounds of each column's type, below and above every row.
    const bound = (table: TenantTable, hi: boolean) =>
      table.primaryKey.map((k) => {
        if (k === TENANT_COL) return tenant;
        const type = table.columns.find((c) => c.name === k)!.type;
        if (type === 'uuid') return hi ? 'ffffffff-ffff-ffff-ffff-ffffffffffff' : '00000000-0000-0000-0000-000000000000';
        if (type === 'integer') return hi ? '2147483647' : '0';
        return hi ? 'zzzz' : '';
      });
    const planOf = async (c: PoolClient, sql: string, params: string[]) =>
      JSON.stringify((await c.query(`explain (format json) ${sql}`, params)).rows[0]['QUERY PLAN']);
    const c = await source.connect();
    try {
      await c.query('begin');
      await c.query(SOURCE_PLAN_SQL);
      for (const table of tables) {
        const [low, high] = [bound(table, false), bound(table, true)];
        const statements: [string, string[]][] = [
          [batchKeyQuery(table, TENANT_COL, false, { offset: 10 }), [tenant]],
          [batchKeyQuery(table, TENANT_COL, true, { offset: 10 }), [tenant, ...low]],
          [batchKeyQuery(table, TENANT_COL, true, 'last'), [tenant, ...low]],
          // The COPY's query, without COPY around it.
          [copyOutSql(table, TENANT_COL, tenant, low, high, 'text').replace(/^copy \((.*)\) to stdout \(format text\)$/s, '$1'), []],
        ];
        for (const [sql, params] of statements) {
          const plan = await planOf(c, sql, params);
          expect(plan, `${table.name}: ${sql}`).not.toMatch(/"Node Type":"(Sort|Incremental Sort)"/);
          expect(plan, `${table.name}: ${sql}`).toMatch(/"Node Type":"Index (Only )?Scan"/);
        }
      }
    } finally {
      await c.query('rollback').catch(() => {});
      c.release();
    }
  });

  it("never touches other tenants' rows on the source or the target", async () => {
    const [tenant, neighbour, targetOnly] = [uniq('mover'), uniq('stay'), uniq('there')];
    await seedTenant(source, tenant, 40, { tagged: true });
    await seedTenant(source, neighbour, 30, { tagged: true });
    await seedTenant(target, targetOnly, 20, { tagged: true });
    const before = {
      srcNeighbour: await tenantDigest(source, neighbour),
      srcTenant: await tenantDigest(source, tenant),
      tgtOnly: await tenantDigest(target, targetOnly),
    };
    await copyTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant, moveId: newMoveId(), batchRows: 7 });
    expect(await tenantDigest(source, neighbour)).toBe(before.srcNeighbour);
    expect(await tenantDigest(source, tenant)).toBe(before.srcTenant);
    expect(await tenantDigest(target, targetOnly)).toBe(before.tgtOnly);
    expect(await countRows(target, 'parents', neighbour)).toBe(0);
    expect(await tenantDigest(target, tenant)).toBe(before.srcTenant);
  });

  it('paces the copy to rowsPerSecond', async () => {
    const tenant = uniq('paced');
    await seedTenant(source, tenant, 30);
    const t0 = Date.now();
    await copyTenantTable({ source, target, table: tables[0], tenantColumn: TENANT_COL, unit: tenant, moveId: newMoveId(), batchRows: 10, rowsPerSecond: 50 });
    // 3 batches of 10 at 50 rows/s: the 2nd waits until 200 ms, the 3rd until 400 ms.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(390);
  });

  it('refuses an empty or invalid unit before touching anything', async () => {
    for (const unit of ['', "x'; drop table y; --", 'UPPER', ' acme']) {
      await expect(
        copyTenantTable({ source, target, table: tables[0], tenantColumn: TENANT_COL, unit, moveId: newMoveId(), batchRows: 10 }),
      ).rejects.toMatchObject({ type: 'InvalidInput' });
      await expect(deleteTenantRows({ pool: target, tables, tenantColumn: TENANT_COL, unit, batchRows: 10 })).rejects.toMatchObject({
        type: 'InvalidInput',
      });
    }
    await expect(
      copyTenantTable({ source, target, table: tables[0], tenantColumn: TENANT_COL, unit: 'acme', moveId: newMoveId(), batchRows: 0 }),
    ).rejects.toMatchObject({ type: 'InvalidInput' });
  });
});

describe('write audit', () => {
  it("the move's own sessions (application_name shardctl-…) never fire the target's write audit; another replica session does", async () => {
    const audit = writeAuditSchemaSql(TENANT_COL);
    await inTransaction(target, async (c) => {
      await c.query(`select pg_advisory_xact_lock(hashtextextended('shardctl.prepare', 0))`);
      await c.query(audit.sql);
      for (const t of tables) await installWriteAudit(c, t, audit.fn);
    });
    const dsn = (shard: string) => shardByName(testConfig(), shard).dsn;
    const [src, tgt] = [
      openPool(dsn('shard-a'), { applicationName: 'shardctl-copytest', max: 2 }),
      openPool(dsn('shard-b'), { applicationName: 'shardctl-copytest', max: 2 }),
    ];
    const tenant = uniq('audited');
    const audited = async () => (await target.query(`select count(*)::int as n from shardctl.unowned_writes where unit = $1`, [tenant])).rows[0].n;
    try {
      await seedTenant(source, tenant, 30, { tagged: true });
      // The target does not own the unit (no fence row): any write there that bypasses the fence is suspect...
      await copyTenant({ source: src, target: tgt, tables, tenantColumn: TENANT_COL, unit: tenant, moveId: newMoveId(), batchRows: 10 });
      expect(await countRows(target, 'parents', tenant)).toBe(30);
      expect(await audited()).toBe(0); // ...except the move's own
      // Not even called for the move's sessions (the WHEN clause decides, no PL/pgSQL call per row).
      const calls = async (pool: Pool) =>
        inTransaction(pool, async (c) => {
          await c.query(`set local track_functions = 'pl'`);
          await c.query(REPLICA_ROLE_SQL);
          await c.query(`update ${S}.parents set "MixedCase" = "MixedCase" where tenant_id = $1`, [tenant]);
          return Number((await c.query(`select pg_stat_get_xact_function_calls($1::regproc) as n`, [audit.fn])).rows[0].n);
        });
      expect(await calls(tgt)).toBe(0);
      expect(await audited()).toBe(0);
      // The test's own pool has no shardctl application_name: a foreign tool's replica session.
      expect(await calls(target)).toBe(30);
      await target.query(`delete from shardctl.unowned_writes where unit = $1`, [tenant]);
      await asReplica(target, (q) => q(`update ${S}.parents set "MixedCase" = 'manual fix' where tenant_id = $1`, [tenant]));
      expect(await audited()).toBe(30);
    } finally {
      await target.query(`delete from shardctl.unowned_writes where unit = $1`, [tenant]);
      await Promise.all([src.end(), tgt.end()]);
    }
  });
});

describe('deleteTenantRows', () => {
  it('deletes only the given tenant, children before parents, in batches, through the fence', async () => {
    const [tenant, other] = [uniq('gone'), uniq('kept')];
    await seedTenant(target, tenant, 45, { tagged: true });
    await seedTenant(target, other, 12, { tagged: true });
    const otherBefore = await tenantDigest(target, other);
    const batches: string[] = [];
    const res = await deleteTenantRows({
      pool: target,
      tables,
      tenantColumn: TENANT_COL,
      unit: tenant,
      batchRows: 20,
      onBatch: (p) => void batches.push(p.table),
    });
    expect(res.tables).toEqual([
      { table: `${SCHEMA}.tagged`, rowsDeleted: AWKWARD_KEYS.length },
      { table: `${SCHEMA}.children`, rowsDeleted: 90 },
      { table: `${SCHEMA}.parents`, rowsDeleted: 45 },
    ]);
    expect(res.rowsDeleted).toBe(AWKWARD_KEYS.length + 135);
    expect(batches.filter((b) => b.endsWith('.children'))).toHaveLength(5); // 20+20+20+20+10
    expect(batches.indexOf(`${SCHEMA}.parents`)).toBeGreaterThan(batches.lastIndexOf(`${SCHEMA}.children`));
    for (const t of ['parents', 'children', 'tagged']) expect(await countRows(target, t, tenant)).toBe(0);
    expect(await tenantDigest(target, other)).toBe(otherBefore);
  });
});
