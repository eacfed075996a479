// Fleet reads (router.scatter, `shardctl query`) against the real stack: one shard made slow
// (pg_sleep in a view, or a lock held by another session) and one that cannot be reached (a
// config entry on a closed port) are refused as incomplete, or marked partial when allowed,
// within the deadline; the ordered top-k equals a single-database reference over the same
// random rows; writes are refused and change nothing; the DSN's password never shows.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { execFile } from 'node:child_process';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Pool } from 'pg';
import { testConfig, uniq, shardPool, closePools } from '../helpers/stack';
import { openPool } from '../../lib/connections';
import { Config, projectRoot, shardByName } from '../../lib/config';
import { migrateDirectory } from '../../lib/directory/schema';
import { setUnitFence } from '../../lib/shard/fence';
import { Router } from '../../lib/router';
import { IncompleteResult, ShardctlError } from '../../lib/errors';

const REAL = ['shard-a', 'shard-b', 'shard-c'] as const;
const DOWN = 'shard-down';
const ROWS_PER_SHARD = 300;
const password = `p4ss-${randomBytes(6).toString('hex')}`;
const schema = uniq('scatter').replace(/-/g, '_');
const all = { tenants: '*' as const };

const shards = {} as Record<string, Pool>;
let serverPool: Pool; // the directory's server, for creating and dropping our databases
/** Our directories: `ok` lists the three real shards, `down` also the unreachable one. */
const dirs = {} as Record<'ok' | 'down', { name: string; dsn: string; pool: Pool }>;
let downDsn: string;
let config: Config; // directory = dirs.down
const configFiles = {} as Record<'ok' | 'down', string>;
let router: Router;

interface Item {
  id: number;
  tenant_id: string;
  score: number | null;
  big: string;
  amount: string;
  name: string;
  at: Date;
}
const byShard = {} as Record<string, Item[]>;

/** A seeded generator, so a failure replays. */
function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function randomItems(shardIndex: number, rand: () => number): Item[] {
  const letters = ['a', 'B', 'b', 'é', 'Z', 'ä', '\u{1F600}', 'Ω', ' '];
  return Array.from({ length: ROWS_PER_SHARD }, (_, i) => ({
    id: shardIndex * 100_000 + i,
    tenant_id: `t${Math.floor(rand() * 20)}`,
    score: rand() < 0.05 ? null : Math.floor(rand() * 500), // ties and NULLs
    big: (BigInt(2 ** 53) + BigInt(Math.floor(rand() * 1e6))).toString(),
    amount: (Math.floor(rand() * 2_000_000) / 100 - 10_000).toFixed(2),
    name: Array.from({ length: 1 + Math.floor(rand() * 4) }, () => letters[Math.floor(rand() * letters.length)]).join(''),
    at: new Date(Date.UTC(2024, 0, 1) + Math.floor(rand() * 1e10)),
  }));
}

const TABLE_SQL = (table: string) =>
  `create table ${table} (id bigint primary key, tenant_id text not null, score int, big int8 not null, amount numeric(12,2) not null, name text not null, at timestamptz not null)`;

async function insertItems(pool: Pool, table: string, items: Item[]) {
  await pool.query(`insert into ${table} select * from unnest($1::bigint[], $2::text[], $3::int[], $4::int8[], $5::numeric[], $6::text[], $7::timestamptz[])`, [
    items.map((x) => x.id),
    items.map((x) => x.tenant_id),
    items.map((x) => x.score),
    items.map((x) => x.big),
    items.map((x) => x.amount),
    items.map((x) => x.name),
    items.map((x) => x.at),
  ]);
}

async function closedPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

async function ownDirectory(name: string, shardNames: string[]) {
  await serverPool.query(`create database ${name}`);
  const url = new URL(testConfig().directory.dsn);
  url.pathname = `/${name}`;
  const pool = openPool(url.toString(), { max: 4 });
  await migrateDirectory(pool);
  await pool.query(`insert into shardctl.shards(name) select unnest($1::text[])`, [shardNames]);
  return { name, dsn: url.toString(), pool };
}

