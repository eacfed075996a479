// The CDC engine against the real stack: shard-a is the source, shard-b the target. Each test
// states one behaviour; tables, tenants, slots and publications are unique to this run.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { LogicalReplicationService, PgoutputPlugin } from 'pg-logical-replication';
import { testConfig, uniq, shardPool, closePools } from '../helpers/stack';
import { shardByName } from '../../lib/config';
import { ShardctlError } from '../../lib/errors';
import {
  applyChangesUntil,
  checkReplicaIdentity,
  compareLsn,
  currentWalLsn,
  dropPublicationAndSlot,
  ensurePublicationAndSlot,
  readAppliedLsn,
  slotLagBytes,
  ApplyChangesOptions,
} from '../../lib/cdc';

const source = shardPool('shard-a');
const target = shardPool('shard-b');
const sourceDsn = shardByName(testConfig(), 'shard-a').dsn;

const P = uniq('cdc').replace(/-/g, '_');
const T = (n: string) => `${P}_${n}`;
// A schema of our own: other suites fence every tenant table of "public"; and the shards'
// search_path starts with "$user" (= the shardctl schema), so names are always qualified.
const S = P;
const Q = (n: string) => `${S}.${T(n)}`;
const tenant = uniq('ten');
const other = uniq('oth');
const moveId = uniq('move-cdc');
const main = { publication: `${P}_pub`, slot: `${P}_slot` };
const mainTables = ['items', 'docs', 'events', 'typed', 'small'].map((n) => ({ schema: S, name: T(n) }));
const extraSlots: { publication: string; slot: string }[] = [];
const moveIds = [moveId];

const ddl = `
create schema ${S};
create type ${Q('mood')} as enum ('happy', 'sad', 'it''s ok');
create domain ${Q('pos')} as integer check (value > 0);
create table ${Q('items')} (tenant_id text not null, id bigint not null, name text, qty int, primary key (tenant_id, id));
create table ${Q('docs')} (tenant_id text not null, id int not null, small int, big text, primary key (tenant_id, id));
create table ${Q('events')} (tenant_id text not null, seq int not null, payload text, primary key (tenant_id, seq));
create table ${Q('typed')} (
  tenant_id text not null, id int not null, n numeric(20,6), j jsonb, arr int[], b bytea, ts timestamptz,
  mood ${Q('mood')}, d ${Q('pos')}, nul text, "MixedCase" text, g int generated always as (id * 2) stored,
  primary key (tenant_id, id));
create table ${Q('trunc')} (tenant_id text not null, id int not null, primary key (tenant_id, id));
create table ${Q('small')} (tenant_id text not null, id int not null, v text, primary key (tenant_id, id));
create table ${Q('nopk')} (tenant_id text not null, id int not null);
create table ${Q('pknotenant')} (id int primary key, tenant_id text not null);
create table ${Q('noident')} (tenant_id text not null, id int not null, primary key (tenant_id, id));
alter table ${Q('noident')} replica identity nothing;
`;

// On the target only: an ALWAYS trigger (it fires even in the replica apply session) logs every
// row the apply writes to events, so a transaction applied twice shows up as a duplicate.
const targetOnlyDdl = `
create table ${Q('applylog')} (seq int not null, op text not null);
create function ${Q('log')}() returns trigger language plpgsql as $$
begin insert into ${Q('applylog')} values (new.seq, tg_op); return new; end $$;
create trigger applylog after insert or update on ${Q('events')} for each row execute function ${Q('log')}();
alter table ${Q('events')} enable always trigger applylog;
`;

function applyOpts(extra: Partial<ApplyChangesOptions> = {}): ApplyChangesOptions {
  return { sourceDsn, target, ...main, moveId, stream: 'forward', maxDurationMs: 30_000, idleStopMs: 300, ...extra };
}

async function slotConfirmed(slot: string): Promise<string> {
  const r = await source.query('select confirmed_flush_lsn::text as l from pg_replication_slots where slot_name = $1', [slot]);
  return r.rows[0].l;
}

