// A whole move run under docs/production.md's least-privilege roles, never a superuser: the
// superuser only sets the fleet up (databases, the owner role, `directory migrate`, then
// lib/grants.ts's SQL, the very text the page prints). The tenant tables and schema `shardctl`
// are owned by an application owner role, which runs `shards prepare`; a `shardctl worker`
// process connects as the worker role on its own task queue; seed and live traffic go through
// routers connecting as the router role. The fleet lives in databases of its own on the stack's
// servers (roles and databases named for this run, dropped at the end), so no other suite's
// tables, tenants or superuser workers take part.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Pool } from 'pg';
import type { S3Client } from '@aws-sdk/client-s3';
import { testConfig } from '../helpers/stack';
import * as H from '../helpers/move';
import { spawnCollecting, newMark, killMarked, MARK_VAR, type Spawned } from '../helpers/procs';
import { openPool, createConnections, type Connections } from '../../lib/connections';
import type { Config } from '../../lib/config';
import { prepareShard } from '../../lib/shard/prepare';
import { ensureDirectory } from '../../lib/directory/ensure';
import { createTenant } from '../../lib/tenants';
import { getPlacement } from '../../lib/directory/placements';
import { Router } from '../../lib/router';
import { seedTenant } from '../../lib/seed';
import { startLoadgen, readLog } from '../../lib/loadgen';
import { expectLogVerified } from '../helpers/crash';
import { snapshotUnit, unitLeftovers } from '../../lib/loadgen/baseline';
import { replicationNamePattern, moveWorkflowId } from '../../lib/ids';
import { phaseReached, isTerminal } from '../../workflows/phases';
import * as M from '../../workflows/messages';
import { fingerprintUnit } from '../../lib/validate/fingerprint';
import { listTenantTables } from '../../lib/shard/tables';
import { shardGrantsSql, directoryGrantsSql, type RoleNames } from '../../lib/grants';

const ROOT = path.resolve(__dirname, '../..');
const run = `lp${randomBytes(3).toString('hex')}`;
const NAMES: RoleNames = {
  owner: `${run}_owner`,
  worker: `${run}_worker`,
  router: `${run}_writer`,
  database: `${run}_app`,
  directoryDatabase: `${run}_dir`,
  tenantSchemas: ['public'],
};
const PASSWORD = { owner: randomBytes(12).toString('hex'), worker: randomBytes(12).toString('hex'), router: randomBytes(12).toString('hex') };
const mark = newMark('lpriv');
const tq = `${run}-moves`;

/** `dsn` with another database and, optionally, another user. */
function dsnOf(dsn: string, db: string, user?: keyof typeof PASSWORD): string {
  const u = new URL(dsn);
  u.pathname = `/${db}`;
  if (user) {
    u.username = NAMES[user];
    u.password = PASSWORD[user];
  }
  return u.toString();
}

/** The stack's config over this run's databases, connecting as `user` (default: the superuser). */
function fleetConfig(user?: keyof typeof PASSWORD): Config {
  const base = testConfig();
  return {
    ...base,
    // The plpgsql fence: the native one's C functions can only be created by a superuser
    // (docs/production.md, "The native fence"), and no superuser prepares this fleet.
    fence: {},
    temporal: { ...base.temporal, taskQueue: tq },
    directory: { dsn: dsnOf(base.directory.dsn, NAMES.directoryDatabase, user === 'owner' ? undefined : user) },
    shards: base.shards.map((s) => ({ ...s, dsn: dsnOf(s.dsn, NAMES.database, user) })),
  };
}

const servers = () => [testConfig().directory.dsn, ...testConfig().shards.map((s) => s.dsn)];
const opened: Pool[] = [];
const pool = (dsn: string) => {
  const p = openPool(dsn, { max: 4 });
  opened.push(p);
  return p;
};
/** The superuser on a server's maintenance database (roles and databases are per server). */
const serverAdmin = (dsn: string) => pool(dsnOf(dsn, 'postgres'));

let admin: Connections;
let t: Awaited<ReturnType<typeof H.temporal>>;
let worker: Spawned;
let configFile = '';
let setUp = false;

