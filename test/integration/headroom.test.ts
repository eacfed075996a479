// Headroom reservations of moves in flight (issue 15) against the real stack: two moves planned at
// once onto a shard with room for one — the second is refused naming the first's reservation, and
// accepted once the first has ended; concurrent reservations serialise; a reservation whose
// workflow is gone is reported by `doctor` and released once by its fix.
//
// Isolation: the capacities here would starve every other suite's moves onto the shared shards, so
// this file runs on a directory database of its own (created on the directory server, dropped at
// the end): its shard-c capacity, its tenants and its reservations are seen by no other suite. The
// shards, Temporal and S3 are the shared ones; tenant ids are unique to the run.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool } from 'pg';
import type { Config } from '../../lib/config';
import { testConfig, shardPool, uniq, closePools } from '../helpers/stack';
import { runCli, configFile } from '../helpers/cli';
import * as H from '../helpers/move';
import * as M from '../../workflows/messages';
import { openPool } from '../../lib/connections';
import { ensureDirectory } from '../../lib/directory/ensure';
import { setShardCapacity, shardLoad } from '../../lib/directory/shards';
import { committedLoad } from '../../lib/directory/choose';
import { createTenant } from '../../lib/tenants';
import { reserveHeadroom, listOpenReservations } from '../../lib/directory/reservations';
import { startMove } from '../../lib/moves/start';
import { startWorker } from '../../worker';
import { Router } from '../../lib/router';
import { seedTenant } from '../../lib/seed';
import { createConnections } from '../../lib/connections';
import type { Finding } from '../../lib/doctor/findings';
import { dropPublicationAndSlot } from '../../lib/cdc';
import { replicationNames } from '../../lib/ids';

const TARGET = 'shard-c';
// Usable capacity of the target here: 100 × (1 − 0.1) = 90; each tenant weighs 50, so one fits, not two.
const CAPACITY = 100;
const LOAD = 50;