async function progress(id = moveId): Promise<string> {
  const c = await target.connect();
  try {
    const l = await readAppliedLsn(c, id, 'forward');
    if (!l) throw new Error('no progress row');
    return l;
  } finally {
    c.release();
  }
}

async function rows(pool: typeof source, sql: string, params: unknown[] = []) {
  return (await pool.query(sql, params)).rows;
}

async function writeEvents(from: number, to: number, pauseMs: number) {
  for (let i = from; i < to; i++) {
    await source.query(`insert into ${Q('events')} values ($1, $2, $3)`, [tenant, i, `event ${i}`]);
    if (pauseMs) await new Promise((r) => setTimeout(r, pauseMs));
  }
}

beforeAll(async () => {
  await source.query(ddl);
  await target.query(ddl + targetOnlyDdl);
  await ensurePublicationAndSlot(source, { ...main, tables: mainTables, tenantColumn: 'tenant_id', unit: tenant });
});

afterAll(async () => {
  for (const s of [main, ...extraSlots]) await dropPublicationAndSlot(source, s).catch(() => {});
  const drop = `drop schema if exists ${S} cascade`;
  await source.query(drop).catch(() => {});
  await target.query(drop).catch(() => {});
  await target.query('delete from shardctl.move_progress where move_id = any($1)', [moveIds]).catch(() => {});
  await closePools();
});

describe('publication and slot', () => {
  it('ensurePublicationAndSlot is idempotent and returns the slot consistent point', async () => {
    const first = await slotConfirmed(main.slot);
    const again = await ensurePublicationAndSlot(source, { ...main, tables: mainTables, tenantColumn: 'tenant_id', unit: tenant });
    expect(again.created).toBe(false);
    expect(compareLsn(again.consistentLsn, first)).toBe(0);
    const filters = await rows(source, 'select rowfilter from pg_publication_tables where pubname = $1', [main.publication]);
    expect(filters).toHaveLength(mainTables.length);
    for (const f of filters) expect(f.rowfilter).toContain(`'${tenant}'`);
  });

  it('refuses an existing publication whose row filter names another unit', async () => {
    const err = await ensurePublicationAndSlot(source, { ...main, tables: mainTables, tenantColumn: 'tenant_id', unit: other }).catch((e) => e);
    expect(err).toBeInstanceOf(ShardctlError);
    expect(err.type).toBe('Conflict');
    expect(err.message).toMatch(/row filter/);
  });

  it('refuses a slot that exists without its publication (it predates it and cannot be streamed)', async () => {
    const names = { publication: `${P}_orph`, slot: `${P}_orph` };
    extraSlots.push(names);
    await source.query("select pg_create_logical_replication_slot($1, 'pgoutput')", [names.slot]);
    const err = await ensurePublicationAndSlot(source, { ...names, tables: mainTables, tenantColumn: 'tenant_id', unit: tenant }).catch((e) => e);
    expect(err.type).toBe('Conflict');
    expect(err.message).toMatch(/exists without publication/);
    expect(await rows(source, 'select 1 from pg_publication where pubname = $1', [names.publication])).toEqual([]);
  });

  it('refuses tables without a usable key or replica identity, with a hint, and creates nothing', async () => {
    const tables = ['nopk', 'pknotenant', 'noident'].map((n) => ({ schema: S, name: T(n) }));
    const reasons = await checkReplicaIdentity(source, tables, 'tenant_id');
    expect(reasons).toHaveLength(3);
    expect(reasons[0]).toMatch(/no primary key.*ADD PRIMARY KEY/);
    expect(reasons[1]).toMatch(/does not include "tenant_id".*ADD PRIMARY KEY \("tenant_id", "id"\)/);
    expect(reasons[2]).toMatch(/REPLICA IDENTITY NOTHING.*REPLICA IDENTITY DEFAULT/);
    expect(await checkReplicaIdentity(source, mainTables, 'tenant_id')).toEqual([]);
    const names = { publication: `${P}_bad`, slot: `${P}_bad` };
    const err = await ensurePublicationAndSlot(source, { ...names, tables, tenantColumn: 'tenant_id', unit: tenant }).catch((e) => e);
    expect(err.type).toBe('PreconditionFailed');
    expect((await rows(source, 'select 1 from pg_publication where pubname = $1', [names.publication])).length).toBe(0);
    expect((await rows(source, 'select 1 from pg_replication_slots where slot_name = $1', [names.slot])).length).toBe(0);
  });
});

