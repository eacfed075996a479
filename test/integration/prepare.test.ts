// `shards prepare` against a real shard: the fence lands on every tenant table (the demo schema
// included), re-runs change nothing, new tables are picked up, broken triggers are repaired, and
// a failed prepare changes nothing. Own tables live in a schema of their own, dropped at the end.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool } from 'pg';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { testConfig, uniq, shardPool, closePools } from '../helpers/stack';
import { fenceStatus, prepareShard, FENCE_TRIGGER_NAME } from '../../lib/shard/prepare';
import { DEMO_TABLES } from '../../lib/demo/schema';
import { BLOB_INDEX_QUALIFIED as BLOB_INDEX } from '../../lib/blobs/index-table';
import { SQLSTATE } from '../../lib/errors';
import { Config, projectRoot, shardByName } from '../../lib/config';
import { Pool as PgPool } from 'pg';
import { hardenPool, inTransaction } from '../../lib/pg';
import { freezeSource, setUnitFence } from '../../lib/shard/fence';
import { REPLICA_ROLE_SQL } from '../../lib/copy';
import { unownedWritesSince, unownedWritesSinceDisown } from '../../lib/shard/write-audit';

const SHARD = 'shard-a';
let pool: Pool;
const schemas: string[] = [];

beforeAll(() => {
  pool = shardPool(SHARD);
});

afterAll(async () => {
  for (const s of schemas) await pool.query(`drop schema if exists ${s} cascade`);
  await closePools();
});

/** A schema of this test's own, and a config whose tenant tables are exactly that schema's. */
async function ownSchema(): Promise<{ schema: string; config: Config }> {
  const schema = uniq('prep').replace(/-/g, '_');
  schemas.push(schema);
  await pool.query(`create schema ${schema}`);
  const base = testConfig();
  return { schema, config: { ...base, tenant: { ...base.tenant, schemas: [schema], tables: undefined } } };
}

const createTenantTable = (schema: string, name: string, pk = true) =>
  pool.query(`create table ${schema}.${name} (tenant_id text not null, id bigint not null, v text${pk ? ', primary key (tenant_id, id)' : ''})`);