function writeConfig(c: Config): string {
  const file = path.join(os.tmpdir(), `${uniq('scatter-config')}.json`);
  fs.writeFileSync(file, JSON.stringify(c));
  return file;
}

beforeAll(async () => {
  const base = testConfig();
  serverPool = openPool(base.directory.dsn, { max: 2 });
  dirs.ok = await ownDirectory(`${schema}_ok`, [...REAL]);
  dirs.down = await ownDirectory(`${schema}_down`, [...REAL, DOWN]);
  downDsn = `postgres://scatter:${password}@127.0.0.1:${await closedPort()}/shardctl`;
  const withDown = { ...base, shards: [...base.shards, { name: DOWN, dsn: downDsn, bucket: 'shardctl-shard-down' }] };
  config = { ...withDown, directory: { dsn: dirs.down.dsn } };
  configFiles.down = writeConfig(config);
  configFiles.ok = writeConfig({ ...withDown, directory: { dsn: dirs.ok.dsn } });

  const rand = rng(20240611);
  const everything: Item[] = [];
  for (const [i, s] of REAL.entries()) {
    shards[s] = shardPool(s);
    byShard[s] = randomItems(i + 1, rand);
    everything.push(...byShard[s]);
    await shards[s].query(`create schema ${schema}`);
    await shards[s].query(TABLE_SQL(`${schema}.items`));
    await insertItems(shards[s], `${schema}.items`, byShard[s]);
    // The view every read below uses; on shard-b it sleeps far past any deadline.
    const slow = s === 'shard-b' ? ' cross join pg_sleep(60)' : '';
    await shards[s].query(`create view ${schema}.slow as select i.* from ${schema}.items i${slow}`);
    await shards[s].query(`create sequence ${schema}.seq`);
  }
  // The single-database reference: the same rows in one table.
  await dirs.ok.pool.query(`create schema ref`);
  await dirs.ok.pool.query(TABLE_SQL('ref.items'));
  await insertItems(dirs.ok.pool, 'ref.items', everything);
  router = await Router.create(config, { listen: false, snapshotTtlMs: 60_000 });
});

afterAll(async () => {
  await router?.close();
  for (const s of REAL) await shards[s]?.query(`drop schema if exists ${schema} cascade`);
  for (const d of Object.values(dirs)) {
    await d.pool.end();
    await serverPool.query(`drop database if exists ${d.name} with (force)`);
  }
  for (const f of Object.values(configFiles)) fs.rmSync(f, { force: true });
  await serverPool?.end();
  await closePools();
});

const SELECT = () => `select id, score, big, amount, name, at from ${schema}.slow`;

/** Ids of the reference's top k, over the given shards' rows, computed by one database. */
async function referenceIds(orderBy: string, k: number, only: readonly string[] = REAL): Promise<number[]> {
  const first = (s: string) => REAL.indexOf(s as (typeof REAL)[number]) + 1;
  const ranges = only.map((s) => `(id between ${first(s) * 100_000} and ${first(s) * 100_000 + ROWS_PER_SHARD - 1})`).join(' or ');
  const r = await dirs.ok.pool.query(`select id from ref.items where ${ranges} order by ${orderBy} limit ${k}`);
  return r.rows.map((x) => Number(x.id));
}

const shardOfId = (id: number) => REAL[Math.floor(id / 100_000) - 1];

async function expectIncomplete(p: Promise<unknown>): Promise<IncompleteResult> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(IncompleteResult);
  return e as IncompleteResult;
}

