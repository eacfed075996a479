// The router against the real stack: stale routes are refused by the shard and retried on the
// new owner, a frozen cache can never write, grants and input are checked before any I/O,
// frozen units make writers wait (not readers), NOTIFY and directory outages.
import { describe, it, expect, beforeAll, afterAll, afterEach, vi } from 'vitest';
import { Pool } from 'pg';
import { testConfig, uniq, shardPool, directoryPool, closePools } from '../helpers/stack';
import { shardByName } from '../../lib/config';
import { migrateDirectory } from '../../lib/directory/schema';
import { setUnitFence } from '../../lib/shard/fence';
import { FENCE_LOCK_CLASS } from '../../lib/shard/schema';
import { Router, RouterOptions } from '../../lib/router';
import { prepareShard } from '../../lib/shard/prepare';
import { ShardctlError } from '../../lib/errors';

const SHARDS = ['shard-a', 'shard-b', 'shard-c'] as const;
type ShardName = (typeof SHARDS)[number];
let dir: Pool;
const shards = {} as Record<ShardName, Pool>;
const routers: Router[] = [];

/** Schema `shardctl`, the demo tables and the fence trigger on them (serialized with `shards prepare`). */
async function prepareShardForTest(pool: Pool) {
  // The real `shards prepare` path: schema shardctl, the demo tables and the fence on them.
  await prepareShard(pool, testConfig(), { demoSchema: true });
}

beforeAll(async () => {
  dir = directoryPool();
  await migrateDirectory(dir);
  for (const s of SHARDS) {
    await dir.query(`insert into shardctl.shards(name) values ($1) on conflict (name) do nothing`, [s]);
    shards[s] = shardPool(s);
    await prepareShardForTest(shards[s]);
  }
});

afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.all(routers.splice(0).map((r) => r.close()));
});

afterAll(closePools);

async function newRouter(opts: RouterOptions = {}): Promise<Router> {
  const r = await Router.create(testConfig(), { snapshotTtlMs: 60_000, ...opts });
  routers.push(r);
  return r;
}

/** A tenant placed on `shard` at epoch 1 in the directory, owned there by the fence. */
async function newTenant(prefix: string, shard: ShardName = 'shard-a'): Promise<string> {
  const t = uniq(prefix);
  await dir.query(`insert into shardctl.units(unit, kind, shard, epoch, state) values ($1, 'tenant', $2, 1, 'active')`, [t, shard]);
  await setUnitFence(shards[shard], { unit: t, epoch: 1, owned: true, frozen: false });
  return t;
}

/** A switch as the move does it: source disowned at e, target owns e+1 — directory updated, no NOTIFY. */
async function switchOwner(t: string, from: ShardName, to: ShardName, epoch: number) {
  await setUnitFence(shards[from], { unit: t, epoch, owned: false, frozen: false });
  await setUnitFence(shards[to], { unit: t, epoch: epoch + 1, owned: true, frozen: false });
  await dir.query(`update shardctl.units set shard = $2, epoch = $3, updated_at = now() where unit = $1`, [t, to, epoch + 1]);
}

/** The directory names shard-b the owner at epoch 2 and announces it, in one transaction, as placements do it. */
async function announceOnShardB(t: string) {
  const c = await dir.connect();
  try {
    await c.query('begin');
    await c.query(`update shardctl.units set shard = 'shard-b', epoch = 2, updated_at = now() where unit = $1`, [t]);
    const gen = Number((await c.query('select value from shardctl.generation')).rows[0].value);
    await c.query('select pg_notify($1, $2)', [
      'shardctl_placement',
      JSON.stringify({ unit: t, shard: 'shard-b', epoch: 2, state: 'active', generation: gen }),
    ]);
    await c.query('commit');
  } finally {
    c.release();
  }
}

async function accounts(shard: ShardName, t: string): Promise<number> {
  return Number((await shards[shard].query('select count(*) from public.accounts where tenant_id = $1', [t])).rows[0].count);
}