async function fenceTriggers(schema: string): Promise<Array<{ table: string; enabled: string }>> {
  const r = await pool.query(
    `select c.relname as table, t.tgenabled as enabled from pg_trigger t
       join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1 and t.tgname = $2 order by c.relname`,
    [schema, FENCE_TRIGGER_NAME],
  );
  return r.rows;
}

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(projectRoot(), 'cli/shardctl.js'), ...args], { cwd: projectRoot(), timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as any).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('prepareShard', () => {
  it('creates the demo tables and fences every one of them', async () => {
    const r = await prepareShard(pool, testConfig(), { demoSchema: true });
    for (const t of DEMO_TABLES) expect(r.tables).toContain(`public.${t}`);
    const st = await fenceStatus(pool, testConfig());
    for (const t of DEMO_TABLES) expect(st.fenced).toContain(`public.${t}`);
    expect(st.schemaInstalled).toBe(true);
  });

  it('creates the blob index, shardctl.blob_index, as a fenced tenant table (tenant column leading its primary key)', async () => {
    const r = await prepareShard(pool, testConfig(), { demoSchema: true });
    expect(r.tables).toContain(BLOB_INDEX);
    expect((await fenceStatus(pool, testConfig())).fenced).toContain(BLOB_INDEX);
    const pk = await pool.query(
      `select array_agg(a.attname::text order by k.ord) as cols from pg_index i cross join lateral unnest(i.indkey) with ordinality k(attnum, ord)
         join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum where i.indrelid = 'shardctl.blob_index'::regclass and i.indisprimary`,
    );
    expect(pk.rows[0].cols).toEqual(['tenant_id', 'name']);
    await expect(
      pool.query(`insert into shardctl.blob_index (tenant_id, name, object_key, version, size, sha256) values ('t1', 'n', 'k', 'v', 1, repeat('0', 64))`),
    ).rejects.toMatchObject({
      code: SQLSTATE.noEpoch,
    });
  });

  it('is idempotent: a second run creates no trigger and leaves the same triggers', async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    await createTenantTable(schema, 'b');
    const first = await prepareShard(pool, config);
    const triggers = await fenceTriggers(schema);
    const second = await prepareShard(pool, config);
    expect(first.changed).toEqual([`${schema}.a`, `${schema}.b`]);
    expect(second.changed).toEqual([]);
    expect(second.tables).toEqual(first.tables);
    expect(await fenceTriggers(schema)).toEqual(triggers);
    expect(triggers).toEqual([
      { table: 'a', enabled: 'O' },
      { table: 'b', enabled: 'O' },
    ]);
  });

  it('fences a tenant table created after the last prepare', async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    await prepareShard(pool, config);
    await createTenantTable(schema, 'later');
    const r = await prepareShard(pool, config);
    expect(r.changed).toEqual([`${schema}.later`]);
    expect((await fenceTriggers(schema)).map((t) => t.table)).toEqual(['a', 'later']);
    const write = pool.query(`insert into ${schema}.later values ('t1', 1, 'x')`);
    await expect(write).rejects.toMatchObject({ code: SQLSTATE.noEpoch });
  });

  it('reports a table that cannot be moved as a problem, and fences it all the same', async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'nopk', false);
    const r = await prepareShard(pool, config);
    expect(r.tables).toEqual([`${schema}.nopk`, BLOB_INDEX]);
    expect(r.problems).toHaveLength(1);
    expect(r.problems[0]).toMatch(/has no primary key/);
    expect(await fenceTriggers(schema)).toEqual([{ table: 'nopk', enabled: 'O' }]);
  });

  it('repairs a fence trigger that was disabled or set to fire in replica sessions', async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    await createTenantTable(schema, 'b');
    await prepareShard(pool, config);
    await pool.query(`alter table ${schema}.a disable trigger ${FENCE_TRIGGER_NAME}`);
    await pool.query(`alter table ${schema}.b enable always trigger ${FENCE_TRIGGER_NAME}`);
    expect((await fenceStatus(pool, config)).unfenced).toEqual([`${schema}.a`, `${schema}.b`]);
    const r = await prepareShard(pool, config);
    expect(r.changed).toEqual([`${schema}.a`, `${schema}.b`]);
    expect(await fenceTriggers(schema)).toEqual([
      { table: 'a', enabled: 'O' },
      { table: 'b', enabled: 'O' },
    ]);
  });

  it('upgrades shardctl functions installed without a pinned search_path', async () => {
    // checked_unit(), open_unit_write() and begin_unit_write() run unpinned by design (every name
    // in them schema-qualified; fence.test.ts).
    const OURS = ['check_unrouted_write', 'refuse_row_of_unit', 'assert_writable', 'assert_readable', 'audit_unowned_write_tenant_id'];
    await prepareShard(pool, testConfig(), { demoSchema: true });
    const unpinned = async () =>
      (
        await pool.query(
          `select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
            where n.nspname = 'shardctl' and p.proname = any($1) and not exists (select 1 from unnest(coalesce(p.proconfig, '{}')) s where s like 'search_path=%')`,
          [OURS],
        )
      ).rows.map((r) => r.fn);
    // What an older shardctl left behind: the same functions, running with the caller's path.
    const all = (
      await pool.query(
        `select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = 'shardctl' and p.proname = any($1)`,
        [OURS],
      )
    ).rows;
    expect(all).toHaveLength(OURS.length);
    for (const { fn } of all) await pool.query(`alter routine ${fn} reset search_path`);
    expect((await unpinned()).length).toBe(all.length);
    await prepareShard(pool, testConfig(), { demoSchema: true });
    expect(await unpinned()).toEqual([]);
  });

  it("upgrades an older shardctl's fence (a BEFORE ROW trigger per table) to this one, and drops its unused function", async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    await prepareShard(pool, config);
    // What shardctl before version 2 left on a table: one BEFORE ROW trigger of the same name.
    await pool.query(`create or replace function shardctl.fence_check_tenant_id() returns trigger language plpgsql
                        set search_path = pg_catalog, pg_temp as $$ begin return new; end $$`);
    await pool.query(`drop trigger shardctl_fence on ${schema}.a; drop trigger shardctl_fence_old_rows on ${schema}.a;
                      create trigger shardctl_fence before insert or update or delete on ${schema}.a for each row execute function shardctl.fence_check_tenant_id()`);
    expect((await fenceStatus(pool, config)).unfenced).toEqual([`${schema}.a`]);
    const r = await prepareShard(pool, config);
    expect(r.changed).toEqual([`${schema}.a`]);
    expect((await fenceStatus(pool, config)).fenced).toEqual([`${schema}.a`, BLOB_INDEX]);
    const triggers = await pool.query(`select tgname, tgtype from pg_trigger where tgrelid = $1::regclass and tgname like 'shardctl_fence%' order by tgname`, [
      `${schema}.a`,
    ]);
    expect(triggers.rows).toEqual([
      { tgname: 'shardctl_fence', tgtype: 21 },
      { tgname: 'shardctl_fence_old_rows', tgtype: 25 },
    ]);
    expect((await pool.query(`select to_regprocedure('shardctl.fence_check_tenant_id()') as f`)).rows[0].f).toBeNull();
    await expect(pool.query(`insert into ${schema}.a values ('t1', 1, 'x')`)).rejects.toMatchObject({ code: SQLSTATE.noEpoch });
    expect((await prepareShard(pool, config)).changed).toEqual([]);
  });

  it('fences a partitioned tenant table and every partition of it, present and future', async () => {
    const { schema, config } = await ownSchema();
    await pool.query(`create table ${schema}.p (tenant_id text not null, id bigint not null, v text, primary key (tenant_id, id)) partition by hash (tenant_id);
                      create table ${schema}.p0 partition of ${schema}.p for values with (modulus 2, remainder 0)`);
    expect((await prepareShard(pool, config)).tables).toEqual([`${schema}.p`, BLOB_INDEX]);
    await pool.query(`create table ${schema}.p1 partition of ${schema}.p for values with (modulus 2, remainder 1)`);
    expect((await fenceStatus(pool, config)).fenced).toEqual([`${schema}.p`, BLOB_INDEX]);
    // Written through a partition directly, or through the parent: both refused without a route.
    for (const [remainder, partition] of [
      [0, 'p0'],
      [1, 'p1'],
    ] as const) {
      const r = await pool.query(
        `select 't' || g as tenant from generate_series(1, 50) g where satisfies_hash_partition($1::regclass, 2, $2, 't' || g) limit 1`,
        [`${schema}.p`, remainder],
      );
      for (const target of ['p', partition]) {
        await expect(pool.query(`insert into ${schema}.${target} values ($1, 1, 'x')`, [r.rows[0].tenant])).rejects.toMatchObject({ code: SQLSTATE.noEpoch });
      }
    }
    // A partition's trigger turned off makes the whole table unfenced (plan and cutover refuse it).
    await pool.query(`alter table ${schema}.p1 disable trigger ${FENCE_TRIGGER_NAME}`);
    expect((await fenceStatus(pool, config)).unfenced).toEqual([`${schema}.p`]);
  });

  it("installs the write audit: a replica-role write by anyone but shardctl's registered sessions is recorded; a session merely named shardctl… is refused", async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    await prepareShard(pool, config);
    const unit = uniq('audit');
    await setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false });
    // A pool of its own: a session shardctl registered stays registered (a pooled connection is reused).
    const impostor = hardenPool(new PgPool({ connectionString: shardByName(testConfig(), SHARD).dsn, max: 1 }));
    const asReplica = (app: string, enter: string, id: number, db: Pool = pool) =>
      inTransaction(db, async (c) => {
        await c.query(`select set_config('application_name', $1, true)`, [app]);
        await c.query(enter);
        await c.query(`insert into ${schema}.a values ($1, $2, $3)`, [unit, id, app]);
      });
    try {
      await asReplica('manual-fix', 'set local session_replication_role = replica', 1);
      // shardctl's own data plane: the session registers itself (REPLICA_ROLE_SQL) and is not audited.
      await asReplica('shardctl-apply', REPLICA_ROLE_SQL, 2);
      // A session that only calls itself shardctl (a setting any client controls) is refused before it writes.
      await expect(asReplica('shardctl-backfill', 'set local session_replication_role = replica', 3, impostor)).rejects.toMatchObject({
        code: 'SC403',
        message: expect.stringContaining('reserved for shardctl'),
      });
      expect((await pool.query(`select id from ${schema}.a where tenant_id = $1 order by id`, [unit])).rows).toEqual([{ id: '1' }, { id: '2' }]);
      const r = await pool.query('select application_name, op, table_name, owned from shardctl.unowned_writes where unit = $1', [unit]);
      expect(r.rows).toEqual([{ application_name: 'manual-fix', op: 'INSERT', table_name: `${schema}.a`, owned: false }]);
      expect(await unownedWritesSinceDisown(pool, unit)).toEqual({ count: 1, example: 'manual-fix' });
    } finally {
      await impostor.end();
      await pool.query('delete from shardctl.unowned_writes where unit = $1', [unit]);
      await pool.query('delete from shardctl.fence where unit = $1', [unit]);
    }
  });

  it('counts a fence-bypassing write by its commit: begun while the shard owned the unit, committed after the freeze and the disown, retire sees it', async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    await prepareShard(pool, config);
    const unit = uniq('late');
    await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: false });
    const late = await pool.connect();
    try {
      // Committed before the freeze: the change stream carries it; not counted.
      await inTransaction(pool, async (c) => {
        await c.query('set local session_replication_role = replica');
        await c.query(`insert into ${schema}.a values ($1, 1, 'before')`, [unit]);
      });
      // Begun (and written) while the shard owns the unit, left open across the freeze and the switch.
      await late.query('begin');
      await late.query('set local session_replication_role = replica');
      await late.query(`insert into ${schema}.a values ($1, 2, 'late')`, [unit]);
      expect((await freezeSource(pool, unit, 1, { token: 'tok' })).ok).toBe(true);
      // The target's delta start (lib/cdc/delta.ts) takes its snapshot the same way.
      const snap = (await pool.query('select pg_current_snapshot()::text as s')).rows[0].s;
      expect((await setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false })).ok).toBe(true);
      expect(await unownedWritesSinceDisown(pool, unit)).toEqual({ count: 0, example: null });
      await late.query('commit');
      // By the writer's start it would be before the disown; by its commit it is after the fence point.
      expect(await unownedWritesSinceDisown(pool, unit)).toMatchObject({ count: 1 });
      expect(await unownedWritesSince(pool, unit, { snapshot: snap, epochSeconds: String(Date.now() / 1000) }, 0)).toMatchObject({ count: 1 });
    } finally {
      late.release();
      await pool.query('delete from shardctl.unowned_writes where unit = $1', [unit]);
      await pool.query('delete from shardctl.fence where unit = $1', [unit]);
    }
  });

  it('changes nothing when it fails', async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    const bad = { ...config, tenant: { ...config.tenant, tables: [`${schema}.a`, `${schema}.missing`] } };
    await expect(prepareShard(pool, bad)).rejects.toMatchObject({ type: 'InvalidInput' });
    expect(await fenceTriggers(schema)).toEqual([]);
  });

  it('serializes concurrent prepares of one shard', async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    const results = await Promise.all([1, 2, 3].map(() => prepareShard(pool, config)));
    expect(results.flatMap((r) => r.changed)).toEqual([`${schema}.a`]); // exactly one run created it
    expect(await fenceTriggers(schema)).toEqual([{ table: 'a', enabled: 'O' }]);
  });

  it('a prepare queued behind another prepare waits for it past the table lock timeout, and says so when it gives up', async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    // Stands in for a long prepare: the advisory lock every prepare of this shard takes first.
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      await holder.query(`select pg_advisory_xact_lock(hashtextextended('shardctl.prepare', 0))`);
      const waited = prepareShard(pool, config, { lockTimeoutMs: 300 });
      const gaveUp = await prepareShard(pool, config, { lockTimeoutMs: 300, queueTimeoutMs: 300 }).catch((e) => e);
      expect(gaveUp).toMatchObject({ type: 'Conflict', retriable: true });
      expect(gaveUp.message).toMatch(/waiting for another prepare of this shard/);
      await new Promise((r) => setTimeout(r, 800)); // the queued prepare is now past its table lock timeout
      await holder.query('commit');
      expect((await waited).changed).toEqual([`${schema}.a`]);
    } finally {
      await holder.query('rollback').catch(() => {});
      holder.release();
    }
  });

  it('a re-run on a prepared shard takes no table lock: it completes while a writer holds the demo tables and shardctl.fence', async () => {
    const config = testConfig();
    await prepareShard(pool, config, { demoSchema: true });
    // A writer mid-transaction: row exclusive on every demo table and on the tables a writer's
    // triggers touch. Before, a re-run took ACCESS EXCLUSIVE on shardctl.fence (ADD COLUMN IF NOT
    // EXISTS) and public.documents (SET STORAGE) every time: it waited for such a writer (and could
    // deadlock with one whose audit trigger read the fence), here until its lock timeout.
    const writer = await pool.connect();
    try {
      await writer.query('begin');
      await writer.query(
        `lock table public.accounts, public.documents, public.events, public.jobs, shardctl.fence, shardctl.unowned_writes, shardctl.move_delta_since in row exclusive mode`,
      );
      const again = await prepareShard(pool, config, { demoSchema: true, lockTimeoutMs: 300 });
      expect(again.changed).toEqual([]);
    } finally {
      await writer.query('rollback').catch(() => {});
      writer.release();
    }
  });

  it('gives up on a tenant table held by a long transaction within the table lock timeout, and changes nothing', async () => {
    const { schema, config } = await ownSchema();
    await createTenantTable(schema, 'a');
    const writer = await pool.connect();
    try {
      await writer.query('begin');
      await writer.query(`lock table ${schema}.a in row exclusive mode`);
      const e = await prepareShard(pool, config, { lockTimeoutMs: 300 }).catch((err) => err);
      expect(e).toMatchObject({ type: 'Conflict', retriable: true });
      expect(e.message).toMatch(/waiting for a table lock \(a long transaction holds a tenant table\)/);
    } finally {
      await writer.query('rollback').catch(() => {});
      writer.release();
    }
    expect(await fenceTriggers(schema)).toEqual([]);
  });

  it("turns allowUnfencedWrites into the shard's behaviour: an epoch-less write passes under true, is refused again under false", async () => {
    // A database of its own on the shard's server: the setting is shard-wide, and other tests
    // on this shard rely on epoch-less writes being refused.
    const db = uniq('prepdb').replace(/-/g, '_');
    await pool.query(`create database ${db}`);
    const url = new URL(shardByName(testConfig(), SHARD).dsn);
    url.pathname = `/${db}`;
    // hardenPool: the forced drop below ends connections the pool may still be closing.
    const own = hardenPool(new PgPool({ connectionString: url.toString(), max: 2 }));
    try {
      await own.query(`create table public.t (tenant_id text not null, id bigint not null, primary key (tenant_id, id))`);
      const base = testConfig();
      const withAllow = (allowUnfencedWrites: boolean): Config => ({
        ...base,
        tenant: { ...base.tenant, schemas: ['public'], tables: undefined, allowUnfencedWrites },
      });
      const write = (id: number) =>
        own.query(`insert into public.t values ('t1', $1)`, [id]).then(
          () => 'ok',
          (e) => e.code,
        );
      await prepareShard(own, withAllow(true));
      expect(await write(1)).toBe('ok');
      await prepareShard(own, withAllow(false));
      expect(await write(2)).toBe(SQLSTATE.noEpoch);
      expect((await own.query(`select id::int from public.t order by id`)).rows).toEqual([{ id: 1 }]);
    } finally {
      await own.end();
      await pool.query(`drop database if exists ${db} with (force)`);
    }
  });
});

describe('shardctl shards', () => {
  it('prepare names an unknown shard in one line and exits 3 (not found)', async () => {
    const r = await cli(['shards', 'prepare', '--shard', 'no-such-shard']);
    expect(r.code).toBe(3);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/unknown shard "no-such-shard"/);
  });

  it('prepare prints the tables it fenced, per shard', async () => {
    const r = await cli(['shards', 'prepare', '--shard', SHARD]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^${SHARD}: \\d+ tenant table\\(s\\) fenced.*public\\.accounts`, 'm'));
  });

  it('list --json shows every configured shard reachable with its fenced tables', async () => {
    await prepareShard(pool, testConfig(), { demoSchema: true });
    const r = await cli(['shards', 'list', '--json']);
    expect(r.code).toBe(0);
    const rows = JSON.parse(r.stdout);
    expect(rows.map((x: any) => x.name)).toEqual(testConfig().shards.map((s) => s.name));
    for (const x of rows) expect(x.reachable).toBe(true);
    const a = rows.find((x: any) => x.name === SHARD);
    expect(a.schemaInstalled).toBe(true);
    expect(a.fencedTables).toBeGreaterThanOrEqual(DEMO_TABLES.length);
  });
});