describe('applyChangesUntil', () => {
  it('converges an initial insert stream and stops at the watermark', async () => {
    const n = 5000;
    for (let b = 0; b < 10; b++) {
      await source.query(`insert into ${Q('items')} select $1, g, 'item ' || g, g % 7 from generate_series($2::int, $3::int) g`, [
        tenant,
        b * (n / 10) + 1,
        (b + 1) * (n / 10),
      ]);
    }
    const w = await currentWalLsn(source);
    const t0 = Date.now();
    const r = await applyChangesUntil(applyOpts({ untilLsn: w, idleStopMs: undefined }));
    const ms = Date.now() - t0;
    console.log(
      `cdc apply: ${r.rowsApplied} rows in ${r.transactionsApplied} txns, ${ms} ms (${Math.round((r.rowsApplied / ms) * 1000)} rows/s), ${r.bytesReceived} bytes received`,
    );
    expect(r.stopReason).toBe('until');
    expect(compareLsn(r.appliedLsn, w)).toBeGreaterThanOrEqual(0);
    expect(r.transactionsApplied).toBe(10);
    expect(r.rowsApplied).toBe(n);
    const q = `select id::text, name, qty from ${Q('items')} where tenant_id = $1 order by id`;
    expect(await rows(target, q, [tenant])).toEqual(await rows(source, q, [tenant]));
    expect(compareLsn(await slotConfirmed(main.slot), await progress())).toBeLessThanOrEqual(0);
  });

  it('reaches a fresh watermark quickly when already caught up (the fence case, measured)', async () => {
    await applyChangesUntil(applyOpts());
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      await source.query(`insert into ${Q('small')} values ($1, $2, 'fence')`, [other, i]); // WAL moves, nothing for us
      const w = await currentWalLsn(source);
      const t0 = Date.now();
      const r = await applyChangesUntil(applyOpts({ untilLsn: w, idleStopMs: undefined, maxDurationMs: 2000 }));
      times.push(Date.now() - t0);
      expect(r).toMatchObject({ stopReason: 'until', caughtUp: true, transactionsApplied: 0 });
      expect(compareLsn(r.appliedLsn, w)).toBeGreaterThanOrEqual(0);
      expect(compareLsn(await slotConfirmed(main.slot), r.appliedLsn)).toBe(0);
    }
    console.log(`cdc apply: empty catch-up to a fresh watermark took ${times.join(', ')} ms`);
    expect(Math.max(...times)).toBeLessThan(1000);
  });

  it('keeps up with a stream of one-row transactions (measured)', async () => {
    const n = 1000;
    for (let i = 0; i < n; i++) await source.query(`insert into ${Q('small')} values ($1, $2, 'v')`, [tenant, i]);
    const w = await currentWalLsn(source);
    const t0 = Date.now();
    const r = await applyChangesUntil(applyOpts({ untilLsn: w, idleStopMs: undefined }));
    const ms = Date.now() - t0;
    console.log(`cdc apply: ${r.transactionsApplied} one-row txns in ${ms} ms (${Math.round((r.transactionsApplied / ms) * 1000)} txns/s)`);
    expect(r.transactionsApplied).toBe(n);
    expect((await rows(target, `select count(*)::int as n from ${Q('small')} where tenant_id = $1`, [tenant]))[0].n).toBe(n);
  });

  it('paces apply to rowsPerSecond, and stops at its time budget with the rest still in the slot', async () => {
    for (let i = 5000; i < 5300; i++) await source.query(`insert into ${Q('small')} values ($1, $2, 'v')`, [tenant, i]);
    const w = await currentWalLsn(source);
    // 100 rows/s for a 1.5 s budget: about 150 of the 300 rows, never all of them.
    const r = await applyChangesUntil(applyOpts({ untilLsn: w, idleStopMs: undefined, maxDurationMs: 1500, rowsPerSecond: 100 }));
    expect(r.stopReason).toBe('deadline');
    expect(r.rowsApplied).toBeGreaterThan(0);
    expect(r.rowsApplied).toBeLessThanOrEqual(200);
    // Unthrottled, the rest follows; nothing is lost or applied twice.
    const rest = await applyChangesUntil(applyOpts({ untilLsn: w, idleStopMs: undefined }));
    expect(r.rowsApplied + rest.rowsApplied).toBe(300);
    expect((await rows(target, `select count(*)::int as n from ${Q('small')} where tenant_id = $1 and id >= 5000`, [tenant]))[0].n).toBe(300);
  });

  it('propagates updates and deletes by key, including a primary-key change', async () => {
    await source.query(`update ${Q('items')} set qty = qty + 100, name = name || '!' where tenant_id = $1 and id % 10 = 0`, [tenant]);
    await source.query(`delete from ${Q('items')} where tenant_id = $1 and id % 10 = 1`, [tenant]);
    await source.query(`update ${Q('items')} set id = 100000 where tenant_id = $1 and id = 2`, [tenant]);
    await source.query(`update ${Q('items')} set id = id + 200000, qty = null where tenant_id = $1 and id in (3, 4)`, [tenant]);
    const r = await applyChangesUntil(applyOpts());
    expect(r.stopReason).toBe('idle');
    expect(r.caughtUp).toBe(true);
    expect(r.lagBytes).toBeLessThan(1024 * 1024);
    const q = `select id::text, name, qty from ${Q('items')} where tenant_id = $1 order by id`;
    const want = await rows(source, q, [tenant]);
    expect(want.length).toBe(4500);
    expect(await rows(target, q, [tenant])).toEqual(want);
  });

  it('keeps an unchanged TOASTed value when only a small column is updated', async () => {
    const big = randomBytes(120_000).toString('base64'); // ~160 KB, incompressible: stored out of line
    await source.query(`insert into ${Q('docs')} values ($1, 1, 1, $2), ($1, 2, 1, $2)`, [tenant, big]);
    await applyChangesUntil(applyOpts());
    await source.query(`update ${Q('docs')} set small = small + 41 where tenant_id = $1`, [tenant]);
    const r = await applyChangesUntil(applyOpts());
    expect(r.rowsApplied).toBe(2);
    const q = `select id, small, length(big) as len, md5(big) as md5 from ${Q('docs')} where tenant_id = $1 order by id`;
    const got = await rows(target, q, [tenant]);
    expect(got).toEqual(await rows(source, q, [tenant]));
    expect(got[0]).toMatchObject({ small: 42, len: big.length });
  });

  it('skips, and counts, an update without its TOAST values for a row missing on the target', async () => {
    await target.query(`delete from ${Q('docs')} where tenant_id = $1 and id = 2`, [tenant]);
    await source.query(`update ${Q('docs')} set small = 7 where tenant_id = $1 and id = 2`, [tenant]);
    const r = await applyChangesUntil(applyOpts());
    expect(r.transactionsApplied).toBe(1);
    expect(r.rowsSkippedIncomplete).toBe(1);
    expect(await rows(target, `select id from ${Q('docs')} where tenant_id = $1 order by id`, [tenant])).toEqual([{ id: 1 }]);
    // Put the row back the way the copy would, so later comparisons start equal again.
    await target.query(`insert into ${Q('docs')} select * from (values ($1, 2, 7, (select big from ${Q('docs')} where tenant_id = $1 and id = 1))) v`, [
      tenant,
    ]);
  });

  it("does not apply other tenants' changes (row filter)", async () => {
    await source.query(`insert into ${Q('items')} select $1, g, 'other', 1 from generate_series(1, 50) g`, [other]);
    await source.query(`update ${Q('items')} set qty = 2 where tenant_id = $1`, [other]);
    await source.query(`delete from ${Q('items')} where tenant_id = $1 and id < 10`, [other]);
    await source.query(`insert into ${Q('items')} values ($1, 999999, 'mine', 1)`, [tenant]);
    const r = await applyChangesUntil(applyOpts());
    expect(r.rowsApplied).toBe(1);
    expect((await rows(target, `select count(*)::int as n from ${Q('items')} where tenant_id = $1`, [other]))[0].n).toBe(0);
    expect((await rows(target, `select name from ${Q('items')} where tenant_id = $1 and id = 999999`, [tenant]))[0].name).toBe('mine');
  });

  it('streams a transaction far larger than the memory bound, pausing the socket instead of buffering', async () => {
    await source.query(`insert into ${Q('items')} select $1, g, repeat('x', 200) || g, 1 from generate_series(300000, 319999) g`, [tenant]);
    const r = await applyChangesUntil(applyOpts({ maxTxBytes: 256 * 1024 }));
    expect(r).toMatchObject({ transactionsApplied: 1, rowsApplied: 20_000 });
    expect(r.bytesReceived).toBeGreaterThan(4 * 1024 * 1024);
    expect(r.backpressurePauses).toBeGreaterThan(0);
    const q = `select count(*)::int as n, md5(string_agg(name, ',' order by id)) as h from ${Q('items')} where tenant_id = $1 and id >= 300000`;
    expect(await rows(target, q, [tenant])).toEqual(await rows(source, q, [tenant]));
  });

  it('applies a source transaction bigger than a whole round once, in that round, instead of rolling it back every round', async () => {
    // Applying it takes longer than two rounds: every row waits 1 ms on the target (an ALWAYS
    // trigger fires in the apply session's replica role too): 5k rows, over 5 s.
    const slow = `${S}.${T('slow_apply')}`;
    await target.query(`create function ${slow}() returns trigger language plpgsql as $$ begin perform pg_sleep(0.001); return new; end $$`);
    await target.query(`create trigger slow_apply before insert on ${Q('items')} for each row execute function ${slow}()`);
    await target.query(`alter table ${Q('items')} enable always trigger slow_apply`);
    try {
      await source.query(`insert into ${Q('items')} select $1, g, repeat('y', 300) || g, 1 from generate_series(400000, 404999) g`, [tenant]);
      let alive = 0;
      // A round of 1.5 s (hard deadline 3 s) rolled the transaction back at the deadline before,
      // and the next round started over: it was never applied.
      const t0 = Date.now();
      const r = await applyChangesUntil(applyOpts({ maxDurationMs: 1500, idleStopMs: undefined, maxTxBytes: 256 * 1024, onAlive: () => alive++ }));
      expect(Date.now() - t0).toBeGreaterThan(3000); // it did run past the hard deadline of the round
      expect(r).toMatchObject({ transactionsApplied: 1, rowsApplied: 5_000 });
      expect(alive).toBeGreaterThan(0);
    } finally {
      await target.query(`drop trigger slow_apply on ${Q('items')}`);
      await target.query(`drop function ${slow}()`);
    }
    const q = `select count(*)::int as n, md5(string_agg(name, ',' order by id)) as h from ${Q('items')} where tenant_id = $1 and id >= 400000`;
    expect(await rows(target, q, [tenant])).toEqual(await rows(source, q, [tenant]));
  });

  it('lets only one session of a move apply at a time: a second one takes over and the first stops', async () => {
    const results = await Promise.allSettled([applyChangesUntil(applyOpts({ idleStopMs: 1500 })), applyChangesUntil(applyOpts({ idleStopMs: 1500 }))]);
    expect(results.map((r) => r.status).sort()).toEqual(['fulfilled', 'rejected']);
  });

  it('round-trips every type exactly and recomputes generated columns on the target', async () => {
    await source.query(
      `insert into ${Q('typed')} (tenant_id, id, n, j, arr, b, ts, mood, d, nul, "MixedCase") values
        ($1, 1, 12345678901234.123456, $2, '{1,NULL,-3}', '\\x00ff10', '2024-02-29 23:59:59.123456+05:30', 'it''s ok', 7, null, 'Ab"C'),
        ($1, 2, -0.000001, '[]', '{}', '', '-infinity', 'sad', 1, 'x', ''),
        ($1, 3, null, null, null, null, null, null, null, null, null)`,
      [tenant, '{"big": 123456789012345678901234567890, "f": 1.50, "s": "q\\"uote", "u": "ünï", "nested": [1, {"a": null}]}'],
    );
    await source.query(
      `update ${Q('typed')} set n = 'NaN', arr = '{{1,2},{3,4}}', ts = '2000-01-01 00:00:00.000001+00', "MixedCase" = 'changed' where tenant_id = $1 and id = 2`,
      [tenant],
    );
    await applyChangesUntil(applyOpts());
    const q = `select id, n::text, j::text, arr::text, encode(b, 'hex') as b, (ts at time zone 'UTC')::text as ts, mood::text, d::text, nul, "MixedCase", g
                 from ${Q('typed')} where tenant_id = $1 order by id`;
    const got = await rows(target, q, [tenant]);
    expect(got).toEqual(await rows(source, q, [tenant]));
    expect(got.map((r) => r.g)).toEqual([2, 4, 6]);
    expect(got[0]).toMatchObject({ n: '12345678901234.123456', ts: '2024-02-29 18:29:59.123456', mood: "it's ok", MixedCase: 'Ab"C', b: '00ff10', nul: null });
  });

  it('applies nothing twice across an abort, a killed walsender and a takeover, all mid-stream', async () => {
    const total = 900;
    let written = 0;
    const writer = (async () => {
      for (let i = 0; i < total; i++) {
        await source.query(`insert into ${Q('events')} values ($1, $2, $3)`, [tenant, i, `event ${i}`]);
        written++;
        await new Promise((r) => setTimeout(r, 4));
      }
    })();
    const progressed = async (since: string) => {
      for (let i = 0; i < 400 && compareLsn(await progress(), since) <= 0; i++) await new Promise((r) => setTimeout(r, 25));
    };
    // 1: stop with the abort signal.
    const ac = new AbortController();
    const r1 = await applyChangesUntil(
      applyOpts({
        idleStopMs: undefined,
        signal: ac.signal,
        onProgress: (p) => {
          if (p.transactionsApplied >= 40) ac.abort();
        },
      }),
    );
    expect(r1.stopReason).toBe('aborted');
    expect(written).toBeLessThan(total);
    expect(compareLsn(await slotConfirmed(main.slot), await progress())).toBeLessThanOrEqual(0);
    // 2: the walsender dies under a running apply (the network or the source drops it).
    let before = await progress();
    const run2 = applyChangesUntil(applyOpts({ idleStopMs: undefined }));
    run2.catch(() => {});
    await progressed(before);
    await source.query('select pg_terminate_backend(active_pid) from pg_replication_slots where slot_name = $1 and active_pid is not null', [main.slot]);
    await expect(run2).rejects.toThrow();
    expect(written).toBeLessThan(total);
    // 3: a newer session (a retried activity) takes over from one that is still running.
    before = await progress();
    const stale = applyChangesUntil(applyOpts({ idleStopMs: undefined }));
    stale.catch(() => {});
    await progressed(before);
    const newer = applyChangesUntil(applyOpts({ idleStopMs: 1000 }));
    await expect(stale).rejects.toThrow();
    expect(written).toBeLessThan(total);
    await writer;
    const r3 = await newer;
    expect(r3.caughtUp).toBe(true);
    const events = await rows(target, `select count(*)::int as n from ${Q('events')} where tenant_id = $1`, [tenant]);
    expect(events[0].n).toBe(total);
    const log = await rows(target, `select count(*)::int as n, count(distinct seq)::int as d from ${Q('applylog')}`);
    expect(log[0]).toEqual({ n: total, d: total });
  });

  it("never acknowledges the slot past the target's stored progress", async () => {
    const from = 10_000;
    const writer = writeEvents(from, from + 300, 2);
    let sampling = true;
    const violations: string[] = [];
    let samples = 0;
    const sampler = (async () => {
      while (sampling) {
        const acked = await slotConfirmed(main.slot); // read the ack first: progress only grows after it
        const stored = await progress();
        samples++;
        if (compareLsn(acked, stored) > 0) violations.push(`${acked} > ${stored}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const run = applyChangesUntil(applyOpts({ idleStopMs: 1000 }));
    await writer;
    const r = await run;
    sampling = false;
    await sampler;
    expect(r.transactionsApplied).toBeGreaterThan(0);
    expect(samples).toBeGreaterThan(10);
    expect(violations).toEqual([]);
    expect(compareLsn(await slotConfirmed(main.slot), await progress())).toBe(0);
    expect(await slotLagBytes(source, main.slot)).toBeLessThan(1024 * 1024);
  });

  it('refuses a TRUNCATE of a tenant table and does not advance past it', async () => {
    const names = { publication: `${P}_tr`, slot: `${P}_tr` };
    const trMove = uniq('move-tr');
    extraSlots.push(names);
    moveIds.push(trMove);
    const tables = [{ schema: S, name: T('trunc') }];
    await ensurePublicationAndSlot(source, { ...names, tables, tenantColumn: 'tenant_id', unit: tenant });
    await source.query(`insert into ${Q('trunc')} values ($1, 1), ($1, 2)`, [tenant]);
    const ok = await applyChangesUntil(applyOpts({ ...names, moveId: trMove }));
    expect(ok.rowsApplied).toBe(2);
    const stored = await progress(trMove);
    await source.query(`truncate ${Q('trunc')}`);
    for (let attempt = 0; attempt < 2; attempt++) {
      const err = await applyChangesUntil(applyOpts({ ...names, moveId: trMove })).catch((e) => e);
      expect(err).toBeInstanceOf(ShardctlError);
      expect(err.type).toBe('PreconditionFailed');
      expect(err.message).toMatch(/TRUNCATE .* cannot be moved/);
    }
    expect(compareLsn(await progress(trMove), stored)).toBe(0);
    expect((await rows(target, `select count(*)::int as n from ${Q('trunc')}`))[0].n).toBe(2);
  });

  it('drop removes the slot and publication even while a walsender holds the slot', async () => {
    const names = { publication: `${P}_dr`, slot: `${P}_dr` };
    extraSlots.push(names);
    await ensurePublicationAndSlot(source, { ...names, tables: [{ schema: S, name: T('trunc') }], tenantColumn: 'tenant_id', unit: tenant });
    const zombie = new LogicalReplicationService({ connectionString: sourceDsn }, { acknowledge: { auto: false, timeoutSeconds: 0 } });
    zombie.on('error', () => {});
    zombie.subscribe(new PgoutputPlugin({ protoVersion: 1, publicationNames: [names.publication] }), names.slot).catch(() => {});
    try {
      for (let i = 0; i < 200; i++) {
        const r = await rows(source, 'select active from pg_replication_slots where slot_name = $1', [names.slot]);
        if (r[0]?.active) break;
        await new Promise((res) => setTimeout(res, 25));
      }
      expect((await rows(source, 'select active from pg_replication_slots where slot_name = $1', [names.slot]))[0].active).toBe(true);
      expect(await dropPublicationAndSlot(source, names)).toEqual({ droppedSlot: true, droppedPublication: true });
      expect(await rows(source, 'select 1 from pg_replication_slots where slot_name = $1', [names.slot])).toEqual([]);
      expect(await rows(source, 'select 1 from pg_publication where pubname = $1', [names.publication])).toEqual([]);
      expect(await dropPublicationAndSlot(source, names)).toEqual({ droppedSlot: false, droppedPublication: false });
    } finally {
      await zombie.destroy().catch(() => {});
    }
  });
});