const insertAccount =
  (t: string, name = 'acct') =>
  async (tx: import('pg').PoolClient) => {
    await tx.query('insert into public.accounts(tenant_id, name) values ($1, $2)', [t, name]);
    return 'ok';
  };

const grantAll = { tenants: '*' as const };

/** The port a shard's server listens on, from the stack's config (never a hard-coded default). */
/** Waits until a backend on `shard` waits for the unit's fence lock in `mode`. */
async function waitForFenceWaiter(t: string, shard: ShardName, mode: 'ExclusiveLock' | 'ShareLock' = 'ExclusiveLock'): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const r = await shards[shard].query(
      `select 1 from pg_locks where locktype = 'advisory' and classid = $1 and objid = hashtext($2)::oid and objsubid = 2 and mode = $3 and not granted`,
      [FENCE_LOCK_CLASS, t, mode],
    );
    if (r.rowCount) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`nobody waited for the fence lock of ${t} on ${shard} in ${mode}`);
}

function portOf(shard: string): string {
  return new URL(shardByName(testConfig(), shard).dsn).port;
}

describe('router: stale routes', () => {
  it('refuses a stale cached route before any row changes, refreshes and writes on the new owner', async () => {
    const t = await newTenant('rt-stale');
    const router = await newRouter();
    await router.withTenant(t, grantAll, 'write', insertAccount(t, 'before'));
    expect(await accounts('shard-a', t)).toBe(1);

    await switchOwner(t, 'shard-a', 'shard-b', 1);
    expect(router.lookup(t)).toMatchObject({ shard: 'shard-a', epoch: 1 }); // cache is stale

    let calls = 0;
    const out = await router.withTenant(t, grantAll, 'write', async (tx) => {
      calls++;
      return insertAccount(t, 'after')(tx);
    });
    expect(out).toBe('ok');
    expect(await accounts('shard-a', t)).toBe(1); // old owner unchanged
    expect(await accounts('shard-b', t)).toBe(1); // landed on the new owner
    expect(calls).toBe(1); // the stale attempt was refused before fn ran
    expect(router.lookup(t)).toMatchObject({ shard: 'shard-b', epoch: 2 });
    expect(router.metrics().staleRetries).toBe(1);
  });

  it('a hand-off raised while a write transaction is open waits for it: the write commits on the old owner first', async () => {
    const t = await newTenant('rt-midtx');
    const router = await newRouter();
    let handOff: Promise<void> | undefined;
    let calls = 0;
    await router.withTenant(t, grantAll, 'write', async (tx) => {
      calls++;
      // The transaction was checked when it opened and holds the unit's lock: the hand-off queues.
      handOff ??= switchOwner(t, 'shard-a', 'shard-b', 1);
      await waitForFenceWaiter(t, 'shard-a');
      await tx.query('insert into public.accounts(tenant_id, name) values ($1, $2)', [t, 'before-hand-off']);
    });
    await handOff;
    expect(calls).toBe(1);
    expect(await accounts('shard-a', t)).toBe(1); // committed ahead of the fence (the move's stream carries it)
    // The next write finds the old owner fenced and lands on the new one.
    await router.withTenant(t, grantAll, 'write', insertAccount(t, 'after'));
    expect(await accounts('shard-a', t)).toBe(1);
    expect(await accounts('shard-b', t)).toBe(1);
  });

  for (const isolation of ['read committed', 'repeatable read'] as const) {
    it(`a ${isolation} write queued behind an in-progress hand-off is refused when it commits, and the retries land on the new owner`, async () => {
      const t = await newTenant('rt-queued');
      const router = await newRouter();
      // A hand-off in progress on shard-a: it holds the unit's lock exclusively, not yet committed.
      const fence = await shards['shard-a'].connect();
      try {
        await fence.query('begin');
        await fence.query('select pg_advisory_xact_lock($1, hashtext($2))', [FENCE_LOCK_CLASS, t]);
        await fence.query('update shardctl.fence set owned = false where unit = $1', [t]);
        const ports: string[] = [];
        const write = router.withTenant(
          t,
          grantAll,
          'write',
          async (tx) => {
            ports.push(String((await tx.query('select inet_server_port() as p')).rows[0].p));
            await tx.query('insert into public.accounts(tenant_id, name) values ($1, $2)', [t, isolation]);
          },
          { isolation },
        );
        await waitForFenceWaiter(t, 'shard-a', 'ShareLock'); // the transaction's opening statement waits
        await setUnitFence(shards['shard-b'], { unit: t, epoch: 2, owned: true, frozen: false });
        await dir.query(`update shardctl.units set shard = 'shard-b', epoch = 2, updated_at = now() where unit = $1`, [t]);
        await fence.query('commit');
        await write;
        expect(ports).toEqual([portOf('shard-b')]); // fn never ran on the old owner
      } finally {
        await fence.query('rollback').catch(() => {});
        fence.release();
      }
      // Read committed sees the hand-off (stale route); repeatable read's snapshot predates it (40001, then stale).
      expect(router.metrics().serializationRetries).toBe(isolation === 'read committed' ? 0 : 1);
      expect(router.metrics().staleRetries).toBe(1);
      expect(await accounts('shard-a', t)).toBe(0);
      expect(await accounts('shard-b', t)).toBe(1);
    });
  }

  it('routes a stale read to the new owner instead of serving the old copy', async () => {
    const t = await newTenant('rt-read');
    const router = await newRouter();
    await router.withTenant(t, grantAll, 'write', insertAccount(t, 'old-copy'));
    await switchOwner(t, 'shard-a', 'shard-b', 1);
    const names = await router.withTenant(
      t,
      grantAll,
      'read',
      async (tx) => (await tx.query('select name from public.accounts where tenant_id = $1', [t])).rows,
    );
    expect(names).toEqual([]); // shard-b holds no copy in this test: the old copy was not served
  });

  it('a router with a frozen cache can never write after the fence moved, and ends in a retriable StaleRoute', async () => {
    const t = await newTenant('rt-frozencache');
    const router = await newRouter({ freezeCache: true });
    await switchOwner(t, 'shard-a', 'shard-b', 1);
    const before = router.metrics().transactions;
    let calls = 0;
    const err = await router
      .withTenant(
        t,
        grantAll,
        'write',
        async (tx) => {
          calls++;
          return insertAccount(t)(tx);
        },
        { retryBudget: 4 },
      )
      .catch((e) => e);
    expect(err).toBeInstanceOf(ShardctlError);
    expect(err).toMatchObject({ type: 'StaleRoute', retriable: true });
    expect(router.metrics().transactions - before).toBe(5); // every attempt went to shard-a and was refused
    expect(calls).toBe(0);
    expect(await accounts('shard-a', t)).toBe(0);
    expect(await accounts('shard-b', t)).toBe(0);
    expect(router.lookup(t)).toMatchObject({ shard: 'shard-a', epoch: 1 });
  });
});