describe('scatter: ordered top-k', () => {
  const cases: [string, string][] = [
    ['score desc, id', 'score desc, id'],
    ['name, id', 'name collate "C", id'],
    ['amount desc, id', 'amount desc, id'],
    ['big, id desc', 'big, id desc'],
    ['at desc, id', 'at desc, id'],
  ];
  for (const [orderBy, sqlOrder] of cases) {
    it(`order by ${orderBy} limit 25 equals the single-database reference, and no shard sent more than 25 rows`, async () => {
      const r = await router.scatter(SELECT().replace('.slow', '.items'), [], { grant: all, shards: [...REAL], orderBy, limit: 25, deadlineMs: 10_000 });
      expect(r.complete).toBe(true);
      expect(r.missing).toEqual([]);
      const ids = r.rows.map((x) => Number(x.row.id));
      expect(ids).toEqual(await referenceIds(sqlOrder, 25));
      for (const x of r.rows) expect(x.shard).toBe(shardOfId(Number(x.row.id)));
      expect(r.shards.map((s) => [s.shard, s.status])).toEqual(REAL.map((s) => [s, 'ok']));
      for (const s of r.shards) expect(s.rows).toBeLessThanOrEqual(25);
      expect(r.fields).toEqual(['id', 'score', 'big', 'amount', 'name', 'at']);
    });
  }

  it('without a limit, returns every row of every shard, merged in order', async () => {
    const r = await router.scatter(`select id, score from ${schema}.items where score < $1`, [100], { grant: all, shards: [...REAL], orderBy: 'score, id' });
    const ref = await dirs.ok.pool.query(`select id from ref.items where score < 100 order by score, id`);
    expect(r.rows.map((x) => Number(x.row.id))).toEqual(ref.rows.map((x) => Number(x.id)));
  });
});

describe('scatter: slow and unreachable shards', () => {
  it('refuses the read as incomplete, naming the slow shard (timeout) and the unreachable one, within the deadline', async () => {
    const deadlineMs = 1500;
    const t0 = Date.now();
    const e = await expectIncomplete(router.scatter(SELECT(), [], { grant: all, deadlineMs, concurrency: 4 }));
    const elapsed = Date.now() - t0;
    expect(e.type).toBe('IncompleteResult');
    expect(e.missing.map((m) => [m.shard, m.reason])).toEqual([
      ['shard-b', 'timeout'],
      [DOWN, 'unreachable'],
    ]);
    expect(e.answered).toEqual(['shard-a', 'shard-c']);
    expect(elapsed).toBeLessThan(deadlineMs + 5000); // a sanity bound: it returned, not a timing claim
    const text = JSON.stringify({ message: e.message, details: e.details });
    expect(text).not.toContain(password);
    expect(text).not.toContain(downDsn);
  });

  it('with allowPartial, returns complete:false with the same missing list and the top-k of the shards that answered', async () => {
    const r = await router.scatter(SELECT(), [], { grant: all, deadlineMs: 1500, allowPartial: true, orderBy: 'score desc, id', limit: 10 });
    expect(r.complete).toBe(false);
    expect(r.missing.map((m) => [m.shard, m.reason])).toEqual([
      ['shard-b', 'timeout'],
      [DOWN, 'unreachable'],
    ]);
    expect(r.rows.map((x) => Number(x.row.id))).toEqual(await referenceIds('score desc, id', 10, ['shard-a', 'shard-c']));
    for (const x of r.rows) expect(['shard-a', 'shard-c']).toContain(x.shard);
    expect(r.shards.map((s) => [s.shard, s.status])).toEqual([
      ['shard-a', 'ok'],
      ['shard-b', 'timeout'],
      ['shard-c', 'ok'],
      [DOWN, 'unreachable'],
    ]);
    expect(JSON.stringify(r)).not.toContain(password);
  });

  it('a lock held by another session times that shard out like a slow statement, and the lock holder is untouched', async () => {
    const holder = await shards['shard-c'].connect();
    try {
      await holder.query('begin');
      await holder.query(`lock table ${schema}.items in access exclusive mode`);
      const e = await expectIncomplete(
        router.scatter(`select count(*) from ${schema}.items`, [], { grant: all, shards: ['shard-a', 'shard-c'], deadlineMs: 800 }),
      );
      expect(e.missing).toEqual([expect.objectContaining({ shard: 'shard-c', reason: 'timeout', code: '57014' })]);
      expect((await holder.query('select 1 as ok')).rows).toEqual([{ ok: 1 }]);
    } finally {
      await holder.query('rollback');
      holder.release();
    }
    const after = await router.scatter(`select count(*)::int as n from ${schema}.items`, [], { grant: all, shards: ['shard-a', 'shard-c'] });
    expect(after.rows.map((x) => x.row.n)).toEqual([ROWS_PER_SHARD, ROWS_PER_SHARD]);
  });

  it('concurrency bounds how many shards run at once (server clocks: disjoint with 1, overlapping with 3)', async () => {
    const sql = `select statement_timestamp() as t0, clock_timestamp() as t1 from pg_sleep(0.3)`;
    const spans = async (concurrency: number) => {
      const r = await router.scatter(sql, [], { grant: all, shards: [...REAL], concurrency, deadlineMs: 10_000 });
      return r.rows.map((x) => [(x.row.t0 as Date).getTime(), (x.row.t1 as Date).getTime()]).sort((a, b) => a[0] - b[0]);
    };
    const one = await spans(1);
    for (let i = 1; i < one.length; i++) expect(one[i][0]).toBeGreaterThanOrEqual(one[i - 1][1]);
    const three = await spans(3);
    expect(Math.max(...three.map((s) => s[0]))).toBeLessThan(Math.min(...three.map((s) => s[1])));
  });
});

