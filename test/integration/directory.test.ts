// The placement directory against the real stack: compare-and-set, generation, audit, NOTIFY,
// tenant creation (fence first), refusal of bad input, and the `shardctl tenant` CLI.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { Pool } from 'pg';
import os from 'node:os';
import fs from 'node:fs';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { testConfig, uniq } from '../helpers/stack';
import { Config, projectRoot } from '../../lib/config';
import { ShardctlError } from '../../lib/errors';
import { getUnitFence, setUnitFence } from '../../lib/shard/fence';
import { installShardSchema } from '../../lib/shard/schema';
import { DIRECTORY_MIGRATIONS, migrateDirectory } from '../../lib/directory/schema';
import { openDirectoryPool } from '../../lib/directory/db';
import { ensureDirectory } from '../../lib/directory/ensure';
import { compareAndSetPlacement, getGeneration, getPlacement, listPlacements, PlacementNotification } from '../../lib/directory/placements';
import { listenPlacements } from '../../lib/directory/listen';
import { listShards, setShardCapacity, setShardStatus, syncShardsFromConfig } from '../../lib/directory/shards';
import { createTenant, getTenant, TenantDeps } from '../../lib/tenants';
import { freePort } from '../helpers/ports';

let config: Config;
let directory: Pool;
const shardPools = new Map<string, Pool>();
const created: string[] = [];
const extraPools: Pool[] = [];

function shardPool(name: string): Pool {
  let p = shardPools.get(name);
  if (!p) {
    p = new Pool({ connectionString: config.shards.find((s) => s.name === name)!.dsn, max: 4 });
    shardPools.set(name, p);
  }
  return p;
}

function deps(extra: Partial<TenantDeps> = {}): TenantDeps {
  return { directory, shardPool, config, ...extra };
}

/** A fresh tenant id, remembered for cleanup. */
function tid(prefix = 't'): string {
  const id = uniq(prefix);
  created.push(id);
  return id;
}

async function caught(p: Promise<unknown>): Promise<ShardctlError> {
  try {
    await p;
  } catch (e) {
    return e as ShardctlError;
  }
  throw new Error('expected a rejection');
}

async function auditRows(unit: string) {
  return (await directory.query('select actor, action, reason, detail from shardctl.audit where unit = $1 order by id', [unit])).rows;
}

/** Everything that tenant creation could have touched for these ids. */
async function footprint(ids: string[]) {
  const units = Number((await directory.query('select count(*) from shardctl.units where unit = any($1)', [ids])).rows[0].count);
  const audit = Number((await directory.query('select count(*) from shardctl.audit where unit = any($1)', [ids])).rows[0].count);
  let fences = 0;
  for (const s of config.shards)
    fences += Number((await shardPool(s.name).query('select count(*) from shardctl.fence where unit = any($1)', [ids])).rows[0].count);
  return { units, audit, fences };
}

function waitFor<T>(pred: () => T | undefined, ms = 10_000): Promise<T> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const tick = () => {
      const v = pred();
      if (v !== undefined) return resolve(v);
      if (Date.now() - t0 > ms) return reject(new Error('timed out waiting'));
      setTimeout(tick, 20);
    };
    tick();
  });
}

beforeAll(async () => {
  config = testConfig();
  directory = openDirectoryPool(config);
  await ensureDirectory(directory, config);
  // The fence table is installed by `shards prepare`; install it here if this run has not yet.
  for (const s of config.shards) {
    const p = shardPool(s.name);
    const has = (await p.query(`select to_regclass('shardctl.fence') is not null as ok`)).rows[0].ok;
    if (has) continue;
    const c = await p.connect();
    try {
      await installShardSchema(c).catch(async () => installShardSchema(c)); // a concurrent installer may race once
    } finally {
      c.release();
    }
  }
});

afterAll(async () => {
  if (directory && created.length) {
    await directory.query('delete from shardctl.units where unit = any($1)', [created]).catch(() => {});
    for (const s of config.shards)
      await shardPool(s.name)
        .query('delete from shardctl.fence where unit = any($1)', [created])
        .catch(() => {});
  }
  await Promise.all([directory, ...shardPools.values(), ...extraPools].filter(Boolean).map((p) => p.end().catch(() => {})));
});