describe('router: grants and input', () => {
  it('a grant for tenant A can neither read nor write tenant B on the same shard, and sends nothing', async () => {
    const a = await newTenant('rt-ga');
    const b = await newTenant('rt-gb');
    const router = await newRouter();
    const connect = vi.spyOn(Pool.prototype, 'connect');
    const fn = vi.fn(insertAccount(b));
    for (const mode of ['read', 'write'] as const) {
      await expect(router.withTenant(b, { tenants: [a] }, mode, fn)).rejects.toMatchObject({ type: 'Forbidden' });
    }
    expect(fn).not.toHaveBeenCalled();
    expect(connect).not.toHaveBeenCalled();
    expect(router.metrics().transactions).toBe(0);
    expect(await accounts('shard-a', b)).toBe(0);
    // The spy does see the router's checkouts: the permitted call goes through it.
    connect.mockClear();
    await router.withTenant(a, { tenants: [a] }, 'write', insertAccount(a));
    expect(connect).toHaveBeenCalledTimes(1);
    expect(await accounts('shard-a', a)).toBe(1);
  });

  it("the shard refuses a row of tenant B written inside tenant A's transaction (SC403)", async () => {
    const a = await newTenant('rt-sa');
    const b = await newTenant('rt-sb');
    const router = await newRouter();
    const err = await router.withTenant(a, { tenants: [a] }, 'write', insertAccount(b)).catch((e) => e);
    expect(err.code).toBe('SC403');
    expect(await accounts('shard-a', a)).toBe(0);
    expect(await accounts('shard-a', b)).toBe(0);
  });

  it('refuses empty, quoted and SQL-text tenant ids with InvalidInput and sends nothing', async () => {
    const router = await newRouter();
    const connect = vi.spyOn(Pool.prototype, 'connect');
    const fn = vi.fn(async () => 'never');
    const bad: unknown[] = [
      '',
      "acme'",
      '"acme"',
      "x'; drop table public.accounts; --",
      'select 1',
      'Acme',
      ' acme',
      'a'.repeat(64),
      'a\u0000b',
      '../etc',
      null,
      42,
    ];
    for (const id of bad) {
      await expect(router.withTenant(id as string, grantAll, 'write', fn)).rejects.toMatchObject({ type: 'InvalidInput' });
    }
    expect(fn).not.toHaveBeenCalled();
    expect(connect).not.toHaveBeenCalled();
    expect(router.metrics().transactions).toBe(0);
  });

  it('reports an unknown tenant as NotFound', async () => {
    const router = await newRouter();
    await expect(router.withTenant(uniq('rt-none'), grantAll, 'read', async () => 1)).rejects.toMatchObject({ type: 'NotFound' });
  });
});