describe('scatter: read only', () => {
  const counts = async () => Promise.all(REAL.map(async (s) => Number((await shards[s].query(`select count(*) from ${schema}.items`)).rows[0].count)));

  it('refuses every kind of write (Forbidden, even with allowPartial) and changes nothing', async () => {
    const before = await counts();
    const writes = [
      `insert into ${schema}.items values (1, 't', 1, 1, 1, 'x', now())`,
      `update ${schema}.items set score = 0`,
      `delete from ${schema}.items`,
      `select * from ${schema}.items for update`,
      `select nextval('${schema}.seq')`,
      `create table ${schema}.nope (x int)`,
      `with d as (delete from ${schema}.items returning *) select count(*) from d`,
    ];
    for (const sql of writes) {
      const e = await router.scatter(sql, [], { grant: all, shards: [...REAL], allowPartial: true }).catch((err: unknown) => err);
      expect(e, sql).toBeInstanceOf(ShardctlError);
      expect((e as ShardctlError).type, sql).toBe('Forbidden');
      expect((e as Error).message, sql).toMatch(/READ ONLY transaction/);
    }
    // A second statement cannot escape the transaction: one statement only.
    const escape = await router.scatter(`commit; delete from ${schema}.items`, [], { grant: all, shards: [...REAL] }).catch((err: ShardctlError) => err);
    expect((escape as ShardctlError).type).toBe('InvalidInput');
    expect(await counts()).toEqual(before);
    expect((await shards['shard-a'].query(`select to_regclass('${schema}.nope') as t`)).rows[0].t).toBeNull();
  });

  it('leaves nothing of the statement in the pooled session (a session advisory lock is gone after the read)', async () => {
    const key = Math.floor(Math.random() * 1e9);
    await router.scatter(`select pg_advisory_lock(${key})`, [], { grant: all, shards: ['shard-a'] });
    const probe = await shards['shard-a'].query(`select pg_try_advisory_lock(${key}) as got`);
    expect(probe.rows[0].got).toBe(true);
    await shards['shard-a'].query(`select pg_advisory_unlock_all()`);
  });
});