describe('directory schema and shards inventory', () => {
  it('applies migrations once: running them again changes nothing', async () => {
    await migrateDirectory(directory);
    expect(await migrateDirectory(directory)).toEqual([]);
    const versions = (await directory.query('select version from shardctl.schema_migrations order by version')).rows.map((r) => r.version);
    expect(versions).toEqual(DIRECTORY_MIGRATIONS.map((m) => m.version));
    const again = await ensureDirectory(directory, config);
    expect(again).toEqual({ migrated: [], shardsAdded: [] });
  });

  it('every directory function in schema shardctl pins its search_path', async () => {
    await migrateDirectory(directory);
    const r = await directory.query(
      `select p.oid::regprocedure::text as fn, coalesce(p.proconfig, '{}') as config
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'shardctl' order by 1`,
    );
    expect(r.rows.length).toBeGreaterThan(0);
    expect(r.rows.filter((x) => !x.config.some((s: string) => s.startsWith('search_path='))).map((x) => x.fn)).toEqual([]);
  });

  it('registers config shards missing from the directory as open with capacity 1000, and never touches existing rows', async () => {
    const extra = uniq('zt');
    const cfg: Config = { ...config, shards: [...config.shards, { ...config.shards[0], name: extra }] };
    const tenant = tid();
    try {
      expect(await syncShardsFromConfig(directory, cfg)).toEqual([extra]);
      let s = (await listShards(directory)).find((x) => x.name === extra)!;
      expect(s).toMatchObject({ status: 'open', capacity: 1000, load: 0, units: 0 });

      await setShardStatus(directory, extra, 'closed', { actor: 'test', reason: 'directory test' });
      await setShardCapacity(directory, extra, 5, { actor: 'test' });
      expect(await syncShardsFromConfig(directory, cfg)).toEqual([]);
      s = (await listShards(directory)).find((x) => x.name === extra)!;
      expect(s).toMatchObject({ status: 'closed', capacity: 5 });

      // a closed shard takes no new tenant, and the refusal changes nothing
      const before = await footprint([tenant]);
      const e = await caught(createTenant(deps({ config: cfg }), { tenant, shard: extra, actor: 'test' }));
      expect(e.type).toBe('PreconditionFailed');
      expect(e.message).toContain('closed');
      expect(await footprint([tenant])).toEqual(before);

      expect((await caught(setShardStatus(directory, uniq('nope'), 'open', { actor: 'test' }))).type).toBe('NotFound');
    } finally {
      await directory.query('delete from shardctl.shards where name = $1', [extra]);
    }
  });

  it('estimates a shard load as the sum of the expected loads of its units', async () => {
    const a = tid();
    const b = tid();
    await createTenant(deps(), { tenant: a, shard: 'shard-b', expectedLoad: 7, actor: 'test' });
    await createTenant(deps(), { tenant: b, shard: 'shard-b', expectedLoad: 5, actor: 'test' });
    const c = await directory.connect();
    try {
      await c.query('begin isolation level repeatable read read only');
      const shard = (await listShards(c)).find((s) => s.name === 'shard-b')!;
      const sum = Number((await c.query(`select coalesce(sum(expected_load), 0) as s from shardctl.units where shard = 'shard-b'`)).rows[0].s);
      await c.query('commit');
      expect(shard.load).toBe(sum);
      expect(shard.load).toBeGreaterThanOrEqual(12);
    } finally {
      c.release();
    }
  });
});