describe('router: frozen units', () => {
  it('a write waits while the unit is frozen and succeeds once unfrozen within the deadline', async () => {
    const t = await newTenant('rt-wait');
    const router = await newRouter();
    await setUnitFence(shards['shard-a'], { unit: t, epoch: 1, owned: true, frozen: true });
    const started = Date.now();
    const write = router.withTenant(t, grantAll, 'write', insertAccount(t), { deadlineMs: 5000 });
    await new Promise((r) => setTimeout(r, 300));
    expect(await accounts('shard-a', t)).toBe(0);
    await setUnitFence(shards['shard-a'], { unit: t, epoch: 1, owned: true, frozen: false });
    await expect(write).resolves.toBe('ok');
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(await accounts('shard-a', t)).toBe(1);
    expect(router.metrics().frozenWaits).toBeGreaterThan(1);
  });

  it('a write still frozen at the deadline fails with a retriable Frozen error and writes nothing', async () => {
    const t = await newTenant('rt-frz');
    const router = await newRouter();
    await setUnitFence(shards['shard-a'], { unit: t, epoch: 1, owned: true, frozen: true });
    const started = Date.now();
    const err = await router.withTenant(t, grantAll, 'write', insertAccount(t), { deadlineMs: 300 }).catch((e) => e);
    const took = Date.now() - started;
    expect(err).toMatchObject({ type: 'Frozen', retriable: true, message: `tenant ${t} is frozen for cutover; retry` });
    expect(took).toBeGreaterThanOrEqual(290);
    expect(took).toBeLessThan(2000);
    expect(await accounts('shard-a', t)).toBe(0);
  });

  it('a switch during the frozen wait sends the retry to the new owner from the announced placement, with no stale attempt', async () => {
    const t = await newTenant('rt-frzswitch');
    const router = await newRouter({ listen: true });
    await setUnitFence(shards['shard-a'], { unit: t, epoch: 1, owned: true, frozen: true });
    const write = router.withTenant(
      t,
      grantAll,
      'write',
      async (tx, route) => {
        await insertAccount(t)(tx);
        return route.shard;
      },
      { deadlineMs: 10_000 },
    );
    await vi.waitFor(() => expect(router.metrics().frozenWaits).toBeGreaterThan(0), { timeout: 5000, interval: 10 });
    // The cutover's switch: the target accepts epoch 2 and the directory names it (announced);
    // the source stays frozen and owned at epoch 1 until the router has heard.
    await setUnitFence(shards['shard-b'], { unit: t, epoch: 2, owned: true, frozen: false });
    await announceOnShardB(t);
    await vi.waitFor(() => expect(router.lookup(t)).toMatchObject({ shard: 'shard-b', epoch: 2 }), { timeout: 5000, interval: 10 });
    expect(await write).toBe('shard-b');
    expect(router.metrics().staleRetries).toBe(0); // never sent to the old owner after the switch
    expect(await accounts('shard-b', t)).toBe(1);
    expect(await accounts('shard-a', t)).toBe(0);
    await setUnitFence(shards['shard-a'], { unit: t, epoch: 1, owned: false, frozen: false });
  });

  it('reads continue while the unit is frozen', async () => {
    const t = await newTenant('rt-frzread');
    const router = await newRouter();
    await router.withTenant(t, grantAll, 'write', insertAccount(t));
    await setUnitFence(shards['shard-a'], { unit: t, epoch: 1, owned: true, frozen: true });
    const started = Date.now();
    const n = await router.withTenant(t, grantAll, 'read', async (tx) =>
      Number((await tx.query('select count(*) from public.accounts where tenant_id = $1', [t])).rows[0].count),
    );
    expect(n).toBe(1);
    expect(Date.now() - started).toBeLessThan(1000);
    expect(router.metrics().frozenWaits).toBe(0);
  });
});