describe('scatter: units, grants and input', () => {
  it('asks only the shards owning the units, and a moved unit is refreshed and read on its new owner', async () => {
    const [t1, t2] = [uniq('sc-u1'), uniq('sc-u2')];
    await dirs.down.pool.query(
      `insert into shardctl.units(unit, kind, shard, epoch, state) values ($1, 'tenant', 'shard-a', 1, 'active'), ($2, 'tenant', 'shard-c', 1, 'active')`,
      [t1, t2],
    );
    await setUnitFence(shards['shard-a'], { unit: t1, epoch: 1, owned: true, frozen: false });
    await setUnitFence(shards['shard-c'], { unit: t2, epoch: 1, owned: true, frozen: false });
    const sql = `select current_setting('port') as port`;
    const grant = { tenants: [t1, t2] };
    const first = await router.scatter(sql, [], { grant, units: [t1, t2] });
    expect(first.shards.map((s) => s.shard)).toEqual(['shard-a', 'shard-c']);

    // t2 moves to shard-b; the router hears nothing (no LISTEN): its cache still says shard-c.
    await setUnitFence(shards['shard-c'], { unit: t2, epoch: 1, owned: false, frozen: false });
    await setUnitFence(shards['shard-b'], { unit: t2, epoch: 2, owned: true, frozen: false });
    await dirs.down.pool.query(`update shardctl.units set shard = 'shard-b', epoch = 2 where unit = $1`, [t2]);
    const staleBefore = router.metrics().staleRetries;
    const second = await router.scatter(sql, [], { grant, units: [t1, t2], deadlineMs: 5000 });
    expect(second.complete).toBe(true);
    expect(second.shards.map((s) => s.shard)).toEqual(['shard-a', 'shard-b']);
    expect(second.rows.map((x) => x.row.port)).toEqual([new URL(shardByName(config, 'shard-a').dsn).port, new URL(shardByName(config, 'shard-b').dsn).port]);
    expect(router.metrics().staleRetries).toBeGreaterThan(staleBefore);
  });

  it("counts a unit once with the documented filter on the shard's own fence: the soak copy and a frozen owner are left out", async () => {
    const t = uniq('sc-copy');
    for (const s of ['shard-a', 'shard-b']) {
      await shards[s].query(`create table if not exists ${schema}.copies (tenant_id text not null, id int not null)`);
      await shards[s].query(`insert into ${schema}.copies values ($1, 1), ($1, 2)`, [t]);
    }
    await setUnitFence(shards['shard-a'], { unit: t, epoch: 2, owned: true, frozen: false }); // the owner
    await setUnitFence(shards['shard-b'], { unit: t, epoch: 1, owned: false, frozen: false }); // the old owner's soak copy
    const read = (filter: string) =>
      router.scatter(`select id from ${schema}.copies where tenant_id = $1${filter}`, [t], { grant: all, shards: ['shard-a', 'shard-b'], orderBy: 'id' });
    const owned = ` and tenant_id in (select unit from shardctl.fence where owned and not frozen)`;
    expect((await read('')).rows.map((x) => x.shard)).toEqual(['shard-a', 'shard-b', 'shard-a', 'shard-b']);
    expect((await read(owned)).rows.map((x) => [x.shard, x.row.id])).toEqual([
      ['shard-a', 1],
      ['shard-a', 2],
    ]);
    await setUnitFence(shards['shard-a'], { unit: t, epoch: 2, owned: true, frozen: true });
    expect((await read(owned)).rows).toEqual([]);
  });

  it('names a shard the configuration does not list as missing (not-configured), never as empty', async () => {
    const e = await expectIncomplete(router.scatter('select 1 as one', [], { grant: all, shards: ['shard-a', 'shard-zz'] }));
    expect(e.missing).toEqual([{ shard: 'shard-zz', reason: 'not-configured', message: expect.stringContaining('no connection for shard shard-zz') }]);
    expect(e.answered).toEqual(['shard-a']);
  });

  it('refuses, before any I/O, a fleet read without an all-tenants grant, a unit outside the grant, and bad options', async () => {
    const refused = async (p: Promise<unknown>) => ((await p.catch((e: unknown) => e)) as ShardctlError).type;
    expect(await refused(router.scatter('select 1', [], { grant: { tenants: ['x'] } }))).toBe('Forbidden');
    expect(await refused(router.scatter('select 1', [], { grant: { tenants: ['x'] }, units: ['y'] }))).toBe('Forbidden');
    expect(await refused(router.scatter('  ; ', [], { grant: all }))).toBe('InvalidInput');
    expect(await refused(router.scatter('select 1', [], { grant: all, deadlineMs: 0 }))).toBe('InvalidInput');
    expect(await refused(router.scatter('select 1', [], { grant: all, concurrency: 0 }))).toBe('InvalidInput');
    expect(await refused(router.scatter('select 1', [], { grant: all, limit: 1.5 }))).toBe('InvalidInput');
    expect(await refused(router.scatter('select 1', [], { grant: all, shards: ['a'], units: ['b'] }))).toBe('InvalidInput');
    expect(await refused(router.scatter('select 1 as a', [], { grant: all, shards: ['shard-a'], orderBy: 'b' }))).toBe('InvalidInput');
  });
});