describe('compare-and-set on placements', () => {
  it('lets exactly one of two concurrent compare-and-sets on the same expected state win; the other gets the current record', async () => {
    const t = tid();
    await createTenant(deps(), { tenant: t, shard: 'shard-a', actor: 'test' });
    const expectState = { shard: 'shard-a', epoch: 1, state: 'active' as const };
    const [r1, r2] = await Promise.all([
      compareAndSetPlacement(directory, t, expectState, { shard: 'shard-a', state: 'moving', moveId: 'move-x' }, { actor: 'racer-1', action: 'move.fence' }),
      compareAndSetPlacement(directory, t, expectState, { shard: 'shard-a', state: 'moving', moveId: 'move-y' }, { actor: 'racer-2', action: 'move.fence' }),
    ]);
    const wins = [r1, r2].filter((r) => r.ok);
    const losses = [r1, r2].filter((r) => !r.ok);
    expect(wins).toHaveLength(1);
    expect(losses).toHaveLength(1);
    const win = wins[0] as Extract<typeof r1, { ok: true }>;
    const loss = losses[0] as Extract<typeof r1, { ok: false }>;
    expect(loss.type).toBe('conflict');
    expect(loss.current).toEqual(win.placement);
    expect(await getPlacement(directory, t)).toEqual(win.placement);
    expect((await auditRows(t)).filter((a) => a.action === 'move.fence')).toHaveLength(1);
  });

  it('refuses a compare-and-set with a stale epoch and changes nothing, not even the generation', async () => {
    const t = tid();
    const start = await createTenant(deps(), { tenant: t, shard: 'shard-a', actor: 'test' });
    const auditBefore = await auditRows(t);
    // Hold a SHARE lock on the generation table: no one can bump it meanwhile, and a CAS that tried
    // to would fail on lock_timeout instead of returning a conflict.
    const casPool = new Pool({ connectionString: config.directory.dsn, max: 2, options: '-c lock_timeout=3000' });
    extraPools.push(casPool);
    const locker = await directory.connect();
    try {
      await locker.query('begin');
      await locker.query('lock table shardctl.generation in share mode');
      const g0 = await getGeneration(locker);
      const r = await compareAndSetPlacement(
        casPool,
        t,
        { shard: 'shard-a', epoch: 0 + 7, state: 'active' },
        { shard: 'shard-b', state: 'active', moveId: null },
        { actor: 'test', action: 'move.switch' },
      );
      expect(r).toEqual({ ok: false, type: 'conflict', current: start });
      expect(await getGeneration(locker)).toBe(g0);
      await locker.query('commit');
    } finally {
      await locker.query('rollback').catch(() => {});
      locker.release();
    }
    expect(await getPlacement(directory, t)).toEqual(start);
    expect(await auditRows(t)).toEqual(auditBefore);
  });

  it('raises the epoch by exactly one on a switch and keeps it on state-only changes, bumping the generation each time', async () => {
    const t = tid();
    const p0 = await createTenant(deps(), { tenant: t, shard: 'shard-a', actor: 'test' });
    expect(p0).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active', moveId: null });
    const audit = { actor: 'test', action: 'move.step' };

    const fenced = await compareAndSetPlacement(
      directory,
      t,
      { shard: 'shard-a', epoch: 1, state: 'active' },
      { shard: 'shard-a', state: 'moving', moveId: 'm1' },
      audit,
    );
    if (!fenced.ok) throw new Error('fence CAS lost');
    expect(fenced.placement).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'moving', moveId: 'm1' });

    const switched = await compareAndSetPlacement(
      directory,
      t,
      { shard: 'shard-a', epoch: 1, state: 'moving', moveId: 'm1' },
      { shard: 'shard-b', state: 'active', moveId: null },
      audit,
    );
    if (!switched.ok) throw new Error('switch CAS lost');
    expect(switched.placement).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active', moveId: null });
    expect(switched.generation).toBeGreaterThan(fenced.generation);

    const moving = await compareAndSetPlacement(
      directory,
      t,
      { shard: 'shard-b', epoch: 2, state: 'active' },
      { shard: 'shard-b', state: 'moving', moveId: 'm2' },
      audit,
    );
    if (!moving.ok) throw new Error('second fence CAS lost');
    // a CAS guarded on the wrong owning move loses
    const wrongMove = await compareAndSetPlacement(
      directory,
      t,
      { shard: 'shard-b', epoch: 2, state: 'moving', moveId: 'm1' },
      { shard: 'shard-b', state: 'active', moveId: null },
      audit,
    );
    expect(wrongMove.ok).toBe(false);
    const aborted = await compareAndSetPlacement(
      directory,
      t,
      { shard: 'shard-b', epoch: 2, state: 'moving', moveId: 'm2' },
      { shard: 'shard-b', state: 'active', moveId: null },
      audit,
    );
    if (!aborted.ok) throw new Error('abort CAS lost');
    expect(aborted.placement).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active', moveId: null });
    expect(aborted.generation).toBeGreaterThan(moving.generation);
  });

  it('rejects an inconsistent next state (moving without a move id) before touching anything', async () => {
    const t = tid();
    const p = await createTenant(deps(), { tenant: t, shard: 'shard-a', actor: 'test' });
    const e = await caught(
      compareAndSetPlacement(
        directory,
        t,
        { shard: 'shard-a', epoch: 1, state: 'active' },
        { shard: 'shard-a', state: 'moving', moveId: null },
        { actor: 'test', action: 'x' },
      ),
    );
    expect(e.type).toBe('InvalidInput');
    expect(await getPlacement(directory, t)).toEqual(p);
  });

  it('announces each change on shardctl_placement to listenPlacements, also after its connection is killed', async () => {
    const t = tid();
    await createTenant(deps(), { tenant: t, shard: 'shard-a', actor: 'test' });
    const seen: PlacementNotification[] = [];
    let reconnects = 0;
    const appName = uniq('listen-test');
    const l = await listenPlacements(config.directory.dsn, (n) => n.unit === t && seen.push(n), {
      applicationName: appName,
      onReconnect: () => reconnects++,
      minBackoffMs: 50,
    });
    try {
      const r = await compareAndSetPlacement(
        directory,
        t,
        { shard: 'shard-a', epoch: 1, state: 'active' },
        { shard: 'shard-a', state: 'moving', moveId: 'm1' },
        { actor: 'test', action: 'move.fence' },
      );
      if (!r.ok) throw new Error('CAS lost');
      const n = await waitFor(() => seen[0]);
      expect(n).toEqual({ unit: t, shard: 'shard-a', epoch: 1, state: 'moving', generation: r.generation });

      // kill the listener's own backend; it must reconnect and keep delivering
      const killed = await directory.query('select pg_terminate_backend(pid) as ok from pg_stat_activity where application_name = $1', [appName]);
      expect(killed.rows.map((x) => x.ok)).toEqual([true]);
      await waitFor(() => (reconnects > 0 ? true : undefined));
      const r2 = await compareAndSetPlacement(
        directory,
        t,
        { shard: 'shard-a', epoch: 1, state: 'moving' },
        { shard: 'shard-c', state: 'active', moveId: null },
        { actor: 'test', action: 'move.switch' },
      );
      if (!r2.ok) throw new Error('CAS lost');
      const n2 = await waitFor(() => seen[1]);
      expect(n2).toEqual({ unit: t, shard: 'shard-c', epoch: 2, state: 'active', generation: r2.generation });
    } finally {
      await l.close();
    }
  });

  it('fails listenPlacements with DirectoryUnavailable when the directory cannot be reached', async () => {
    const port = await freePort();
    const e = await caught(listenPlacements(`postgres://shardctl:x@127.0.0.1:${port}/shardctl`, () => {}, { connectionTimeoutMillis: 1000 }));
    expect(e.type).toBe('DirectoryUnavailable');
  });

  it('appends an audit row for each change, and the audit log refuses update and delete', async () => {
    const t = tid();
    await createTenant(deps(), { tenant: t, shard: 'shard-a', actor: 'alice', reason: 'onboarding' });
    const r = await compareAndSetPlacement(
      directory,
      t,
      { shard: 'shard-a', epoch: 1, state: 'active' },
      { shard: 'shard-a', state: 'moving', moveId: 'm1' },
      { actor: 'bob', action: 'move.fence', reason: 'rebalance', detail: { ticket: 'OPS-1' } },
    );
    if (!r.ok) throw new Error('CAS lost');
    const rows = await auditRows(t);
    expect(rows).toHaveLength(2);
    expect(rows[0]).toMatchObject({ actor: 'alice', action: 'tenant.create', reason: 'onboarding' });
    expect(rows[1]).toMatchObject({ actor: 'bob', action: 'move.fence', reason: 'rebalance' });
    expect(rows[1].detail).toMatchObject({
      ticket: 'OPS-1',
      generation: r.generation,
      from: { shard: 'shard-a', epoch: 1, state: 'active' },
      to: { shard: 'shard-a', epoch: 1, state: 'moving', moveId: 'm1' },
    });

    await expect(directory.query(`update shardctl.audit set reason = 'tampered' where unit = $1`, [t])).rejects.toThrow(/append-only/);
    await expect(directory.query('delete from shardctl.audit where unit = $1', [t])).rejects.toThrow(/append-only/);
    expect(await auditRows(t)).toEqual(rows);
  });

  it('maps every unit to exactly one known shard (listPlacements over the whole directory)', async () => {
    await createTenant(deps(), { tenant: tid(), shard: 'shard-c', actor: 'test' });
    const c = await directory.connect();
    try {
      await c.query('begin isolation level repeatable read read only');
      const { generation, placements } = await listPlacements(c);
      const shards = await listShards(c);
      const total = Number((await c.query('select count(*) from shardctl.units')).rows[0].count);
      const g = await getGeneration(c);
      await c.query('commit');
      expect(generation).toBe(g);
      expect(placements).toHaveLength(total);
      expect(new Set(placements.map((p) => p.unit)).size).toBe(total);
      const names = new Set(shards.map((s) => s.name));
      for (const p of placements) expect(names.has(p.shard)).toBe(true);
      expect(shards.reduce((n, s) => n + s.units, 0)).toBe(total);
    } finally {
      c.release();
    }
  });
});

