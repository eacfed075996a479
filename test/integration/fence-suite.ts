// Proof of DESIGN.md §3 against a real shard: the fence check refuses stale, foreign, unrouted
// and frozen writes before any row changes; a fence change waits for in-flight writers and, once
// it returns, no write under the old state commits — at every isolation level. Each check is
// proven both for a transaction opened as the router opens it (shardctl.open_unit_write, checked
// once) and for a writer outside the router that only sets unit and epoch (checked by the
// statement trigger). The suite runs once per implementation of the fence (fence.test.ts: the
// native one, fence-plpgsql.test.ts: the plpgsql one), each in a database of its own on shard-a's
// server, so a prepare of the shard by another file never swaps the implementation under test.
import { describe, it, expect, beforeAll, afterAll, afterEach } from 'vitest';
import type { Config } from '../../lib/config';
import { Client } from 'pg';
import type { Pool, PoolClient } from 'pg';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { testConfig, uniq } from '../helpers/stack';
import { ensureDatabase, openPool } from '../../lib/connections';
import { existsSync } from 'node:fs';
import { ensureNativeFence, stackAt } from '../../lib/dev/stack';
import { shardByName } from '../../lib/config';
import { prepareShard } from '../../lib/shard/prepare';
import { setUnitFence, FenceState } from '../../lib/shard/fence';
import { FENCE_LOCK_CLASS } from '../../lib/shard/schema';
import { DEMO_TABLES } from '../../lib/demo/schema';
import { SQLSTATE, ShardctlError } from '../../lib/errors';
import { openFailure, openTransactionSql } from '../../lib/router/open-tx';
import { proofSql } from '../../lib/shard/fence-sql';

const SHARD = 'shard-a';
type Isolation = 'read committed' | 'repeatable read' | 'serializable';
/** How a transaction carries its route: the router's open_unit_write, or set_config only. */
type Via = 'router' | 'settings';
const VIAS: Via[] = ['router', 'settings'];
const VIA_NAME: Record<Via, string> = { router: "opened by the router's open_unit_write", settings: 'unit and epoch set by a writer outside the router' };
interface Route {
  unit?: string;
  epoch?: number | string;
  isolation?: Isolation;
  via?: Via;
}

let pool: Pool;
/** The suite's database (on shard-a's server) and the configuration it was prepared with. */
let dsn: string;
let suiteConfig: Config;
const units: string[] = [];
/** Transactions a test opened and has not ended: a failing test must not leak them (or their locks). */
const open = new Set<PoolClient>();
/** What a write refused by a fence change may fail with (never: commit). */
const REFUSED = ['40001', SQLSTATE.staleRoute, SQLSTATE.frozen];
/** The router's route check (lib/router/open-tx.ts), with unit and epoch as parameters. */
const ROUTER_OPEN = 'call shardctl.open_unit_write($1, $2)';

async function newUnit(state: Partial<Omit<FenceState, 'unit'>> = {}, opts: { fence?: boolean } = {}): Promise<string> {
  const unit = uniq('fence');
  units.push(unit);
  if (opts.fence !== false) {
    const r = await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: false, ...state });
    expect(r.ok).toBe(true);
  }
  return unit;
}

async function begin(route: Route): Promise<PoolClient> {
  const c = await pool.connect();
  open.add(c);
  await c.query(`begin isolation level ${route.isolation ?? 'read committed'}`);
  if (route.via === 'router') {
    // The check runs here, once, and holds the unit's lock until the transaction ends.
    await c.query(ROUTER_OPEN, [route.unit, route.epoch]);
    return c;
  }
  if (route.unit !== undefined) await c.query(`select set_config('shardctl.unit', $1, true)`, [route.unit]);
  if (route.epoch !== undefined) await c.query(`select set_config('shardctl.epoch', $1, true)`, [String(route.epoch)]);
  return c;
}

async function end(c: PoolClient, how: 'commit' | 'rollback') {
  if (!open.delete(c)) return;
  try {
    await c.query(how);
  } finally {
    c.release();
  }
}

/** One transaction opened for `route`, as the router opens it; commits, or rolls back and rethrows. */
async function inTx<T>(route: Route, fn: (c: PoolClient) => Promise<T>): Promise<T> {
  const c = await begin(route);
  try {
    const out = await fn(c);
    await end(c, 'commit');
    return out;
  } catch (e) {
    await end(c, 'rollback').catch(() => {});
    throw e;
  }
}

/** The SQLSTATE the promise fails with, or 'ok'. */
async function outcome(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e: any) {
    if (!e?.code) throw e;
    return e.code;
  }
}

const insertAccounts = (c: PoolClient | Pool, unit: string, names: string[]) =>
  c.query(`insert into public.accounts(tenant_id, name) select $1, unnest($2::text[])`, [unit, names]);

async function accountNames(unit: string): Promise<string[]> {
  const r = await pool.query('select name from public.accounts where tenant_id = $1 order by name', [unit]);
  return r.rows.map((x) => x.name);
}

/** Waits until a backend waits for the unit's fence lock in `mode` (proof that it is blocked, not slow). */
async function waitForLockWaiter(unit: string, mode: 'ExclusiveLock' | 'ShareLock'): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const r = await pool.query(
      `select 1 from pg_locks where locktype = 'advisory' and classid = $1 and objid = hashtext($2)::oid and objsubid = 2
          and mode = $3 and not granted`,
      [FENCE_LOCK_CLASS, unit, mode],
    );
    if (r.rowCount) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`nobody waited for the fence lock of ${unit} in ${mode}`);
}

export type FenceKind = 'native' | 'plpgsql';

/** Why the stack has no native fence, for the suite's failure. */
function nativeMissing(): string {
  const failed = path.join(__dirname, '../../.dev/native/build-failed');
  const why = existsSync(failed) ? readFileSync(failed, 'utf8').trim() : 'no .dev/native/shardctl_fence.so';
  return `the stack's config names no native fence library (${why}): \`shardctl dev up\` builds it (scripts/build-native-fence.sh); SHARDCTL_DEV_FENCE=plpgsql runs the stack without it`;
}

/** The suite's database on shard-a's server, created once and reused by later runs. */
async function suiteDatabase(kind: FenceKind): Promise<string> {
  return ensureDatabase(shardByName(testConfig(), SHARD).dsn, `shardctl_fence_${kind}`);
}