describe('router: directory snapshot', () => {
  it('NOTIFY updates the snapshot so the next write goes straight to the new owner', async () => {
    const t = await newTenant('rt-notify');
    const router = await newRouter({ listen: true });
    expect(router.metrics().listening).toBe(true);
    await setUnitFence(shards['shard-a'], { unit: t, epoch: 1, owned: false, frozen: false });
    await setUnitFence(shards['shard-b'], { unit: t, epoch: 2, owned: true, frozen: false });
    await announceOnShardB(t);
    await vi.waitFor(() => expect(router.lookup(t)).toMatchObject({ shard: 'shard-b', epoch: 2 }), { timeout: 5000, interval: 20 });
    const before = router.metrics();
    await router.withTenant(t, grantAll, 'write', insertAccount(t));
    const after = router.metrics();
    expect(after.staleRetries - before.staleRetries).toBe(0);
    expect(after.transactions - before.transactions).toBe(1);
    expect(after.notifications).toBeGreaterThan(0);
    expect(await accounts('shard-b', t)).toBe(1);
  });

  it('the TTL refresh picks up a directory change that was never announced', async () => {
    const t = await newTenant('rt-ttl');
    const router = await newRouter({ listen: false, snapshotTtlMs: 50, fullReloadMs: 200 });
    await switchOwner(t, 'shard-a', 'shard-b', 1);
    await vi.waitFor(() => expect(router.lookup(t)).toMatchObject({ shard: 'shard-b', epoch: 2 }), { timeout: 5000, interval: 20 });
    expect(router.metrics().snapshotAgeMs).toBeLessThan(1000);
    expect(router.metrics().refreshes).toBeGreaterThan(1);
  });

  it('keeps routing from the cached snapshot when the directory is unreachable, and says so in metrics', async () => {
    const t = await newTenant('rt-dirdown');
    const router = await newRouter({ connectTimeoutMs: 500 });
    expect(router.metrics().directoryReachable).toBe(true);
    await router.setDirectoryDsn('postgres://shardctl:shardctl-dev@127.0.0.1:1/shardctl');
    await expect(router.refresh()).rejects.toMatchObject({ type: 'DirectoryUnavailable', retriable: true });
    await router.withTenant(t, grantAll, 'write', insertAccount(t));
    const n = await router.withTenant(
      t,
      grantAll,
      'read',
      async (tx) => (await tx.query('select count(*) from public.accounts where tenant_id = $1', [t])).rows[0].count,
    );
    expect(Number(n)).toBe(1);
    const m = router.metrics();
    expect(m.directoryReachable).toBe(false);
    expect(m.units).toBeGreaterThan(0);
    expect(m.refreshFailures).toBeGreaterThan(0);
    expect(m.listening).toBe(false);
    expect(m.lastDirectoryError).toBeTruthy();
    // A tenant the snapshot never had cannot be resolved: a retriable error, not NotFound.
    await expect(router.withTenant(uniq('rt-unknown'), grantAll, 'read', async () => 1)).rejects.toMatchObject({
      type: 'DirectoryUnavailable',
      retriable: true,
    });
    // Back to the real directory: it recovers.
    await router.setDirectoryDsn(testConfig().directory.dsn);
    await router.refresh();
    expect(router.metrics().directoryReachable).toBe(true);
  });

  it('fails create with DirectoryUnavailable when there is no directory to load a first snapshot from', async () => {
    await expect(
      Router.create(testConfig(), { directoryDsn: 'postgres://shardctl:shardctl-dev@127.0.0.1:1/shardctl', connectTimeoutMs: 500 }),
    ).rejects.toMatchObject({
      type: 'DirectoryUnavailable',
    });
  });
});