async function setUpFleet() {
  const base = testConfig();
  for (const dsn of servers()) {
    const a = serverAdmin(dsn);
    if (dsn === base.directory.dsn) {
      await a.query(`create database ${NAMES.directoryDatabase}`);
      continue;
    }
    await a.query(`create role ${NAMES.owner} login password '${PASSWORD.owner}'`);
    await a.query(`create database ${NAMES.database} owner ${NAMES.owner}`);
  }
  setUp = true;
  // The application's owner creates its tables and prepares its shards (the fence on its tables).
  const owner = fleetConfig('owner');
  for (const s of owner.shards) {
    const p = pool(s.dsn);
    await prepareShard(p, owner, { demoSchema: true });
  }
  // The directory's first migration and inventory: the one-time admin step.
  admin = createConnections(fleetConfig(), { max: 4 });
  await ensureDirectory(admin.directoryPool(), fleetConfig());
  // The documented grants, as printed by docs/production.md.
  for (const s of fleetConfig().shards) {
    await admin.shardPool(s.name).query(shardGrantsSql(NAMES));
    await admin.shardPool(s.name).query(`alter role ${NAMES.worker} password '${PASSWORD.worker}'; alter role ${NAMES.router} password '${PASSWORD.router}'`);
  }
  await admin.directoryPool().query(directoryGrantsSql(NAMES));
  await admin.directoryPool().query(`alter role ${NAMES.worker} password '${PASSWORD.worker}'; alter role ${NAMES.router} password '${PASSWORD.router}'`);
}

async function tearDownFleet() {
  const base = testConfig();
  for (const dsn of servers()) {
    const a = serverAdmin(dsn);
    const dbs = dsn === base.directory.dsn ? [NAMES.directoryDatabase, `${NAMES.directoryDatabase}_new`] : [NAMES.database];
    for (const db of dbs) {
      await a.query(`select pg_drop_replication_slot(slot_name) from pg_replication_slots where database = $1 and not active`, [db]).catch(() => {});
      await a.query(`drop database if exists ${db} with (force)`);
    }
    await a.query(`revoke set on parameter session_replication_role from ${NAMES.worker}`).catch(() => {});
    for (const r of [NAMES.worker, NAMES.router, NAMES.owner]) await a.query(`drop role if exists ${r}`);
  }
}

beforeAll(async () => {
  await setUpFleet();
  t = await H.temporal();
  configFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'lpriv-')), 'config.json');
  fs.writeFileSync(configFile, JSON.stringify(fleetConfig('worker')), { mode: 0o600 });
  // Every connection of the worker's configuration is the worker role's.
  const written: Config = JSON.parse(fs.readFileSync(configFile, 'utf8'));
  for (const dsn of [written.directory.dsn, ...written.shards.map((s) => s.dsn)]) {
    expect({ user: new URL(dsn).username, password: new URL(dsn).password }).toEqual({ user: NAMES.worker, password: PASSWORD.worker });
  }
  worker = spawnCollecting(process.execPath, [path.join(ROOT, 'cli/shardctl.js'), 'worker', '--config', configFile, '--task-queue', tq], {
    cwd: ROOT,
    env: { ...process.env, [MARK_VAR]: mark, SHARDCTL_CONFIG: configFile },
  });
}, 240_000);

afterAll(async () => {
  await killMarked(mark);
  fs.mkdirSync(path.join(ROOT, 'test-results'), { recursive: true });
  if (worker) fs.writeFileSync(path.join(ROOT, 'test-results', 'least-privilege-worker.log'), worker.output());
  await admin?.close();
  if (setUp) await tearDownFleet();
  await Promise.all(opened.splice(0).map((p) => p.end().catch(() => {})));
  if (configFile) fs.rmSync(path.dirname(configFile), { recursive: true, force: true });
  await t?.close();
}, 120_000);

/** Runs `sql` as `role` on `shard`'s database of this run; the SQLSTATE it failed with, or 'ok'. */
async function as(role: keyof typeof PASSWORD, shard: string, sql: string, params: unknown[] = []): Promise<string> {
  const p = pool(fleetConfig(role).shards.find((s) => s.name === shard)!.dsn);
  try {
    await p.query(sql, params);
    return 'ok';
  } catch (e: any) {
    return e.code ?? String(e.message);
  }
}