/** The fence tests, against the implementation `kind` (the native one needs `fence.library` in the stack's config). */
export function fenceSuite(kind: FenceKind): void {
  beforeAll(async () => {
    const base = testConfig();
    if (kind === 'native' && !base.fence.library) throw new Error(nativeMissing());
    // The library as native/shardctl_fence.c is now (a no-op when it is built from it): new
    // sessions load the rebuilt file, so an edit of the C source is what this suite tests.
    if (kind === 'native') ensureNativeFence(stackAt(path.join(__dirname, '../..')), (m) => process.stderr.write(`${m}\n`));
    suiteConfig = { ...base, fence: kind === 'native' ? base.fence : {} };
    dsn = await suiteDatabase(kind);
    pool = openPool(dsn, { max: 8 });
    // The native fence's own functions are created anew, so their privileges are this prepare's
    // (CREATE OR REPLACE keeps a function's grants).
    await pool.query('drop function if exists shardctl.native_mark(text), shardctl.native_marked_unit()');
    await prepareShard(pool, suiteConfig, { demoSchema: true });
  });

  afterEach(async () => {
    for (const c of open) await end(c, 'rollback').catch(() => {});
  });

  afterAll(async () => {
    // Clean up through the apply path's bypass: the fence would (rightly) refuse these deletes.
    const c = await pool.connect();
    try {
      await c.query('begin');
      await c.query('set local session_replication_role = replica');
      for (const t of DEMO_TABLES) await c.query(`delete from public.${t} where tenant_id = any($1)`, [units]);
      await c.query('delete from shardctl.fence where unit = any($1)', [units]);
      await c.query('commit');
    } finally {
      c.release();
    }
    await pool.end();
  });

  for (const via of VIAS) {
    describe(`fence check on tenant-table writes (${VIA_NAME[via]})`, () => {
      it('refuses a stale epoch with SC421 before any row changes (insert, multi-row insert, update, delete)', async () => {
        const unit = await newUnit({ epoch: 2 });
        await inTx({ unit, epoch: 2, via }, (c) => insertAccounts(c, unit, ['a']));
        expect(await outcome(inTx({ unit, epoch: 1, via }, (c) => insertAccounts(c, unit, ['b', 'c', 'd'])))).toBe(SQLSTATE.staleRoute);
        expect(await outcome(inTx({ unit, epoch: 1, via }, (c) => c.query(`update public.accounts set name = 'z' where tenant_id = $1`, [unit])))).toBe(
          SQLSTATE.staleRoute,
        );
        expect(await outcome(inTx({ unit, epoch: 1, via }, (c) => c.query('delete from public.accounts where tenant_id = $1', [unit])))).toBe(
          SQLSTATE.staleRoute,
        );
        // An epoch the shard has not accepted (ahead of it) is not this shard's either.
        expect(await outcome(inTx({ unit, epoch: 3, via }, (c) => insertAccounts(c, unit, ['e'])))).toBe(SQLSTATE.staleRoute);
        expect(await accountNames(unit)).toEqual(['a']);
      });

      it('refuses a row of another unit with SC403, leaving no part of a multi-row insert', async () => {
        const unit = await newUnit();
        const other = await newUnit();
        const code = await outcome(
          inTx({ unit, epoch: 1, via }, (c) => c.query(`insert into public.accounts(tenant_id, name) values ($1, 'a'), ($1, 'b'), ($2, 'c')`, [unit, other])),
        );
        expect(code).toBe(SQLSTATE.wrongUnit);
        expect(await accountNames(unit)).toEqual([]);
        expect(await accountNames(other)).toEqual([]);
      });

      it("refuses to update or delete another unit's rows with SC403, changing none of them", async () => {
        const unit = await newUnit();
        const other = await newUnit();
        await inTx({ unit: other, epoch: 1, via }, (c) => insertAccounts(c, other, ['x', 'y']));
        const rename = (c: PoolClient) => c.query(`update public.accounts set name = name || '!' where tenant_id = $1`, [other]);
        const remove = (c: PoolClient) => c.query('delete from public.accounts where tenant_id = $1', [other]);
        const both = (c: PoolClient) => c.query('delete from public.accounts where tenant_id = any($1)', [[unit, other]]);
        for (const write of [rename, remove, both]) expect(await outcome(inTx({ unit, epoch: 1, via }, write))).toBe(SQLSTATE.wrongUnit);
        expect(await accountNames(other)).toEqual(['x', 'y']);
      });

      it('refuses writes to a frozen unit with SC423 while reads continue', async () => {
        const unit = await newUnit();
        await inTx({ unit, epoch: 1, via }, (c) => insertAccounts(c, unit, ['a']));
        expect((await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: true })).ok).toBe(true);
        expect(await outcome(inTx({ unit, epoch: 1, via }, (c) => insertAccounts(c, unit, ['b'])))).toBe(SQLSTATE.frozen);
        expect(await outcome(inTx({ unit, epoch: 1, via }, (c) => c.query('delete from public.accounts where tenant_id = $1', [unit])))).toBe(SQLSTATE.frozen);
        // A read transaction proves ownership only (the router opens reads this way).
        const read = await inTx({ unit, epoch: 1 }, async (c) => {
          await c.query('select shardctl.assert_readable($1, $2)', [unit, 1]);
          return (await c.query('select name from public.accounts where tenant_id = $1', [unit])).rows.map((r) => r.name);
        });
        expect(read).toEqual(['a']);
      });

      it('refuses writes and reads of a unit this shard does not own, or has never heard of, with SC421', async () => {
        const unowned = await newUnit({ owned: false });
        const unknown = await newUnit({}, { fence: false });
        for (const unit of [unowned, unknown]) {
          expect(await outcome(inTx({ unit, epoch: 1, via }, (c) => insertAccounts(c, unit, ['a'])))).toBe(SQLSTATE.staleRoute);
          expect(await outcome(pool.query('select shardctl.assert_readable($1, 1)', [unit]))).toBe(SQLSTATE.staleRoute);
          expect(await accountNames(unit)).toEqual([]);
        }
      });

      it('checks an update that changes tenant_id against both the old and the new unit', async () => {
        const from = await newUnit();
        const to = await newUnit();
        await inTx({ unit: from, epoch: 1, via }, (c) => insertAccounts(c, from, ['a']));
        const move = (c: PoolClient) => c.query('update public.accounts set tenant_id = $2 where tenant_id = $1', [from, to]);
        expect(await outcome(inTx({ unit: from, epoch: 1, via }, move))).toBe(SQLSTATE.wrongUnit); // new row is not `from`'s
        expect(await outcome(inTx({ unit: to, epoch: 1, via }, move))).toBe(SQLSTATE.wrongUnit); // old row is not `to`'s
        expect(await accountNames(from)).toEqual(['a']);
        expect(await accountNames(to)).toEqual([]);
      });

      it('a transaction writes only the unit it was checked for: after it switches its settings to another unit, that unit is refused (SC403)', async () => {
        const unit = await newUnit();
        const open = await newUnit();
        const frozen = await newUnit({ frozen: true });
        for (const other of [open, frozen]) {
          const write = inTx({ unit, epoch: 1, via }, async (c) => {
            await insertAccounts(c, unit, [`before-${other}`]);
            await c.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`, [other]);
            await insertAccounts(c, other, ['switched']);
          });
          expect(await outcome(write)).toBe(SQLSTATE.wrongUnit);
          expect(await accountNames(other)).toEqual([]);
        }
        expect(await accountNames(unit)).toEqual([]);
      });
    });
  }

  describe("the router's opening batch", () => {
    it('is one simple query that answers no row (the check is a CALL), leaves the transaction checked and holds the unit lock', async () => {
      const unit = await newUnit({ epoch: 3 });
      const c = await pool.connect();
      open.add(c);
      const results = (await c.query(openTransactionSql({ unit, epoch: 3 }, 'write', undefined, 5000))) as unknown as { command: string; rows: unknown[] }[];
      expect(results.map((r) => [r.command, r.rows.length])).toEqual([
        ['BEGIN', 0],
        ['SET', 0],
        ['CALL', 0],
      ]);
      const r = await c.query(
        `select current_setting('shardctl.checked') as checked, current_setting('statement_timeout') as timeout,
                (select count(*)::int from pg_locks where locktype = 'advisory' and pid = pg_backend_pid() and mode = 'ShareLock'
                   and classid = $1 and objid = hashtext($2)::oid and objsubid = 2) as locks`,
        [FENCE_LOCK_CLASS, unit],
      );
      expect(r.rows[0]).toEqual({ checked: unit, timeout: '5s', locks: 1 });
      await insertAccounts(c, unit, ['opened']);
      await end(c, 'commit');
      expect(await accountNames(unit)).toEqual(['opened']);
    });

    it("refuses a stale epoch through the previous release's begin_unit_write too (routers not yet upgraded)", async () => {
      const unit = await newUnit({ epoch: 2 });
      const w = await begin({ unit, epoch: 1 });
      expect(await outcome(w.query('select shardctl.begin_unit_write($1, 1)', [unit]))).toBe(SQLSTATE.staleRoute);
      await end(w, 'rollback');
      await inTx({ unit, epoch: 2 }, async (c) => {
        await c.query('select shardctl.begin_unit_write($1, 2)', [unit]);
        await insertAccounts(c, unit, ['old-router']);
      });
      expect(await accountNames(unit)).toEqual(['old-router']);
    });

    it('says to run shards prepare when a shard lacks the procedure (the error the shard gives for a missing one)', async () => {
      const c = await pool.connect();
      try {
        await c.query('begin');
        // The same name with a signature no shard has: the shard's own "does not exist" error.
        const err = await c.query(`call shardctl.open_unit_write('x', 1, 1)`).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect((err as { code?: string }).code).toBe('42883');
        const mapped = openFailure(err, 'shard-z');
        expect(mapped).toBeInstanceOf(ShardctlError);
        expect(mapped).toMatchObject({ type: 'ConfigError', details: { shard: 'shard-z' } });
        expect((mapped as Error).message).toMatch(/shard shard-z lacks shardctl\.open_unit_write .*shardctl shards prepare.*no write was made/);
        const other = Object.assign(new Error('function shardctl.other() does not exist'), { code: '42883' });
        expect(openFailure(other, 'shard-z')).toBe(other);
      } finally {
        await c.query('rollback').catch(() => {});
        c.release();
      }
    });
  });

  describe('writes without a route', () => {
    it('refuses a write that carries no epoch with SC428 (fail closed)', async () => {
      const unit = await newUnit();
      expect(await outcome(inTx({}, (c) => insertAccounts(c, unit, ['a'])))).toBe(SQLSTATE.noEpoch);
      expect(await outcome(inTx({ unit }, (c) => insertAccounts(c, unit, ['a'])))).toBe(SQLSTATE.noEpoch);
      expect(await outcome(inTx({ unit, epoch: '' }, (c) => insertAccounts(c, unit, ['a'])))).toBe(SQLSTATE.noEpoch);
      expect(await outcome(inTx({ unit: '', epoch: 1, via: 'router' }, (c) => insertAccounts(c, unit, ['a'])))).toBe(SQLSTATE.noEpoch);
      expect(await accountNames(unit)).toEqual([]);
    });

    it('lets a write without epoch through only while allow_unfenced_writes is true', async () => {
      const unit = await newUnit();
      // The setting is changed inside the writer's own transaction and rolled back with it, so
      // tests running in parallel on this shard never see it.
      const c = await begin({});
      try {
        await c.query(`insert into shardctl.settings(key, value) values ('allow_unfenced_writes', 'true')
                       on conflict (key) do update set value = 'true'`);
        expect(await outcome(insertAccounts(c, unit, ['a']))).toBe('ok');
        expect((await c.query('select count(*)::int as n from public.accounts where tenant_id = $1', [unit])).rows[0].n).toBe(1);
      } finally {
        await end(c, 'rollback');
      }
      const s = await pool.query(`select value from shardctl.settings where key = 'allow_unfenced_writes'`);
      expect(s.rows[0].value).toBe('false');
      expect(await outcome(inTx({}, (c) => insertAccounts(c, unit, ['a'])))).toBe(SQLSTATE.noEpoch);
      expect(await accountNames(unit)).toEqual([]);
    });

    it("a session's next transaction inherits neither the check nor the route of the one before", async () => {
      const unit = await newUnit();
      const c = await pool.connect();
      try {
        await c.query('begin');
        await c.query(ROUTER_OPEN, [unit, 1]);
        await insertAccounts(c, unit, ['first']);
        await c.query('commit');
        // Unrouted on the same session: fail closed, whatever the last transaction set.
        expect(await outcome(c.query(`insert into public.accounts(tenant_id, name) values ($1, 'bare')`, [unit]))).toBe(SQLSTATE.noEpoch);
        expect((await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: true })).ok).toBe(true);
        // The same unit and epoch set again by hand: checked afresh (a mark kept from before would let it through).
        await c.query('begin');
        await c.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`, [unit]);
        expect(await outcome(insertAccounts(c, unit, ['second']))).toBe(SQLSTATE.frozen);
        await c.query('rollback');
      } finally {
        c.release();
      }
      expect(await accountNames(unit)).toEqual(['first']);
    });
  });

  describe("the check's mark cannot be forged (only a passed check proves it)", () => {
    /** A session of its own, which has never passed a check (a pooled one may have). */
    async function freshSession(): Promise<Client> {
      const c = new Client({ connectionString: dsn });
      await c.connect();
      return c;
    }
    /** A mark set by hand, with what a check saw forged to begin with this transaction's start (as a real check's would). */
    const forge = (c: Client | PoolClient, unit: string) =>
      c.query(
        `select set_config('shardctl.checked', $1, true),
                set_config('shardctl.fence_seen', encode(timestamptz_send(now()), 'hex') || ':' || coalesce(pg_sequence_last_value('shardctl.fence_gen'), 0) || ':1', false)`,
        [unit],
      );

    it('a mark set by hand is checked like any unrouted write (SC428, SC421, SC423), on a session that never passed a check and on one that did', async () => {
      const stale = await newUnit({ epoch: 2 });
      const frozen = await newUnit({ frozen: true });
      const elsewhere = await newUnit();
      const c = await freshSession();
      try {
        const attempt = async (unit: string, epoch?: number) => {
          await c.query('begin');
          try {
            await forge(c, unit);
            if (epoch !== undefined)
              await c.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', $2, true)`, [unit, String(epoch)]);
            return await outcome(insertAccounts(c as unknown as PoolClient, unit, ['forged']));
          } finally {
            await c.query('rollback');
          }
        };
        const attempts = async () => [await attempt(stale), await attempt(stale, 1), await attempt(frozen, 1)];
        const refused = [SQLSTATE.noEpoch, SQLSTATE.staleRoute, SQLSTATE.frozen];
        expect(await attempts()).toEqual(refused);
        // The session passes a real check (of another unit), so it holds a proof: still not this mark's.
        await c.query('begin');
        await c.query(ROUTER_OPEN, [elsewhere, 1]);
        await insertAccounts(c as unknown as PoolClient, elsewhere, ['routed']);
        await c.query('commit');
        expect(await attempts()).toEqual(refused);
      } finally {
        await c.end();
      }
      expect(await accountNames(stale)).toEqual([]);
      expect(await accountNames(frozen)).toEqual([]);
      expect(await accountNames(elsewhere)).toEqual(['routed']);
    });

    it("the mark of a session's earlier transaction, set again by hand, does not pass once the fence has moved", async () => {
      const unit = await newUnit();
      const c = await freshSession();
      try {
        await c.query('begin');
        await c.query(ROUTER_OPEN, [unit, 1]);
        expect((await c.query(`select current_setting('shardctl.checked') as m`)).rows[0].m).toBe(unit);
        await insertAccounts(c as unknown as PoolClient, unit, ['routed']);
        await c.query('commit');
        // The replay: the mark set again by hand, what the check saw left as that check left it.
        const replay = () => c.query(`select set_config('shardctl.checked', $1, true)`, [unit]);
        // Even before the fence moves, the next transaction is not checked by the earlier one's proof.
        await c.query('begin');
        await replay();
        expect(await outcome(insertAccounts(c as unknown as PoolClient, unit, ['replayed-unmoved']))).toBe(SQLSTATE.noEpoch);
        await c.query('rollback');
        // The move goes on: the unit is handed off, then frozen here. The writer replays the mark
        // it saw (and the route it had): each next transaction runs the whole check and is refused.
        expect((await setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false })).ok).toBe(true);
        for (const route of [false, true]) {
          await c.query('begin');
          await replay();
          if (route) await c.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`, [unit]);
          expect(await outcome(insertAccounts(c as unknown as PoolClient, unit, [`replayed-${route}`]))).toBe(route ? SQLSTATE.staleRoute : SQLSTATE.noEpoch);
          await c.query('rollback');
        }
      } finally {
        await c.end();
      }
      expect(await accountNames(unit)).toEqual(['routed']);
    });

    it('a mark forged for another unit inside a checked transaction does not widen it: that unit is refused (SC403)', async () => {
      const unit = await newUnit();
      const other = await newUnit();
      const write = inTx({ unit, epoch: 1, via: 'router' }, async (c) => {
        await insertAccounts(c, unit, ['own']);
        await forge(c, other);
        await insertAccounts(c, other, ['widened']);
      });
      expect(await outcome(write)).toBe(SQLSTATE.wrongUnit);
      expect(await accountNames(other)).toEqual([]);
      expect(await accountNames(unit)).toEqual([]);
    });

    it('a writer role cannot set the proof, and writes through the router with no privilege on the fence', async () => {
      const unit = await newUnit();
      const role = `shardctl_app_${randomBytes(4).toString('hex')}`;
      await pool.query(`create role ${role} nologin`);
      // A writer's grants (lib/grants.ts) less the fence's: the check runs as the schema's owner.
      await pool.query(`grant usage on schema shardctl to ${role}; grant select, insert on public.accounts to ${role};
                        grant usage on all sequences in schema public to ${role}`);
      try {
        // It may read the proof (it learns nothing it could not compute), never set it.
        for (const sql of [
          `select setval('shardctl.write_mark', 1)`,
          `select nextval('shardctl.write_mark')`,
          `alter sequence shardctl.write_mark restart`,
          `select nextval('shardctl.fence_gen')`,
        ]) {
          const code = await outcome(
            inTx({}, async (c) => {
              await c.query(`set local role ${role}`);
              await c.query(sql);
            }),
          );
          expect({ sql, code }).toEqual({ sql, code: '42501' });
        }
        const asRole = (route: Route, name: string, forged: boolean) =>
          outcome(
            inTx(route, async (c) => {
              await c.query(`set local role ${role}`);
              if (forged) await forge(c, unit);
              await insertAccounts(c, unit, [name]);
            }),
          );
        expect(await asRole({ unit, epoch: 1, via: 'router' }, 'routed', false)).toBe('ok');
        expect(await asRole({ unit, epoch: 0 }, 'forged', true)).toBe(SQLSTATE.staleRoute);
        expect(await asRole({}, 'forged-bare', true)).toBe(SQLSTATE.noEpoch);
      } finally {
        await pool.query(`drop owned by ${role}; drop role ${role}`);
      }
      expect(await accountNames(unit)).toEqual(['routed']);
    });
  });

  for (const via of VIAS) {
    describe(`fence change ordering (${VIA_NAME[via]})`, () => {
      const variants = [
        'commits',
        'rolls back',
        'commits a write made in a released savepoint',
        ...(via === 'router' ? ['has not written yet, then commits'] : []),
      ];
      for (const variant of variants) {
        it(`a fence change waits for an in-flight writer that ${variant}, then refuses the old state`, async () => {
          const unit = await newUnit();
          const events: string[] = [];
          const writer = await begin({ unit, epoch: 1, via });
          const writesFirst = !variant.includes('not written');
          if (variant.includes('savepoint')) await writer.query('savepoint s');
          if (writesFirst) await insertAccounts(writer, unit, ['in-flight']);
          if (variant.includes('savepoint')) await writer.query('release savepoint s');
          events.push('writer began');

          const fence = setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: true }).then((r) => {
            events.push('fence returned');
            return r;
          });
          await waitForLockWaiter(unit, 'ExclusiveLock');
          await new Promise((r) => setTimeout(r, 200)); // it stays blocked, not merely slow to start
          // Checked before the fence: its write still commits, ahead of the fence.
          if (!writesFirst) await insertAccounts(writer, unit, ['in-flight']);
          events.push('writer ends');
          await end(writer, variant === 'rolls back' ? 'rollback' : 'commit');
          const r = await fence;

          expect(r.ok).toBe(true);
          expect(r.waitedMs).toBeGreaterThanOrEqual(150);
          expect(events).toEqual(['writer began', 'writer ends', 'fence returned']);
          expect(await accountNames(unit)).toEqual(variant === 'rolls back' ? [] : ['in-flight']);
          expect(await outcome(inTx({ unit, epoch: 1, via }, (c) => insertAccounts(c, unit, ['after'])))).toBe(SQLSTATE.frozen);
          expect(await accountNames(unit)).toEqual(variant === 'rolls back' ? [] : ['in-flight']);
        });
      }

      it('a hand-off (owned=false, epoch+1) waits for the writer, then refuses the old epoch with SC421', async () => {
        const unit = await newUnit();
        const writer = await begin({ unit, epoch: 1, via });
        await insertAccounts(writer, unit, ['in-flight']);
        const fence = setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false });
        await waitForLockWaiter(unit, 'ExclusiveLock');
        await end(writer, 'commit');
        expect((await fence).ok).toBe(true);
        expect(await outcome(inTx({ unit, epoch: 1, via }, (c) => insertAccounts(c, unit, ['after'])))).toBe(SQLSTATE.staleRoute);
        expect(await accountNames(unit)).toEqual(['in-flight']);
      });

      for (const isolation of ['read committed', 'repeatable read', 'serializable'] as const) {
        it(`a ${isolation} write queued behind an in-progress fence change is refused once it commits`, async () => {
          const unit = await newUnit();
          const first = await begin({ unit, epoch: 1, via });
          await insertAccounts(first, unit, ['first']);
          const fence = setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: true });
          await waitForLockWaiter(unit, 'ExclusiveLock');

          // The router's transaction queues at its first statement (which takes its snapshot, as
          // the router's BEGIN batch does); the other writer at its first write, after a read.
          const second = await begin({ isolation });
          let write: Promise<string>;
          if (via === 'router') {
            write = outcome(second.query(ROUTER_OPEN, [unit, 1]).then(() => insertAccounts(second, unit, ['second'])));
          } else {
            await second.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`, [unit]);
            await second.query('select count(*) from public.accounts where tenant_id = $1', [unit]); // snapshot taken now
            write = outcome(insertAccounts(second, unit, ['second']));
          }
          await waitForLockWaiter(unit, 'ShareLock'); // queued behind the fence, not ahead of it
          await end(first, 'commit');
          expect((await fence).ok).toBe(true);

          const code = await write;
          if (isolation === 'read committed') expect(code).toBe(SQLSTATE.frozen);
          else expect(REFUSED).toContain(code);
          await end(second, 'rollback');
          expect(await accountNames(unit)).toEqual(['first']);
        });
      }
    });
  }

  describe("a shard prepared with the previous release's proof", () => {
    /** The previous release's proof, over a SQL expression `unit`. */
    const oldProof = (unit: string) =>
      `pg_catalog.hashtextextended(${unit}, pg_catalog.hashtextextended(pg_catalog.encode(pg_catalog.timestamptz_send(pg_catalog.now()), 'hex'), 0))`;

    it('is upgraded by prepare without a table lock, and a transaction checked before the upgrade still commits (its next statement runs the whole check)', async () => {
      const unit = await newUnit();
      // The previous release's write path, as its prepare installed it.
      await pool.query(readFileSync(path.join(__dirname, '../fixtures/fence-functions-0af6b4a.sql'), 'utf8'));
      const c = await pool.connect();
      open.add(c);
      // The old check ran: the session's proof is the old one.
      const proven = `select currval('shardctl.write_mark') = ${oldProof('$1::text')} as old,
                            coalesce(currval('shardctl.write_mark') = ${proofSql('$1::text', "current_setting('shardctl.fence_seen', true)")}, false) as new`;
      await c.query('begin');
      await c.query(ROUTER_OPEN, [unit, 1]);
      expect((await c.query(proven, [unit])).rows[0]).toEqual({ old: true, new: false });
      await insertAccounts(c, unit, ['before-upgrade']);
      // Prepare re-run by this release: functions replaced, no trigger (so no table) touched.
      const r = await prepareShard(pool, suiteConfig, { demoSchema: true });
      expect(r.changed).toEqual([]);
      // The same transaction goes on under the new checked_unit(): the old proof does not match it,
      // so the statement runs the whole check (the route is still right) and marks it anew.
      await insertAccounts(c, unit, ['after-upgrade']);
      if (kind === 'plpgsql') expect((await c.query(proven, [unit])).rows[0]).toEqual({ old: false, new: true });
      // The native fence's mark is the backend's own; the old proof is left behind, unused.
      else expect((await c.query('select shardctl.native_marked_unit() as m')).rows[0].m).toBe(unit);
      await end(c, 'commit');
      // A mark set by hand after the upgrade is still checked: the unit has moved on.
      expect((await setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false })).ok).toBe(true);
      const forged = inTx({ unit, epoch: 1 }, async (t) => {
        await t.query(`select set_config('shardctl.checked', $1, true)`, [unit]);
        await insertAccounts(t, unit, ['forged']);
      });
      expect(await outcome(forged)).toBe(SQLSTATE.staleRoute);
      expect(await accountNames(unit)).toEqual(['after-upgrade', 'before-upgrade']);
    });
  });

  describe('a transaction opened by the router carries its route', () => {
    it.runIf(kind === 'plpgsql')(
      'so a statement whose proof no longer matches (as after an upgrade of the functions) runs the whole check on that route and passes',
      async () => {
        const unit = await newUnit();
        const write = inTx({ unit, epoch: 1, via: 'router' }, async (c) => {
          await insertAccounts(c, unit, ['proven']);
          // What the check saw no longer matches the proof (a new checked_unit() would not match the old one either).
          await c.query(`select set_config('shardctl.fence_seen', 'changed', false)`);
          await insertAccounts(c, unit, ['checked-again']);
          expect((await c.query(`select current_setting('shardctl.fence_seen') <> 'changed' as marked_anew`)).rows[0].marked_anew).toBe(true);
        });
        expect(await outcome(write)).toBe('ok');
        expect(await accountNames(unit)).toEqual(['checked-again', 'proven']);
      },
    );
  });

  describe('a check rolled back to a savepoint (which releases its lock, not its proof)', () => {
    /** Checks `unit` in a savepoint, rolls it back, and sets by hand everything the check had set. */
    async function proofWithoutLock(c: PoolClient, unit: string): Promise<void> {
      await c.query('savepoint s');
      await c.query(ROUTER_OPEN, [unit, 1]);
      const seen = (await c.query(`select coalesce(current_setting('shardctl.fence_seen', true), '') as s`)).rows[0].s as string;
      await c.query('rollback to savepoint s');
      await c.query(
        `select set_config('shardctl.checked', $1, true), set_config('shardctl.fence_seen', $2, false), set_config('shardctl.session_proof', 'on', false),
                set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`,
        [unit, seen],
      );
    }

    it('cannot write after a fence change that did not wait for it: the next statement runs the whole check (SC421)', async () => {
      const unit = await newUnit();
      const c = await begin({});
      await proofWithoutLock(c, unit);
      // Nothing holds the unit's lock: the hand-off does not wait.
      expect((await setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false })).ok).toBe(true);
      expect(await outcome(insertAccounts(c, unit, ['after-hand-off']))).toBe(SQLSTATE.staleRoute);
      await end(c, 'rollback');
      expect(await accountNames(unit)).toEqual([]);
    });

    it('takes the lock again at its next write, so a later fence change waits for it', async () => {
      const unit = await newUnit();
      const c = await begin({});
      await proofWithoutLock(c, unit);
      await insertAccounts(c, unit, ['proven']);
      const change = setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false });
      await waitForLockWaiter(unit, 'ExclusiveLock');
      await end(c, 'commit');
      expect((await change).ok).toBe(true);
      expect(await accountNames(unit)).toEqual(['proven']);
    });
  });

  describe("a session's repeated check skips the fence read only while no fence row has changed", () => {
    /** One session for the whole case (a pooled one could change between transactions). */
    async function session(): Promise<Client> {
      const c = new Client({ connectionString: dsn });
      await c.connect();
      return c;
    }
    const routed = async (c: Client, unit: string, epoch: number, name: string) => {
      await c.query('begin');
      try {
        await c.query(ROUTER_OPEN, [unit, epoch]);
        await insertAccounts(c as unknown as PoolClient, unit, [name]);
        await c.query('commit');
        return 'ok';
      } catch (e: any) {
        await c.query('rollback');
        if (!e?.code) throw e;
        return e.code as string;
      }
    };

    it('a session whose last check passed is refused once the fence moves, by shardctl or by hand without the lock, and at a stale epoch at any time', async () => {
      const unit = await newUnit();
      const c = await session();
      try {
        expect(await routed(c, unit, 1, 'a')).toBe('ok');
        expect(await routed(c, unit, 1, 'b')).toBe('ok');
        // What the session's check saw: the fence's generation and the epoch.
        if (kind === 'plpgsql') {
          const seen = (await c.query(`select current_setting('shardctl.fence_seen') as s`)).rows[0].s as string;
          expect(seen.split(':').slice(2)).toEqual(['1']);
        }
        // A stale epoch on the same session is read and refused.
        expect(await routed(c, unit, 0, 'stale')).toBe(SQLSTATE.staleRoute);
        expect(await routed(c, unit, 1, 'c')).toBe('ok');
        // The move freezes the unit (setUnitFence): the next check reads the fence again.
        expect((await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: true })).ok).toBe(true);
        expect(await routed(c, unit, 1, 'frozen')).toBe(SQLSTATE.frozen);
        expect((await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: false })).ok).toBe(true);
        expect(await routed(c, unit, 1, 'd')).toBe('ok');
        // An operator hands the unit off by hand, without the lock, in a replica-role session.
        await pool.query(
          `begin; set local session_replication_role = replica; update shardctl.fence set epoch = 2, owned = false where unit = '${unit}'; commit`,
        );
        expect(await routed(c, unit, 1, 'after-hand-off')).toBe(SQLSTATE.staleRoute);
      } finally {
        await c.end();
      }
      expect(await accountNames(unit)).toEqual(['a', 'b', 'c', 'd']);
    });

    it.runIf(kind === 'plpgsql')('what the check saw cannot be forged: a session that rewrites it to a stale epoch is refused', async () => {
      const unit = await newUnit();
      const c = await session();
      try {
        expect(await routed(c, unit, 1, 'a')).toBe('ok');
        expect((await setUnitFence(pool, { unit, epoch: 2, owned: true, frozen: false })).ok).toBe(true);
        expect(await routed(c, unit, 2, 'b')).toBe('ok');
        // The writer rewrites what the last check saw to the epoch it wants (the generation unchanged).
        const seen = (await c.query(`select current_setting('shardctl.fence_seen') as s`)).rows[0].s as string;
        const forged = seen.split(':').slice(0, 2).concat('1').join(':');
        await c.query(`select set_config('shardctl.fence_seen', $1, false)`, [forged]);
        expect(await routed(c, unit, 1, 'forged')).toBe(SQLSTATE.staleRoute);
      } finally {
        await c.end();
      }
      expect(await accountNames(unit)).toEqual(['a', 'b']);
    });

    it("a change of the fence by hand waits for the unit's in-flight writers, as setUnitFence does", async () => {
      const unit = await newUnit();
      const w = await begin({ unit, epoch: 1, via: 'router' });
      const c = await pool.connect();
      try {
        await c.query('begin');
        await c.query(`set local lock_timeout = '300ms'`);
        expect(await outcome(c.query(`update shardctl.fence set frozen = true where unit = $1`, [unit]))).toBe('55P03');
        await c.query('rollback');
      } finally {
        c.release();
      }
      await end(w, 'commit');
    });
  });

  describe('a snapshot older than the fence cannot write', () => {
    const changes: Record<string, (unit: string) => Promise<void>> = {
      freeze: async (unit) => {
        expect((await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: true })).ok).toBe(true);
      },
      'hand-off': async (unit) => {
        expect((await setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false })).ok).toBe(true);
      },
      // The fence ends where the snapshot saw it: only a check that notices the change can refuse.
      'freeze then unfreeze': async (unit) => {
        expect((await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: true })).ok).toBe(true);
        expect((await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: false })).ok).toBe(true);
      },
    };
    for (const via of VIAS) {
      for (const isolation of ['repeatable read', 'serializable'] as const) {
        for (const [name, change] of Object.entries(changes)) {
          it(`${isolation}, ${via}: a write after a committed ${name} is refused and its row never appears`, async () => {
            const unit = await newUnit();
            // The snapshot predates the fence (taken by a read before the route check).
            const w = await begin({ isolation });
            try {
              await w.query('select count(*) from public.accounts where tenant_id = $1', [unit]);
              await change(unit);
              const write =
                via === 'router'
                  ? w.query(ROUTER_OPEN, [unit, 1]).then(() => insertAccounts(w, unit, ['stale']))
                  : w
                      .query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`, [unit])
                      .then(() => insertAccounts(w, unit, ['stale']));
              expect(REFUSED).toContain(await outcome(write));
            } finally {
              await end(w, 'rollback');
            }
            expect(await accountNames(unit)).toEqual([]);
          });
        }

        it(`${isolation}, ${via}: a fence change of another unit does not refuse the write`, async () => {
          const unit = await newUnit();
          const other = await newUnit();
          const w = await begin({ isolation });
          await w.query('select count(*) from public.accounts where tenant_id = $1', [unit]);
          await changes.freeze(other);
          if (via === 'router') await w.query(ROUTER_OPEN, [unit, 1]);
          else await w.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`, [unit]);
          await insertAccounts(w, unit, ['ok']);
          await end(w, 'commit');
          expect(await accountNames(unit)).toEqual(['ok']);
        });
      }
    }
  });

  describe('who may bypass or change the fence', () => {
    it('a session with session_replication_role = replica (the change-apply path) bypasses the fence', async () => {
      const unit = await newUnit({ owned: false, frozen: true, epoch: 7 });
      const c = await begin({});
      await c.query('set local session_replication_role = replica');
      await insertAccounts(c, unit, ['applied']);
      await end(c, 'commit');
      expect(await accountNames(unit)).toEqual(['applied']);
      expect(await outcome(inTx({}, (c) => insertAccounts(c, unit, ['direct'])))).toBe(SQLSTATE.noEpoch);
    });

    it('a replica-role session (the move copies and applies many units) writes rows of any unit, even while it carries a unit', async () => {
      const a = await newUnit({ owned: false, epoch: 3 });
      const b = await newUnit({ frozen: true });
      const c = await begin({ unit: a, epoch: 3 });
      await c.query('set local session_replication_role = replica');
      await c.query(`insert into public.accounts(tenant_id, name) values ($1, 'a1'), ($2, 'b1'), ($2, 'b2')`, [a, b]);
      await c.query(`update public.accounts set name = name || '!' where tenant_id = $1`, [b]);
      await c.query(`delete from public.accounts where tenant_id = $1 and name = 'b2!'`, [b]);
      await end(c, 'commit');
      expect(await accountNames(a)).toEqual(['a1']);
      expect(await accountNames(b)).toEqual(['b1!']);
    });

    it('a non-superuser role can neither change fence rows nor switch to the replica role', async () => {
      // The dev user is a superuser (it can do both); production writers must not be.
      const unit = await newUnit({ frozen: true });
      const role = `shardctl_app_${randomBytes(4).toString('hex')}`;
      await pool.query(`create role ${role} nologin`);
      // What a writer needs for the fence check to run as it (reading the fence), and no more.
      await pool.query(`grant usage on schema shardctl to ${role}; grant select on shardctl.fence, shardctl.settings to ${role}`);
      try {
        for (const sql of [`update shardctl.fence set frozen = false where unit = '${unit}'`, `set local session_replication_role = replica`]) {
          const code = await outcome(
            inTx({}, async (c) => {
              await c.query(`set local role ${role}`);
              await c.query(sql);
            }),
          );
          expect(code).toBe('42501');
        }
      } finally {
        await pool.query(`drop owned by ${role}; drop role ${role}`);
      }
      expect((await pool.query('select frozen from shardctl.fence where unit = $1', [unit])).rows[0].frozen).toBe(true);
    });
  });

  describe('the fence cannot be shadowed through the caller search_path', () => {
    it('every function in schema shardctl pins its search_path, but the write path (checked_unit, open_unit_write, begin_unit_write), which names everything by schema', async () => {
      const r = await pool.query(
        `select n.nspname || '.' || p.proname || '(' || replace(pg_catalog.oidvectortypes(p.proargtypes), ', ', ',') || ')' as fn, coalesce(p.proconfig, '{}') as config, p.prosecdef as definer
           from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'shardctl' order by 1`,
      );
      expect(r.rows.length).toBeGreaterThanOrEqual(4);
      for (const row of r.rows) {
        const pinned = row.config.some((s: string) => s.startsWith('search_path='));
        if (row.fn === 'shardctl.checked_unit()') expect({ pinned, definer: row.definer }).toEqual({ pinned: false, definer: false });
        else if (/^shardctl\.(open|begin)_unit_write\(text,bigint\)$/.test(row.fn)) expect({ fn: row.fn, pinned }).toEqual({ fn: row.fn, pinned: false });
        // The native fence's own functions run no SQL (no name to resolve).
        else if (kind === 'native' && /^shardctl\.native_mark(ed_unit)?\(/.test(row.fn)) expect({ fn: row.fn, pinned }).toEqual({ fn: row.fn, pinned: false });
        else expect({ fn: row.fn, pinned }).toEqual({ fn: row.fn, pinned: true });
      }
    });

    it("the router's check refuses a stale epoch, a frozen unit and no epoch even when the writer shadows its operators, functions and the fence table", async () => {
      const stale = await newUnit({ epoch: 2 });
      const frozen = await newUnit({ frozen: true });
      const evil = uniq('shadow').replace(/-/g, '_');
      // Every comparison the check makes, made to pass: stale epochs equal, leases never running,
      // a fence of the writer's own (a table named like it, in its schema and in pg_temp).
      await pool.query(`create schema ${evil};
        create function ${evil}.no(bigint, bigint) returns boolean language sql as 'select false';
        create function ${evil}.no(timestamptz, timestamptz) returns boolean language sql as 'select false';
        create function ${evil}.yes(text, text) returns boolean language sql as 'select true';
        create operator ${evil}.<> (leftarg = bigint, rightarg = bigint, function = ${evil}.no);
        create operator ${evil}.> (leftarg = timestamptz, rightarg = timestamptz, function = ${evil}.no);
        create operator ${evil}.= (leftarg = text, rightarg = text, function = ${evil}.yes);
        create function ${evil}.current_setting(text) returns text language sql as $$ select 'serializable'::text $$;
        create function ${evil}.pg_advisory_xact_lock_shared(integer, integer) returns void language sql as 'select';
        create table ${evil}.fence (unit text, epoch bigint, owned boolean, frozen boolean, frozen_until timestamptz);
        insert into ${evil}.fence values ('${stale}', 1, true, false, null), ('${frozen}', 1, true, false, null);`);
      try {
        for (const [unit, epoch, code] of [
          [stale, 1, SQLSTATE.staleRoute],
          [frozen, 1, SQLSTATE.frozen],
          ['', 1, SQLSTATE.noEpoch],
        ] as const) {
          const got = await outcome(
            inTx({}, async (c) => {
              await c.query(`set local search_path = ${evil}, pg_catalog, public`);
              await c.query(`create temp table fence on commit drop as select * from ${evil}.fence`);
              // The shadow is live in this session.
              expect((await c.query(`select 2::bigint <> 1::bigint as ne`)).rows[0].ne).toBe(false);
              await c.query(ROUTER_OPEN, [unit, epoch]);
              await insertAccounts(c, stale, ['shadowed']);
            }),
          );
          expect({ unit, got }).toEqual({ unit, got: code });
        }
      } finally {
        await pool.query(`drop schema ${evil} cascade`);
      }
      expect(await accountNames(stale)).toEqual([]);
    });

    it('a forged mark is refused even when the writer shadows currval, the comparison operators and the digest in its search_path', async () => {
      const frozen = await newUnit({ frozen: true });
      const elsewhere = await newUnit();
      const evil = uniq('shadow').replace(/-/g, '_');
      // Everything checked_unit() calls, made to say "proven": if it resolved one name through the
      // caller's path, the forged mark would pass.
      await pool.query(`create schema ${evil};
        create function ${evil}.yes(bigint, bigint) returns boolean language sql as 'select true';
        create function ${evil}.yes(text, text) returns boolean language sql as 'select true';
        create operator ${evil}.= (leftarg = bigint, rightarg = bigint, function = ${evil}.yes);
        create operator ${evil}.= (leftarg = text, rightarg = text, function = ${evil}.yes);
        create operator ${evil}.<> (leftarg = text, rightarg = text, function = ${evil}.yes);
        create function ${evil}.currval(regclass) returns bigint language sql as 'select 0::bigint';
        create function ${evil}.hashtextextended(text, bigint) returns bigint language sql as 'select 0::bigint';
        create function ${evil}.encode(bytea, text) returns text language sql as $$ select 'x' $$;
        create function ${evil}.timestamptz_send(timestamptz) returns bytea language sql as $$ select '\\x00'::bytea $$;
        create function ${evil}.starts_with(text, text) returns boolean language sql as 'select true';`);
      const c = new Client({ connectionString: dsn });
      await c.connect();
      try {
        // A real check first, so the session holds a proof and the forged mark reaches currval().
        await c.query('begin');
        await c.query(ROUTER_OPEN, [elsewhere, 1]);
        await c.query('commit');
        await c.query('begin');
        await c.query(`set local search_path = ${evil}, pg_catalog, public`);
        // The shadow is live in this session.
        expect((await c.query(`select 1::bigint = 2::bigint as eq, currval('shardctl.write_mark') as cv`)).rows[0]).toEqual({ eq: true, cv: '0' });
        await c.query(
          `select pg_catalog.set_config('shardctl.checked', $1, true),
                  pg_catalog.set_config('shardctl.fence_seen', pg_catalog.encode(pg_catalog.timestamptz_send(pg_catalog.now()), 'hex') operator(pg_catalog.||) ':'
                    operator(pg_catalog.||) coalesce(pg_catalog.pg_sequence_last_value('shardctl.fence_gen'), 0)::pg_catalog.text operator(pg_catalog.||) ':1', false)`,
          [frozen],
        );
        expect(await outcome(c.query(`insert into public.accounts(tenant_id, name) values ($1, 'shadowed')`, [frozen]))).toBe(SQLSTATE.noEpoch);
        await c.query('rollback');
      } finally {
        await c.end();
        await pool.query(`drop schema ${evil} cascade`);
      }
      expect(await accountNames(frozen)).toEqual([]);
    });

    it('refuses a stale epoch even when the writer shadows current_setting and hashtext in its search_path', async () => {
      const unit = await newUnit({ epoch: 2 });
      const evil = uniq('shadow').replace(/-/g, '_');
      // current_setting claims the shard's own epoch whatever the session set; hashtext moves the
      // fence lock to a key nobody else takes.
      await pool.query(`create schema ${evil};
        create function ${evil}.current_setting(name text, missing_ok boolean) returns text language sql as $$
          select case when name = 'shardctl.epoch'
            then (select f.epoch::text from shardctl.fence f where f.unit = pg_catalog.current_setting('shardctl.unit', true))
            else pg_catalog.current_setting(name, missing_ok) end $$;
        create function ${evil}.hashtext(text) returns int language sql as $$ select 7 $$;`);
      try {
        const code = await outcome(
          inTx({ unit, epoch: 1 }, async (c) => {
            await c.query(`set local search_path = ${evil}, pg_catalog, public`);
            // The shadow is live in this session: proof the test would let a stale write through.
            expect((await c.query(`select current_setting('shardctl.epoch', true) as e`)).rows[0].e).toBe('2');
            await insertAccounts(c, unit, ['shadowed']);
          }),
        );
        expect(code).toBe(SQLSTATE.staleRoute);
        expect(await accountNames(unit)).toEqual([]);
      } finally {
        await pool.query(`drop schema ${evil} cascade`);
      }
    });
  });

  describe.runIf(kind === 'native')("the native fence's mark: the backend's own, held only with its lock", () => {
    const marked = async (c: PoolClient) => (await c.query('select shardctl.native_marked_unit() as m')).rows[0].m as string | null;

    it('is set by the check only, ends with the transaction, and no writer can set it', async () => {
      const unit = await newUnit();
      const c = await begin({});
      expect(await marked(c)).toBeNull();
      // Everything a plpgsql check sets, set by hand: no mark (the statement runs the whole check).
      await c.query(`select set_config('shardctl.checked', $1, true), set_config('shardctl.session_proof', 'on', false)`, [unit]);
      expect(await marked(c)).toBeNull();
      await c.query(ROUTER_OPEN, [unit, 1]);
      expect(await marked(c)).toBe(unit);
      await end(c, 'commit');
      const d = await begin({});
      // The same backend, a new transaction: the mark is gone (pooled: checked out again, maybe the same session).
      expect(await marked(d)).toBeNull();
      await end(d, 'rollback');
      // The mark's setter is the owner's: a writer role may not call it.
      const role = uniq('writer').replace(/-/g, '_');
      // With the documented grants (docs/production.md gives the writer EXECUTE on every routine
      // of the schema): the setter refuses anyone but the schema's owner all the same.
      await pool.query(`create role ${role}; grant usage on schema shardctl to ${role}; grant execute on all routines in schema shardctl to ${role}`);
      try {
        const code = await outcome(
          inTx({}, async (t) => {
            await t.query(`set local role ${role}`);
            await t.query('select shardctl.native_mark($1)', [unit]);
          }),
        );
        expect(code).toBe('42501');
      } finally {
        await pool.query(`drop owned by ${role}; drop role ${role}`);
      }
    });

    it('a rollback to the savepoint that checked clears it with the lock; a released savepoint hands both to the transaction', async () => {
      const unit = await newUnit();
      const c = await begin({});
      await c.query('savepoint a');
      await c.query(ROUTER_OPEN, [unit, 1]);
      expect(await marked(c)).toBe(unit);
      await c.query('rollback to savepoint a');
      expect(await marked(c)).toBeNull();
      await c.query('savepoint b');
      await c.query(ROUTER_OPEN, [unit, 1]);
      await c.query('release savepoint b');
      expect(await marked(c)).toBe(unit);
      // A later savepoint rolled back does not take the transaction's mark (nor its lock) with it.
      await c.query('savepoint c');
      await insertAccounts(c, unit, ['rolled-back']);
      await c.query('rollback to savepoint c');
      expect(await marked(c)).toBe(unit);
      await insertAccounts(c, unit, ['kept']);
      // The lock is still the transaction's: a fence change waits for it.
      const change = setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false });
      await waitForLockWaiter(unit, 'ExclusiveLock');
      await end(c, 'commit');
      expect((await change).ok).toBe(true);
      expect(await accountNames(unit)).toEqual(['kept']);
    });

    it('a prepare naming a library the server cannot load fails, saying so, and changes nothing', async () => {
      const before = await pool.query(`select p.proname, l.lanname, p.probin from pg_proc p join pg_language l on l.oid = p.prolang
        where p.pronamespace = 'shardctl'::regnamespace and p.proname in ('checked_unit', 'open_unit_write') order by 1`);
      expect(before.rows.map((r) => r.lanname)).toEqual(['c', 'c']);
      const missing = '/nonexistent/shardctl_fence.so';
      const err = await prepareShard(pool, { ...suiteConfig, fence: { library: missing } }, { demoSchema: true }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ShardctlError);
      expect((err as ShardctlError).message).toContain(`the native fence (fence.library ${missing}) cannot be installed on this shard`);
      expect((err as ShardctlError).message).toContain('Nothing was changed');
      const after = await pool.query(`select p.proname, l.lanname, p.probin from pg_proc p join pg_language l on l.oid = p.prolang
        where p.pronamespace = 'shardctl'::regnamespace and p.proname in ('checked_unit', 'open_unit_write') order by 1`);
      expect(after.rows).toEqual(before.rows);
      // And the fence still works.
      const unit = await newUnit();
      await inTx({ unit, epoch: 1, via: 'router' }, (c) => insertAccounts(c, unit, ['after-failed-prepare']));
      expect(await accountNames(unit)).toEqual(['after-failed-prepare']);
    });

    it("a check run by a cursor's fetch keeps its lock when a later fetch fails in a savepoint that is rolled back (the lock is the transaction's, not the portal's)", async () => {
      const unit = await newUnit();
      const c = await begin({});
      // The first row checks and marks; the second, fetched in a savepoint, fails (stale epoch 0).
      await c.query(`declare cur cursor for select shardctl.begin_unit_write('${unit}', e) from (values (1::bigint), (0::bigint)) v(e)`);
      await c.query('fetch 1 from cur');
      await c.query('savepoint s');
      expect(await outcome(c.query('fetch 1 from cur'))).toBe(SQLSTATE.staleRoute);
      await c.query('rollback to savepoint s');
      expect(await marked(c)).toBe(unit);
      // The transaction still holds the unit's lock: a hand-off waits for it.
      const change = setUnitFence(pool, { unit, epoch: 2, owned: false, frozen: false });
      await waitForLockWaiter(unit, 'ExclusiveLock');
      await insertAccounts(c, unit, ['before-hand-off']);
      await end(c, 'commit');
      expect((await change).ok).toBe(true);
      expect(await accountNames(unit)).toEqual(['before-hand-off']);
    });

    it('a marked transaction whose fence changed without the unit lock (TRUNCATE of the fence) runs the whole check at its next statement', async () => {
      const unit = await newUnit();
      const c = new Client({ connectionString: dsn });
      await c.connect();
      try {
        // A first check reads the fence and is remembered; the second, skipping the read, holds no
        // lock on the fence table, so a TRUNCATE (which takes no unit's lock) does not wait for it.
        await c.query('begin');
        await c.query(ROUTER_OPEN, [unit, 1]);
        await c.query('commit');
        await c.query('begin');
        await c.query(ROUTER_OPEN, [unit, 1]);
        await insertAccounts(c as unknown as PoolClient, unit, ['before']);
        await pool.query('truncate shardctl.fence');
        expect(await outcome(insertAccounts(c as unknown as PoolClient, unit, ['after-truncate']))).toBe(SQLSTATE.staleRoute);
        await c.query('rollback');
      } finally {
        await c.end();
      }
      expect(await accountNames(unit)).toEqual([]);
    });

    it("a session's repeated check is read again once the generation sequence is replaced (a value equal to the cached one proves nothing then)", async () => {
      const unit = await newUnit();
      const c = new Client({ connectionString: dsn });
      await c.connect();
      try {
        await c.query('begin');
        await c.query(ROUTER_OPEN, [unit, 1]);
        await c.query('commit');
        const gen = (await pool.query(`select coalesce(pg_sequence_last_value('shardctl.fence_gen'), 0) as g`)).rows[0].g as string;
        // The unit is handed off by hand in a replica-role session with the trigger disabled, then
        // the sequence recreated at the value the session saw: only its identity tells the change.
        await pool.query(`begin; set local session_replication_role = replica;
          alter table shardctl.fence disable trigger ${'shardctl_fence_gen'};
          update shardctl.fence set epoch = 2, owned = false where unit = '${unit}';
          alter table shardctl.fence enable always trigger ${'shardctl_fence_gen'};
          commit`);
        await pool.query(
          `begin; drop sequence shardctl.fence_gen; create sequence shardctl.fence_gen; select setval('shardctl.fence_gen', ${gen}::bigint); grant select on sequence shardctl.fence_gen to public; commit`,
        );
        await c.query('begin');
        expect(await outcome(c.query(ROUTER_OPEN, [unit, 1]))).toBe(SQLSTATE.staleRoute);
        await c.query('rollback');
      } finally {
        await c.end();
        // prepare restores what the test replaced (the trigger and the sequence's grants).
        await prepareShard(pool, suiteConfig, { demoSchema: true });
      }
    });
  });
}