describe('createTenant', () => {
  it('on an explicit shard writes the fence (epoch 1, owned) and the directory row at epoch 1, active', async () => {
    const t = tid();
    const g0 = await getGeneration(directory);
    const p = await createTenant(deps(), { tenant: t, shard: 'shard-b', expectedLoad: 3, actor: 'test' });
    expect(p).toMatchObject({ unit: t, kind: 'tenant', shard: 'shard-b', epoch: 1, state: 'active', moveId: null, expectedLoad: 3 });
    expect(await getTenant(directory, t)).toEqual(p);
    expect(await getUnitFence(shardPool('shard-b'), t)).toEqual({ unit: t, epoch: 1, owned: true, frozen: false });
    for (const other of ['shard-a', 'shard-c']) expect(await getUnitFence(shardPool(other), t)).toBeUndefined();
    expect(await getGeneration(directory)).toBeGreaterThan(g0);
    expect(await auditRows(t)).toEqual([expect.objectContaining({ actor: 'test', action: 'tenant.create' })]);
  });

  it('refuses to create an existing tenant, on its shard or another, and changes nothing', async () => {
    const t = tid();
    const p = await createTenant(deps(), { tenant: t, shard: 'shard-a', actor: 'test' });
    const before = await footprint([t]);
    for (const shard of ['shard-a', 'shard-b', undefined]) {
      const e = await caught(createTenant(deps(), { tenant: t, shard, actor: 'test' }));
      expect(e.type).toBe('AlreadyExists');
      expect(e.message).toContain(`tenant ${t} already exists on shard-a`);
    }
    expect(await footprint([t])).toEqual(before);
    expect(await getTenant(directory, t)).toEqual(p);
    expect(await getUnitFence(shardPool('shard-a'), t)).toEqual({ unit: t, epoch: 1, owned: true, frozen: false });
  });

  it('refuses invalid tenant ids and changes nothing', async () => {
    const bad = ['', "a'; drop table x;--", 'A B', 'a'.repeat(65), 'Upper', '-leading', 'a"b'];
    const before = await footprint(bad);
    for (const tenant of bad) {
      const e = await caught(createTenant(deps(), { tenant, shard: 'shard-a', actor: 'test' }));
      expect(e.type).toBe('InvalidInput');
    }
    expect(await footprint(bad)).toEqual(before);
    expect(before).toEqual({ units: 0, audit: 0, fences: 0 });
    expect((await directory.query(`select to_regclass('shardctl.units') is not null as ok`)).rows[0].ok).toBe(true);
  });

  it('refuses an unknown shard, a malformed shard name and a bad expected load, and changes nothing', async () => {
    const t = tid();
    const before = await footprint([t]);
    const unknown = await caught(createTenant(deps(), { tenant: t, shard: 'shard-zz', actor: 'test' }));
    expect(unknown.type).toBe('NotFound');
    expect(unknown.message).toContain('unknown shard "shard-zz"');
    expect((await caught(createTenant(deps(), { tenant: t, shard: "x'; --", actor: 'test' }))).type).toBe('InvalidInput');
    expect((await caught(createTenant(deps(), { tenant: t, shard: 'shard-a', expectedLoad: -1, actor: 'test' }))).type).toBe('InvalidInput');
    expect((await caught(createTenant(deps(), { tenant: t, shard: 'shard-a', expectedLoad: 1.5, actor: 'test' }))).type).toBe('InvalidInput');
    expect((await caught(createTenant(deps(), { tenant: t, shard: 'shard-a', actor: ' ' }))).type).toBe('InvalidInput');
    expect(await footprint([t])).toEqual(before);
    expect(before).toEqual({ units: 0, audit: 0, fences: 0 });
  });

  it('refuses a tenant whose fence already exists on the shard, and changes nothing', async () => {
    const t = tid();
    await setUnitFence(shardPool('shard-b'), { unit: t, epoch: 4, owned: false, frozen: false });
    const before = await footprint([t]);
    const e = await caught(createTenant(deps(), { tenant: t, shard: 'shard-b', actor: 'test' }));
    expect(e.type).toBe('Conflict');
    expect(e.message).toContain(`shard shard-b already has a fence for tenant ${t} (epoch 4, not owned)`);
    expect(await footprint([t])).toEqual(before);
    expect(await getUnitFence(shardPool('shard-b'), t)).toEqual({ unit: t, epoch: 4, owned: false, frozen: false });
  });

  it('removes the fence it wrote when the directory insert fails', async () => {
    const t = tid();
    const e = await caught(
      createTenant(
        deps({
          afterFence: async ({ shard }) => {
            expect(await getUnitFence(shardPool(shard), t)).toMatchObject({ epoch: 1, owned: true });
            throw new Error('injected: directory insert failed');
          },
        }),
        { tenant: t, shard: 'shard-c', actor: 'test' },
      ),
    );
    expect(e.message).toBe('injected: directory insert failed');
    expect(await footprint([t])).toEqual({ units: 0, audit: 0, fences: 0 });
  });

  it('loses cleanly to a concurrent creator on another shard: AlreadyExists, and its own fence removed', async () => {
    const t = tid();
    let winner: unknown;
    const e = await caught(
      createTenant(
        deps({
          afterFence: async () => {
            winner = await createTenant(deps(), { tenant: t, shard: 'shard-c', actor: 'racer' });
          },
        }),
        { tenant: t, shard: 'shard-b', actor: 'test' },
      ),
    );
    expect(e.type).toBe('AlreadyExists');
    expect(await getTenant(directory, t)).toEqual(winner);
    expect(await getUnitFence(shardPool('shard-b'), t)).toBeUndefined();
    expect(await getUnitFence(shardPool('shard-c'), t)).toMatchObject({ epoch: 1, owned: true });
  });

  it('without a shard, places the tenant on an open shard of the config', async () => {
    const t = tid();
    const p = await createTenant(deps(), { tenant: t, actor: 'test' });
    const shard = (await listShards(directory)).find((s) => s.name === p.shard)!;
    expect(config.shards.map((s) => s.name)).toContain(p.shard);
    expect(shard.status).toBe('open');
    expect(await getUnitFence(shardPool(p.shard), t)).toMatchObject({ epoch: 1, owned: true });
  });

  it('fails with NoCapacity when no open shard has room, and changes nothing', async () => {
    const t = tid();
    const e = await caught(createTenant(deps(), { tenant: t, expectedLoad: 1e12, actor: 'test' }));
    expect(e.type).toBe('NoCapacity');
    expect(e.message).toBe('no open shard has room for 1000000000000: add a shard or raise capacity');
    expect(await footprint([t])).toEqual({ units: 0, audit: 0, fences: 0 });
  });

  it('fails fast with DirectoryUnavailable when the directory is down, touching no shard', async () => {
    const t = tid();
    const port = await freePort();
    const cfg: Config = { ...config, directory: { dsn: `postgres://shardctl:shardctl-dev@127.0.0.1:${port}/shardctl` } };
    const dead = openDirectoryPool(cfg, { connectionTimeoutMillis: 1000 });
    extraPools.push(dead);
    const t0 = Date.now();
    const e = await caught(createTenant({ directory: dead, shardPool, config: cfg }, { tenant: t, shard: 'shard-a', actor: 'test' }));
    expect(e.type).toBe('DirectoryUnavailable');
    expect(e.message).toContain(`127.0.0.1:${port}`);
    expect(e.message).not.toContain('shardctl-dev');
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(await footprint([t])).toEqual({ units: 0, audit: 0, fences: 0 });
  });
});