describe('a move under the documented least-privilege roles', () => {
  it(
    'plans, copies, catches up under live writes, switches, soaks and retires with no superuser, and the roles stay fenced',
    { timeout: 420_000 },
    async () => {
      // The worker starts as the worker role: it reads the directory's schema version, runs no DDL.
      await worker.waitFor('"msg":"worker polling"', 150_000);
      const workerConfig = fleetConfig('worker');
      const routerConfig = fleetConfig('router');
      const adminConfig = fleetConfig();
      // Operators' verbs (tenant create) connect as the worker role too.
      const ops = createConnections(workerConfig, { max: 2 });
      const router = await Router.create(routerConfig);
      const s3For = (s: string): S3Client => admin.s3For(s);
      const tenant = `${run}-mv`;
      const bystander = `${run}-by`;
      const logFile = path.join(ROOT, 'test-results', `${tenant}.jsonl`);
      fs.mkdirSync(path.dirname(logFile), { recursive: true });
      let moveDone = false;
      try {
        for (const x of [tenant, bystander]) {
          await createTenant(
            { directory: ops.directoryPool(), shardPool: ops.shardPool, config: workerConfig },
            { tenant: x, shard: 'shard-a', actor: 'test' },
          );
          await seedTenant({ router, s3For, config: routerConfig, tenant: x, rows: 300, blobs: 3 });
        }
        const baselines = await Promise.all(
          [tenant, bystander].map((x) => snapshotUnit({ config: adminConfig, tenant: x, directory: admin.directoryPool(), shardPool: admin.shardPool, s3For })),
        );
        const lg = startLoadgen({ config: routerConfig, router, s3For, tenants: [tenant, bystander], rate: 40, durationMs: 180_000, logFile, concurrency: 3 });
        try {
          await new Promise((r) => setTimeout(r, 1000));
          const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 3 }));
          const soak = await H.waitFor(
            h,
            (st) => {
              failOnRefusal(st);
              if (isTerminal(st.phase) && st.phase !== 'done') throw new Error(`move ended in ${st.phase}: ${st.lastError}`);
              return phaseReached(st.phase, 'soak');
            },
            240_000,
          );
          expect(soak.epoch).toBe(2);
          await new Promise((r) => setTimeout(r, 1000)); // writes land on the new owner during soak
          const done = await H.waitPhase(h, 'done', 120_000);
          moveDone = true;
          expect(done.phase).toBe('done');
          lg.stop();
          const stats = await lg.done;
          expect(stats.writes.ack).toBeGreaterThan(20);
          expect({ mismatches: stats.readMismatches, failedReads: stats.reads.failed, unknown: stats.writes.unknown }).toEqual({
            mismatches: 0,
            failedReads: 0,
            unknown: 0,
          });

          // Every acknowledged write and every seeded row and object is on the unit's owner.
          await expectLogVerified({ logFile, config: adminConfig, directory: admin.directoryPool(), shardPool: admin.shardPool, s3For, baselines });
          // Repeatable read and serializable writers read the fence FOR SHARE (as the fence's owner: the checks are SECURITY DEFINER).
          for (const isolation of ['repeatable read', 'serializable'] as const) {
            await router.withTenant(
              tenant,
              { tenants: [tenant] },
              'write',
              (tx) => tx.query(`insert into public.events(tenant_id, kind) values ($1, $2)`, [tenant, isolation]),
              {
                isolation,
              },
            );
            // A blob write's check (assert_writable) reads the fence FOR SHARE too, as the fence's owner.
            await router.withTenant(tenant, { tenants: [tenant] }, 'write', (_tx, route) => route.blobs.write(`iso/${isolation}`, isolation), {
              isolation,
            });
          }
          // The bystander on the source wrote throughout, and every one of its writes was acknowledged.
          const by = readLog(logFile).filter((r) => r.tenant === bystander);
          expect(by.length).toBeGreaterThan(0);
          expect(by.filter((r) => r.status !== 'ack')).toEqual([]);
          expect(await getPlacement(admin.directoryPool(), tenant)).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active', moveId: null });
          // Retired: nothing of the unit left on the source, no slot or publication of the move anywhere.
          const bucket = adminConfig.shards.find((s) => s.name === 'shard-a')!.bucket;
          expect(
            await unitLeftovers({ config: adminConfig, tenant, pool: admin.shardPool('shard-a'), s3: s3For('shard-a'), bucket, moveIds: [done.moveId] }),
          ).toEqual([]);
          for (const s of adminConfig.shards) {
            const like = replicationNamePattern(done.moveId);
            const slots = await admin.shardPool(s.name).query(`select slot_name from pg_replication_slots where slot_name like $1`, [like]);
            const pubs = await admin.shardPool(s.name).query(`select pubname from pg_publication where pubname like $1`, [like]);
            expect([...slots.rows, ...pubs.rows], s.name).toEqual([]);
          }
        } finally {
          lg.stop();
          await lg.done.catch(() => {});
        }
      } finally {
        await router.close();
        await ops.close();
        if (!moveDone)
          await t.client.workflow
            .getHandle(moveWorkflowId(tenant))
            .terminate('least-privilege test cleanup')
            .catch(() => {});
      }

      // The router role cannot get around the fence: a stale epoch is refused on both shards, and it
      // can neither switch the fence off (replica role, triggers), change the fence, nor drop tables.
      const write = (epoch: number) =>
        `do $$ begin call shardctl.open_unit_write('${tenant}', ${epoch}); insert into public.events(tenant_id, kind) values ('${tenant}', 'probe'); end $$`;
      expect(await as('router', 'shard-a', write(1))).toBe('SC421');
      expect(await as('router', 'shard-a', write(2))).toBe('SC421');
      expect(await as('router', 'shard-b', write(1))).toBe('SC421');
      expect(await as('router', 'shard-b', write(2))).toBe('ok');
      expect(await as('router', 'shard-a', `set session_replication_role = replica`)).toBe('42501');
      expect(await as('router', 'shard-a', `alter table public.events disable trigger all`)).toBe('42501');
      expect(await as('router', 'shard-a', `update shardctl.fence set owned = true, epoch = 2 where unit = $1`, [tenant])).toBe('42501');
      // Not even a column that means nothing: an update of a fence row takes the unit's lock
      // exclusively (the generation trigger), so a writer could hold any unit's writers and moves up.
      expect(await as('router', 'shard-a', `update shardctl.fence set updated_at = updated_at where unit = $1`, [tenant])).toBe('42501');
      expect(await as('router', 'shard-a', `drop table public.events`)).toBe('42501');
      expect(await as('router', 'shard-a', `select pg_create_logical_replication_slot('${run}_x', 'pgoutput')`)).toBe('42501');
      expect(await as('router', 'shard-a', `create publication ${run}_x for table public.events`)).toBe('42501');

      // Tenant tables the owner creates later are the writer's too (default privileges).
      expect(await as('owner', 'shard-a', `create table public.${run}_later (tenant_id text, id int, primary key (tenant_id, id))`)).toBe('ok');
      expect(await as('router', 'shard-a', `select count(*) from public.${run}_later`)).toBe('ok');
      // (Dropped again: an unfenced table, missing on the other shards, is one plan refuses to move.)
      expect(await as('owner', 'shard-a', `drop table public.${run}_later`)).toBe('ok');

      // A directory that lacks a migration: the worker role may not run it, and says who must.
      await serverAdmin(testConfig().directory.dsn).query(`create database ${NAMES.directoryDatabase}_new`);
      const fresh = openPool(dsnOf(testConfig().directory.dsn, `${NAMES.directoryDatabase}_new`, 'worker'), { max: 1 });
      try {
        await expect(ensureDirectory(fresh, workerConfig)).rejects.toThrow(
          /the placement directory needs migrations this role may not run \(permission denied for database .*\): run `shardctl directory migrate` as the directory's owner/,
        );
      } finally {
        await fresh.end();
      }

      // Neither role is a superuser or bypasses row security, on any server.
      for (const dsn of servers()) {
        const r = await serverAdmin(dsn).query(
          `select rolname, rolsuper, rolbypassrls, rolcreaterole, rolcreatedb from pg_roles where rolname = any($1) order by rolname`,
          [[NAMES.worker, NAMES.router]],
        );
        expect(r.rows).toEqual(
          [NAMES.router, NAMES.worker].sort().map((rolname) => ({ rolname, rolsuper: false, rolbypassrls: false, rolcreaterole: false, rolcreatedb: false })),
        );
      }
      // The worker's log names no password.
      expect(worker.output()).not.toContain(PASSWORD.worker);
    },
  );

  it('cancel while the cutover waits for approval undoes everything as the worker role', { timeout: 300_000 }, async () => {
    await worker.waitFor('"msg":"worker polling"', 150_000);
    const adminConfig = fleetConfig();
    const tenant = `${run}-cc`;
    await newFleetTenant(tenant, 200, 2);
    const before = await unitFingerprint('shard-a', tenant);
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { approveCutover: 'manual' }));
    const s = await H.waitFor(h, (x) => failOnRefusal(x) && x.awaitingApproval, 240_000);
    expect(s.phase).toBe('fence');
    await h.executeUpdate(M.cancelUpdate, { args: [{ actor: 'sre-test' }] });
    await H.waitPhase(h, 'cancelled', 120_000);
    // The source exactly as it was, nothing on the target, nothing of the move left.
    expect(await unitFingerprint('shard-a', tenant)).toEqual(before);
    expect((await unitFingerprint('shard-b', tenant)).reduce((n, x) => n + x.rows, 0)).toBe(0);
    const bucket = adminConfig.shards.find((x) => x.name === 'shard-b')!.bucket;
    expect(
      await unitLeftovers({ config: adminConfig, tenant, pool: admin.shardPool('shard-b'), s3: admin.s3For('shard-b'), bucket, moveIds: [s.moveId] }),
    ).toEqual([]);
    expect(await replicationOf(s.moveId)).toEqual([]);
    expect(await getPlacement(admin.directoryPool(), tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active', moveId: null });
  });

  it('rollback during soak switches back as the worker role, keeping writes made through the router role after the switch', { timeout: 300_000 }, async () => {
    await worker.waitFor('"msg":"worker polling"', 150_000);
    const tenant = `${run}-rb`;
    await newFleetTenant(tenant, 200, 2);
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 600 }));
    const s = await H.waitFor(h, (x) => failOnRefusal(x) && phaseReached(x.phase, 'soak'), 240_000);
    expect(s.phase).toBe('soak');
    const router = await Router.create(fleetConfig('router'));
    const ids: string[] = [];
    try {
      for (let i = 0; i < 10; i++) {
        const r = await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
          tx.query(`insert into public.events(tenant_id, kind, payload) values ($1, 'after-switch', $2) returning id`, [tenant, JSON.stringify({ i })]),
        );
        ids.push(r.rows[0].id);
      }
    } finally {
      await router.close();
    }
    await h.executeUpdate(M.rollbackUpdate, { args: [{ actor: 'sre-test' }] });
    const back = await H.waitFor(h, (x) => failOnRefusal(x) && x.phase === 'rolled-back', 120_000);
    expect(await getPlacement(admin.directoryPool(), tenant)).toMatchObject({ shard: 'shard-a', epoch: 3, state: 'active' });
    const got = await admin.shardPool('shard-a').query(`select id from public.events where tenant_id = $1 and kind = 'after-switch'`, [tenant]);
    expect(got.rows.map((r) => r.id).sort()).toEqual([...ids].sort());
    expect((await unitFingerprint('shard-b', tenant)).reduce((n, x) => n + x.rows, 0)).toBe(0);
    expect(await replicationOf(back.moveId)).toEqual([]);
  });
});