function cli(args: string[], configFile: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [path.join(projectRoot(), 'cli/shardctl.js'), ...args],
      { cwd: projectRoot(), timeout: 60_000, env: { ...process.env, SHARDCTL_CONFIG: configFile } },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('shardctl query', () => {
  it('exits 0 on a complete read and prints the documented JSON shape with the merged top-k', async () => {
    const r = await cli(
      ['query', '--all-shards', `select id, score from ${schema}.items`, '--order-by', 'score, id', '--limit', '5', '--json'],
      configFiles.ok,
    );
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(Object.keys(out).sort()).toEqual(['complete', 'elapsedMs', 'fields', 'missing', 'rows', 'shards']);
    expect(out).toMatchObject({ complete: true, missing: [], fields: ['id', 'score'] });
    expect(out.rows.map((x: { row: { id: string } }) => Number(x.row.id))).toEqual(await referenceIds('score, id', 5));
    expect(out.rows[0]).toEqual({ shard: expect.any(String), row: { id: expect.any(String), score: expect.any(Number) } });
    expect(out.shards).toEqual(REAL.map((s) => ({ shard: s, status: 'ok', rows: 5, queuedMs: expect.any(Number), elapsedMs: expect.any(Number) })));
  });

  it('with --allow-partial prints the partial rows and exits 5 when a shard is unreachable; without it prints no rows and exits 5', async () => {
    const args = ['query', '--all-shards', SELECT(), '--deadline', '1500ms', '--json'];
    const partial = await cli([...args, '--allow-partial'], configFiles.down);
    expect(partial.code).toBe(5);
    const out = JSON.parse(partial.stdout);
    expect(out.complete).toBe(false);
    expect(out.missing.map((m: { shard: string; reason: string }) => [m.shard, m.reason])).toEqual([
      ['shard-b', 'timeout'],
      [DOWN, 'unreachable'],
    ]);
    expect(out.rows).toHaveLength(2 * ROWS_PER_SHARD);
    const refused = await cli(args, configFiles.down);
    expect(refused.code).toBe(5);
    expect(refused.stdout).toBe('');
    const err = JSON.parse(refused.stderr.trim()).error;
    expect(err.type).toBe('IncompleteResult');
    expect(err.missing.map((m: { shard: string }) => m.shard)).toEqual(['shard-b', DOWN]);
    for (const text of [partial.stdout, partial.stderr, refused.stdout, refused.stderr]) expect(text).not.toContain(password);
  });

  it('exits 6 when a shard only timed out, partial or refused, and names it in one line', async () => {
    const args = ['query', '--all-shards', SELECT(), '--deadline', '1s'];
    const partial = await cli([...args, '--allow-partial'], configFiles.ok);
    expect(partial.code).toBe(6);
    expect(partial.stderr).toMatch(/^PARTIAL: 2\/3 shard\(s\) answered, 600 row\(s\), \d+ ms; missing: shard-b \(timeout: /);
    const refused = await cli(args, configFiles.ok);
    expect(refused.code).toBe(6);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toMatch(/^shardctl: incomplete result: 1 of 3 shard\(s\) did not answer: shard-b \(timeout/);
  });

  it('exits 4 on a write, and 2 with one line on bad input, changing nothing', async () => {
    const before = Number((await shards['shard-a'].query(`select count(*) from ${schema}.items`)).rows[0].count);
    const write = await cli(['query', '--all-shards', `delete from ${schema}.items`], configFiles.ok);
    expect(write.code).toBe(4);
    expect(write.stderr).toMatch(/READ ONLY transaction/);
    const bad: [string[], RegExp][] = [
      [['query', `delete from ${schema}.items`], /needs --all-shards/],
      [['query', '--all-shards', '  '], /statement is empty/],
      [['query', '--all-shards', 'select 1', '--deadline', 'soon'], /invalid --deadline/],
      [['query', '--all-shards', 'select 1', '--concurrency', '0'], /--concurrency must be/],
    ];
    for (const [args, why] of bad) {
      const r = await cli(args, configFiles.ok);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n'), args.join(' ')).toHaveLength(1);
      expect(r.stderr).toMatch(why);
    }
    expect(Number((await shards['shard-a'].query(`select count(*) from ${schema}.items`)).rows[0].count)).toBe(before);
  });
});