describe('shardctl tenant (CLI)', () => {
  const root = projectRoot();
  function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      execFile(process.execPath, [path.join(root, 'cli/shardctl.js'), ...args], { cwd: root, timeout: 60_000 }, (err, stdout, stderr) => {
        resolve({ code: err ? ((err as any).code ?? 1) : 0, stdout, stderr });
      });
    });
  }

  it('creates a tenant and shows it as JSON', async () => {
    const t = tid('cli');
    const made = await cli(['tenant', 'create', t, '--shard', 'shard-b', '--expected-load', '4', '--actor', 'cli-test', '--json']);
    expect(made.stderr).toBe('');
    expect(made.code).toBe(0);
    expect(JSON.parse(made.stdout)).toMatchObject({ tenant: t, shard: 'shard-b', epoch: 1, state: 'active', moveId: null, expectedLoad: 4 });

    const shown = await cli(['--config', path.join(root, '.dev/config.json'), 'tenant', 'show', t, '--json']);
    expect(shown.code).toBe(0);
    const v = JSON.parse(shown.stdout);
    expect(v).toMatchObject({ tenant: t, shard: 'shard-b', epoch: 1, state: 'active', moveId: null });
    expect(typeof v.updatedAt).toBe('string');
    expect(await getUnitFence(shardPool('shard-b'), t)).toMatchObject({ epoch: 1, owned: true });
    expect(await auditRows(t)).toEqual([expect.objectContaining({ actor: 'cli-test', action: 'tenant.create' })]);

    const listed = await cli(['tenant', 'list', '--json']);
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout).tenants).toContainEqual(v);

    const again = await cli(['tenant', 'create', t, '--shard', 'shard-a']);
    expect(again.code).toBe(4); // refused by the current state
    expect(again.stderr.trim().split('\n')).toEqual([`shardctl: tenant ${t} already exists on shard-b (epoch 1, active)`]);
  });

  it('refuses bad input with a one-line error and exit 2 (3 for what does not exist), creating nothing', async () => {
    const t = tid('cli');
    const cases: [string[], number][] = [
      [['tenant', 'create', ''], 2],
      [['tenant', 'create', "a'; drop table x;--"], 2],
      [['tenant', 'create', 'A B'], 2],
      [['tenant', 'create', t, '--shard', 'shard-zz'], 3],
      [['tenant', 'create', t, '--expected-load', 'lots'], 2],
      [['tenant', 'create', t, '--expected-load', '-3'], 2],
      [['tenant', 'show', uniq('missing')], 3],
    ];
    const before = await footprint([t, "a'; drop table x;--", 'A B', '']);
    for (const [args, code] of cases) {
      const r = await cli(args);
      expect(r.code, args.join(' ')).toBe(code);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n'), args.join(' ')).toHaveLength(1);
      expect(r.stderr).toMatch(/^shardctl: /);
    }
    expect(await footprint([t, "a'; drop table x;--", 'A B', ''])).toEqual(before);
  });

  it('reports an unreachable directory (from --config) on one line with exit 5', async () => {
    const port = await freePort();
    const file = path.join(os.tmpdir(), `${uniq('shardctl-cfg')}.json`);
    fs.writeFileSync(file, JSON.stringify({ ...config, directory: { dsn: `postgres://shardctl:shardctl-dev@127.0.0.1:${port}/shardctl` } }));
    try {
      const t = tid('cli');
      const r = await cli(['--config', file, 'tenant', 'create', t, '--shard', 'shard-a']);
      expect(r.code).toBe(5);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain('placement directory unreachable');
      expect(await footprint([t])).toEqual({ units: 0, audit: 0, fences: 0 });
    } finally {
      fs.unlinkSync(file);
    }
  });
});