/** A tenant of this run's fleet on shard-a, created by the worker role (as the CLI would) and seeded through a router as the writer role. */
async function newFleetTenant(tenant: string, rows: number, blobs: number) {
  const ops = createConnections(fleetConfig('worker'), { max: 2 });
  const router = await Router.create(fleetConfig('router'));
  try {
    await createTenant(
      { directory: ops.directoryPool(), shardPool: ops.shardPool, config: fleetConfig('worker') },
      { tenant, shard: 'shard-a', actor: 'test' },
    );
    await seedTenant({ router, s3For: (x) => admin.s3For(x), config: fleetConfig('router'), tenant, rows, blobs });
  } finally {
    await router.close();
    await ops.close();
  }
}

async function unitFingerprint(shard: string, tenant: string) {
  const config = fleetConfig();
  const p = admin.shardPool(shard);
  return fingerprintUnit(p, await listTenantTables(p, config.tenant), config.tenant.column, tenant);
}

/** Slots and publications of the move left on any shard (invariant 5). */
async function replicationOf(moveId: string): Promise<string[]> {
  const out: string[] = [];
  for (const s of fleetConfig().shards) {
    const like = replicationNamePattern(moveId);
    const slots = await admin.shardPool(s.name).query(`select slot_name from pg_replication_slots where slot_name like $1`, [like]);
    const pubs = await admin.shardPool(s.name).query(`select pubname from pg_publication where pubname like $1`, [like]);
    out.push(...slots.rows.map((r) => `${s.name} slot ${r.slot_name}`), ...pubs.rows.map((r) => `${s.name} publication ${r.pubname}`));
  }
  return out;
}

/** A grant missing blocks a move with the database's refusal: fail now, naming it. */
function failOnRefusal(st: { blockedReason: string | null; phase: string; lastError?: string | null }): true {
  if (st.blockedReason && /permission denied|must be owner|must be superuser/.test(st.blockedReason)) throw new Error(`move blocked: ${st.blockedReason}`);
  if (st.phase === 'failed') throw new Error(`move failed: ${st.lastError}`);
  return true;
}