const dbName = `shardctl_headroom_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
let server: Pool;
let dir: Pool;
let cfg: Config;
let cfgFile: { file: string; remove: () => void };
let worker: Awaited<ReturnType<typeof startWorker>>;
let t: Awaited<ReturnType<typeof H.temporal>>;
const tq = uniq('headroom');
/** Every move this file started: any still running at the end is terminated and its slots dropped. */
const started: { unit: string; h: Awaited<ReturnType<typeof startMove>> }[] = [];
async function start(unit: string, o: Partial<M.MoveInput> = {}) {
  const h = await startMove(t.client, tq, input(unit, o));
  started.push({ unit, h });
  return h;
}

async function tenantOnA(prefix: string, seedRows = 0): Promise<string> {
  const tenant = uniq(prefix);
  await createTenant({ directory: dir, shardPool, config: cfg }, { tenant, shard: 'shard-a', expectedLoad: LOAD, actor: 'test' });
  if (seedRows) {
    const router = await Router.create(cfg, { listen: false });
    const conns = createConnections(cfg);
    try {
      await seedTenant({ router, s3For: (s) => conns.s3For(s), config: cfg, tenant, rows: seedRows, blobs: 2 });
    } finally {
      await router.close();
      await conns.close();
    }
  }
  return tenant;
}

function input(tenant: string, o: Partial<M.MoveInput> = {}): M.MoveInput {
  return H.moveInput(tenant, TARGET, { soakSeconds: 1, ...o });
}

async function reservationRows(unit: string) {
  const r = await dir.query(
    `select move_id, load, released_at is not null as released, released_by from shardctl.reservations where unit = $1 order by taken_at`,
    [unit],
  );
  return r.rows;
}

async function releaseAudits(moveId: string): Promise<number> {
  const r = await dir.query(`select count(*)::int as n from shardctl.audit where action = 'reservation.release' and detail->>'moveId' = $1`, [moveId]);
  return r.rows[0].n;
}

/** Until `n` sessions of this file's directory database wait on a lock. */
async function waitForLockWaiters(n: number): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const r = await server.query(`select count(*)::int as n from pg_stat_activity where datname = $1 and wait_event_type = 'Lock'`, [dbName]);
    if (r.rows[0].n >= n) return;
    await new Promise((res) => setTimeout(res, 50));
  }
  throw new Error(`fewer than ${n} sessions of ${dbName} ever waited on a lock`);
}

beforeAll(async () => {
  await H.prepareStack();
  const base = testConfig();
  server = openPool(base.directory.dsn, { max: 2 });
  await server.query(`create database ${dbName}`);
  const url = new URL(base.directory.dsn);
  url.pathname = `/${dbName}`;
  cfg = { ...base, directory: { dsn: url.toString() } };
  cfgFile = configFile(cfg);
  dir = openPool(cfg.directory.dsn, { max: 6 });
  await ensureDirectory(dir, cfg);
  worker = await startWorker(cfg, { taskQueue: tq });
  t = await H.temporal();
}, 120_000);

afterAll(async () => {
  for (const { h } of started) {
    const d = await h.describe().catch(() => undefined);
    if (d?.status.name !== 'RUNNING') continue;
    const st = await h.query(M.statusQuery).catch(() => undefined);
    await h.terminate('headroom test cleanup').catch(() => {});
    if (!st?.moveId) continue;
    for (const [direction, side] of [
      ['forward', st.source],
      ['reverse', TARGET],
    ] as const)
      if (side) await dropPublicationAndSlot(shardPool(side), replicationNames(st.moveId, direction)).catch(() => {});
  }
  await t?.close();
  await worker?.shutdown();
  await dir?.end();
  await server?.query(`drop database if exists ${dbName} with (force)`).catch(() => {});
  await server?.end();
  cfgFile?.remove();
  await closePools();
});

describe('headroom reservations of moves in flight (a directory database of its own)', () => {
  it(
    'two moves planned at once onto a shard with room for one: the second is refused naming the reservation, and accepted after the first ends',
    { timeout: 240_000 },
    async () => {
      await setShardCapacity(dir, TARGET, CAPACITY, { actor: 'test', reason: 'room for one tenant of 50' });
      expect(committedLoad((await shardLoad(dir, TARGET))!)).toBe(0);
      const a = await tenantOnA('hra', 20);
      const b = await tenantOnA('hrb', 20);
      // Both start together; the first holds its reservation at the approval gate, before any freeze.
      const [ha, hb] = await Promise.all([a, b].map((u) => start(u, { approveCutover: 'manual' })));
      const [sa, sb] = await Promise.all([ha, hb].map((h) => H.waitFor(h, (s) => s.phase === 'failed' || s.awaitingApproval, 120_000)));
      const failed = [sa, sb].filter((s) => s.phase === 'failed');
      expect(
        failed.map((s) => s.unit),
        `exactly one of the two moves must be refused: ${JSON.stringify([sa.phase, sb.phase])}`,
      ).toHaveLength(1);
      const [won, lost] =
        sa.phase === 'failed'
          ? [
              { unit: b, h: hb, s: sb },
              { unit: a, h: ha, s: sa },
            ]
          : [
              { unit: a, h: ha, s: sa },
              { unit: b, h: hb, s: sb },
            ];
      expect(lost.s.lastError).toContain(`target ${TARGET} lacks headroom`);
      expect(lost.s.lastError).toContain(`reservation ${LOAD} by move ${won.s.moveId} of ${won.unit}`);
      expect(lost.s.blockedReason).toMatch(/^plan: /);
      // The refused move changed nothing: no reservation of its own, its unit still active on shard-a.
      expect(await reservationRows(lost.unit)).toEqual([]);
      expect(await reservationRows(won.unit)).toEqual([{ move_id: won.s.moveId, load: String(LOAD), released: false, released_by: null }]);

      // The first ends (cancelled): its reservation is released, once.
      await won.h.executeUpdate(M.cancelUpdate, { args: [{ actor: 'test', reason: 'make room' }] });
      await H.waitFor(won.h, (s) => s.phase === 'cancelled', 90_000);
      expect(await reservationRows(won.unit)).toEqual([{ move_id: won.s.moveId, load: String(LOAD), released: true, released_by: 'test' }]);
      expect(await releaseAudits(won.s.moveId)).toBe(1);

      // Now the second is accepted, and runs to the end; its retire releases its reservation.
      const again = await start(lost.unit);
      const done = await H.waitFor(
        again,
        (s) => {
          if (s.phase === 'failed' || s.phase === 'cancelled') throw new Error(`second move ended ${s.phase}: ${s.lastError}`);
          return s.phase === 'done';
        },
        180_000,
      );
      expect((await dir.query('select shard from shardctl.units where unit = $1', [lost.unit])).rows[0].shard).toBe(TARGET);
      const rows = await reservationRows(lost.unit);
      expect(rows).toEqual([{ move_id: done.moveId, load: String(LOAD), released: true, released_by: 'test' }]);
      expect(await releaseAudits(done.moveId)).toBe(1);
      expect(await listOpenReservations(dir)).toEqual([]);
    },
  );

  it('concurrent reservations onto the last room serialise: exactly one is taken, the other names it', async () => {
    await setShardCapacity(dir, TARGET, 200, { actor: 'test', reason: 'room for one unit, not two' });
    const [x, y] = [await tenantOnA('hrx'), await tenantOnA('hry')];
    // Whatever this file placed on shard-c before: each unit weighs just over half of what is left.
    const room = 200 * 0.9 - committedLoad((await shardLoad(dir, TARGET))!);
    const load = Math.floor(room / 2) + 1;
    expect(load).toBeLessThanOrEqual(room);
    await dir.query(`update shardctl.units set expected_load = $2 where unit = any($1)`, [[x, y], load]);
    const req = (u: string) => ({ moveId: `${u}.e1.test`, unit: u, source: 'shard-a', target: TARGET, epoch: 1, workflowId: `move-${u}`, actor: 'test' });
    // Both must check before either inserts: a session holding the table in SHARE mode lets every
    // read through and holds every insert; it lets go once both takers wait on a lock.
    const holder = await dir.connect();
    let results: Awaited<ReturnType<typeof reserveHeadroom>>[];
    try {
      await holder.query('begin');
      await holder.query('lock table shardctl.reservations in share mode');
      const taking = Promise.all([x, y].map((u) => reserveHeadroom(dir, req(u), cfg.limits.headroomFraction)));
      await waitForLockWaiters(2);
      await holder.query('commit');
      results = await taking;
    } finally {
      holder.release();
    }
    const ok = results.filter((r) => r.ok);
    expect(ok, JSON.stringify(results)).toHaveLength(1);
    const refused = results.find((r) => !r.ok) as { ok: false; reasons: string[] };
    const winner = ok[0].ok ? ok[0].reservation.unit : '';
    expect(refused.reasons[0]).toContain(`reservation ${load} by move ${winner}.e1.test of ${winner}`);
    // A second delivery of the winner's reservation is the same reservation, not a second one.
    const twice = await reserveHeadroom(dir, req(winner), cfg.limits.headroomFraction);
    expect(twice).toMatchObject({ ok: true, taken: false });
    expect((await reservationRows(winner)).length).toBe(1);
    await dir.query(`update shardctl.reservations set released_at = now(), released_by = 'test' where unit = $1`, [winner]);
  });

  it('the next move of a unit supersedes the reservation its gone move left; another workflow’s is refused', async () => {
    await setShardCapacity(dir, TARGET, 10_000, { actor: 'test', reason: 'room' });
    const u = await tenantOnA('hrsup');
    const req = (moveId: string, workflowId = `move-${u}`) => ({ moveId, unit: u, source: 'shard-a', target: TARGET, epoch: 1, workflowId, actor: 'test' });
    expect(await reserveHeadroom(dir, req(`${u}.e1.old`), 0.1)).toMatchObject({ ok: true, taken: true });
    const foreign = await reserveHeadroom(dir, req(`${u}.e1.other`, 'some-other-workflow'), 0.1);
    expect(foreign).toMatchObject({ ok: false });
    expect((foreign as { reasons: string[] }).reasons[0]).toContain(`already holds a headroom reservation of move ${u}.e1.old`);
    expect(await reserveHeadroom(dir, req(`${u}.e1.new`), 0.1)).toMatchObject({ ok: true, taken: true });
    expect(await reservationRows(u)).toEqual([
      { move_id: `${u}.e1.old`, load: String(LOAD), released: true, released_by: 'test' },
      { move_id: `${u}.e1.new`, load: String(LOAD), released: false, released_by: null },
    ]);
    expect(await releaseAudits(`${u}.e1.old`)).toBe(1);
    await dir.query(`update shardctl.reservations set released_at = now(), released_by = 'test' where unit = $1`, [u]);
  });

  it('a new tenant is not placed into room a move in flight has reserved', async () => {
    const z = await tenantOnA('hrz');
    await dir.query(`update shardctl.units set expected_load = 1 where unit = $1`, [z]);
    // Every shard but shard-c full in this directory; shard-c's room then taken by z's reservation.
    for (const s of ['shard-a', 'shard-b']) await dir.query(`update shardctl.shards set capacity = 1 where name = $1`, [s]);
    await setShardCapacity(dir, TARGET, 200, { actor: 'test', reason: 'a known room' });
    const room = 200 * 0.9 - committedLoad((await shardLoad(dir, TARGET, { exceptUnit: z }))!);
    await dir.query(`update shardctl.units set expected_load = $2 where unit = $1`, [z, room]);
    const r = await reserveHeadroom(
      dir,
      { moveId: `${z}.e1.test`, unit: z, source: 'shard-a', target: TARGET, epoch: 1, workflowId: `move-${z}`, actor: 'test' },
      0.1,
    );
    expect(r.ok, JSON.stringify(r)).toBe(true);
    const err = await createTenant({ directory: dir, shardPool, config: cfg }, { tenant: uniq('hrnew'), expectedLoad: 1, actor: 'test' }).catch((e) => e);
    expect(err?.type).toBe('NoCapacity');
    await dir.query(`update shardctl.reservations set released_at = now(), released_by = 'test' where unit = $1`, [z]);
    const placed = await createTenant({ directory: dir, shardPool, config: cfg }, { tenant: uniq('hrnew'), expectedLoad: 1, actor: 'test' });
    expect(placed.shard).toBe(TARGET);
    for (const s of ['shard-a', 'shard-b']) await dir.query(`update shardctl.shards set capacity = 1000 where name = $1`, [s]);
  });

  it('a reservation taken between a tenant’s placement choice and its insert refuses the insert, and the tenant’s fence is removed', async () => {
    for (const s of ['shard-a', 'shard-b']) await dir.query(`update shardctl.shards set capacity = 1 where name = $1`, [s]);
    try {
      await setShardCapacity(dir, TARGET, 200, { actor: 'test', reason: 'a known room' });
      const w = await tenantOnA('hrw');
      const tenant = uniq('hrlate');
      const err = await createTenant(
        {
          directory: dir,
          shardPool,
          config: cfg,
          // After shard-c was chosen and the fence written: a move takes all of shard-c's room.
          afterFence: async ({ shard }) => {
            expect(shard).toBe(TARGET);
            const room = 200 * 0.9 - committedLoad((await shardLoad(dir, TARGET, { exceptUnit: w }))!);
            await dir.query(`update shardctl.units set expected_load = $2 where unit = $1`, [w, room]);
            const r = await reserveHeadroom(
              dir,
              { moveId: `${w}.e1.test`, unit: w, source: 'shard-a', target: TARGET, epoch: 1, workflowId: `move-${w}`, actor: 'test' },
              0.1,
            );
            expect(r.ok, JSON.stringify(r)).toBe(true);
          },
        },
        { tenant, expectedLoad: 1, actor: 'test' },
      ).catch((e) => e);
      expect(err?.type, String(err)).toBe('NoCapacity');
      expect(err.message).toContain(`shard ${TARGET} has no room for 1 now`);
      expect((await dir.query('select 1 from shardctl.units where unit = $1', [tenant])).rowCount).toBe(0);
      expect((await shardPool(TARGET).query('select 1 from shardctl.fence where unit = $1', [tenant])).rowCount).toBe(0);
      await dir.query(`update shardctl.reservations set released_at = now(), released_by = 'test' where unit = $1`, [w]);
    } finally {
      for (const s of ['shard-a', 'shard-b']) await dir.query(`update shardctl.shards set capacity = 1000 where name = $1`, [s]);
    }
  });

  it('doctor reports a reservation whose move workflow is gone, and --fix releases it once', { timeout: 180_000 }, async () => {
    const u = await tenantOnA('hrgone', 10);
    await setShardCapacity(dir, TARGET, 10_000, { actor: 'test', reason: 'room' });
    const h = await start(u, { approveCutover: 'manual' });
    const s = await H.waitFor(h, (x) => x.awaitingApproval || x.phase === 'failed', 120_000);
    expect(s.phase, s.lastError).not.toBe('failed');
    await h.terminate('headroom test: a move whose workflow is gone');
    const doctor = async (...args: string[]) => {
      const r = await runCli(['--config', cfgFile.file, 'doctor', '--json', ...args], { timeoutMs: 90_000 });
      return { code: r.code, findings: (r.stdout ? JSON.parse(r.stdout).findings : []) as Finding[], stdout: r.stdout, stderr: r.stderr };
    };
    // Visibility lags the termination by a moment: ask again until the move is no longer listed as running.
    let d = await doctor();
    for (let i = 0; i < 20 && !d.findings.some((x) => x.id === `stale-reservation:${s.moveId}`); i++) {
      await new Promise((r) => setTimeout(r, 1000));
      d = await doctor();
    }
    expect(d.code).toBe(1);
    const f = d.findings.find((x) => x.id === `stale-reservation:${s.moveId}`);
    expect(f, d.stdout + d.stderr).toMatchObject({
      kind: 'stale-reservation',
      unit: u,
      autoFix: true,
      fix: `shardctl doctor --fix stale-reservation:${s.moveId}`,
    });
    expect(f!.message).toContain('no move workflow runs for it');

    const fixed = await runCli(['--config', cfgFile.file, 'doctor', '--fix', `stale-reservation:${s.moveId}`, '--actor', 'doctor-test'], { timeoutMs: 90_000 });
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(fixed.stdout).toContain(`released the headroom reservation of move ${s.moveId}`);
    expect(await reservationRows(u)).toEqual([{ move_id: s.moveId, load: String(LOAD), released: true, released_by: 'doctor-test' }]);
    expect(await releaseAudits(s.moveId)).toBe(1);
    const after = await doctor();
    expect(after.findings.map((x) => x.id)).not.toContain(`stale-reservation:${s.moveId}`);
    // The terminated move's slot and publication: drop them (they pin the shared shard's WAL).
    await dropPublicationAndSlot(shardPool('shard-a'), replicationNames(s.moveId, 'forward'));
  });
});