describe('router: transaction contract', () => {
  it('an error caught inside fn cannot turn into a silent success: the commit-turned-rollback is reported', async () => {
    const t = await newTenant('rt-swallow');
    const router = await newRouter();
    const err = await router
      .withTenant(t, grantAll, 'write', async (tx) => {
        await tx.query('insert into public.accounts(tenant_id, name) values ($1, $2)', [t, 'lost']);
        await tx.query('select 1/0').catch(() => {}); // swallowed
        return 'looks fine';
      })
      .catch((e) => e);
    expect(err).toMatchObject({ type: 'Conflict' });
    expect(String(err.message)).toContain('division by zero');
    expect(await accounts('shard-a', t)).toBe(0);
  });

  it('re-runs fn from scratch after a serialization failure: the first attempt left nothing behind', async () => {
    const t = await newTenant('rt-40001');
    const router = await newRouter();
    let calls = 0;
    await router.withTenant(t, grantAll, 'write', async (tx) => {
      calls++;
      await tx.query('insert into public.accounts(tenant_id, name) values ($1, $2)', [t, `attempt-${calls}`]);
      if (calls === 1) throw Object.assign(new Error('could not serialize access'), { code: '40001' });
    });
    expect(calls).toBe(2);
    expect((await shards['shard-a'].query('select name from public.accounts where tenant_id = $1', [t])).rows).toEqual([{ name: 'attempt-2' }]);
    expect(router.metrics().serializationRetries).toBe(1);
  });

  it("a statement that outruns the call's deadline is cancelled by the shard and the call fails TimedOut, rolled back", async () => {
    const t = await newTenant('rt-deadline');
    const router = await newRouter();
    const err = await router
      .withTenant(
        t,
        grantAll,
        'write',
        async (tx) => {
          await insertAccount(t)(tx);
          await tx.query('select pg_sleep(30)');
          return 'ok';
        },
        { deadlineMs: 800 },
      )
      .catch((e) => e);
    expect(err).toMatchObject({ type: 'TimedOut', retriable: true });
    expect(err.message).toMatch(/ran past the call's deadline/);
    expect(await accounts('shard-a', t)).toBe(0);
    // The shard is not left running it.
    const running = await shards['shard-a'].query(`select count(*)::int as n from pg_stat_activity where query = 'select pg_sleep(30)' and state = 'active'`);
    expect(running.rows[0].n).toBe(0);
  });

  it('a call that finds the shard pool exhausted retries its connection within the deadline instead of failing at the connect timeout', async () => {
    const t = await newTenant('rt-pool');
    const router = await newRouter({ poolMax: 1, connectTimeoutMs: 200 });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let holding!: () => void;
    const held = new Promise<void>((r) => (holding = r));
    const first = router.withTenant(
      t,
      grantAll,
      'read',
      async () => {
        holding();
        await gate;
        return 'first';
      },
      { deadlineMs: 10_000 },
    );
    await held;
    const second = router.withTenant(t, grantAll, 'write', insertAccount(t, 'second'), { deadlineMs: 10_000 });
    await vi.waitFor(() => expect(router.metrics().connectRetries).toBeGreaterThan(0), { timeout: 5000, interval: 20 });
    release();
    expect(await first).toBe('first');
    expect(await second).toBe('ok');
    expect(await accounts('shard-a', t)).toBe(1);
    // Past the deadline it says so, naming the shard.
    let release2!: () => void;
    const gate2 = new Promise<void>((r) => (release2 = r));
    const hog = router.withTenant(t, grantAll, 'read', () => gate2, { deadlineMs: 10_000 });
    await new Promise((r) => setTimeout(r, 100));
    const err = await router.withTenant(t, grantAll, 'write', insertAccount(t, 'late'), { deadlineMs: 700 }).catch((e) => e);
    release2();
    await hog;
    expect(err).toMatchObject({ type: 'Unavailable', retriable: true });
    expect(err.message).toMatch(/no connection to shard shard-a within the deadline/);
    expect(await accounts('shard-a', t)).toBe(1);
  });

  it('propagates an ordinary error unchanged and does not retry it', async () => {
    const t = await newTenant('rt-other');
    const router = await newRouter();
    let calls = 0;
    const err = await router
      .withTenant(t, grantAll, 'write', async (tx) => {
        calls++;
        await tx.query(`insert into public.accounts(tenant_id, name) values ($1, null)`, [t]);
      })
      .catch((e) => e);
    expect(err.code).toBe('23502');
    expect(calls).toBe(1);
  });

  it('the client handed to fn is unusable after the call returns', async () => {
    const t = await newTenant('rt-leak');
    const router = await newRouter();
    let leaked: import('pg').PoolClient | undefined;
    await router.withTenant(t, grantAll, 'read', async (tx) => {
      leaked = tx;
    });
    expect(() => leaked!.query('select 1')).toThrow(TypeError);
  });

  it("the client handed to fn refuses release: its connection stays the router's until the transaction ends", async () => {
    const t = await newTenant('rt-release');
    const router = await newRouter();
    const got = await router.withTenant(t, grantAll, 'read', async (tx) => {
      expect(() => tx.release()).toThrow(/belongs to the router/);
      // Still this transaction's connection: the unit set by the opening is there.
      return (await tx.query("select current_setting('shardctl.unit') as unit")).rows[0].unit;
    });
    expect(got).toBe(t);
  });

  it('sets unit and epoch for the transaction and runs reads read-only', async () => {
    const t = await newTenant('rt-settings');
    const router = await newRouter();
    const row = await router.withTenant(
      t,
      grantAll,
      'read',
      async (tx) =>
        (
          await tx.query(
            `select current_setting('shardctl.unit') as unit, current_setting('shardctl.epoch') as epoch, current_setting('transaction_read_only') as ro`,
          )
        ).rows[0],
    );
    expect(row).toEqual({ unit: t, epoch: '1', ro: 'on' });
    const err = await router.withTenant(t, grantAll, 'read', insertAccount(t)).catch((e) => e);
    expect(err.code).toBe('25006');
  });
});
