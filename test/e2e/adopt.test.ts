// `shards adopt NAME` (issue 13, onboarding) on the real stack: a database created here (on
// shard-a's server, a bucket of its own), holding a few tenant tables whose rows N tenants wrote
// without shardctl, named `legacy` in a config of this test's own (its own directory database,
// tenant tables in a schema of its own). Proven, in order:
//   - a table without the tenant column, or with a key that lacks it, refuses the adoption with its
//     reason, and nothing changes (no placement, no audit row, the database not even prepared);
//   - so do tenant column values that are not tenant ids, a shard that is not open, and a tenant
//     found there that the directory already places on another shard;
//   - `--dry-run` lists every tenant it would place and changes nothing;
//   - adopt places every tenant found, in one directory generation, audited, each with its fence
//     (epoch 1, owned) on legacy; a re-run changes nothing; the directory's compare-and-set refuses
//     the whole generation when one of its tenants is placed elsewhere by then;
//   - the real move workflow moves one tenant off legacy onto shard-b: its rows there are the ones
//     written, row for row, legacy keeps none after retire, the router writes it on shard-b;
//   - after that, a stray row of a tenant placed elsewhere refuses a re-run, which changes nothing;
//   - a second database onboarded by `shards add` then `shards adopt` (docs/production.md).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { CreateBucketCommand } from '@aws-sdk/client-s3';
import type { Pool } from 'pg';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli, jsonError, configFile } from '../helpers/cli';
import { closePools, shardPool, uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import { openPool } from '../../lib/connections';
import type { Config } from '../../lib/config';
import { s3ClientFor } from '../../lib/s3';
import { createTenant } from '../../lib/tenants';
import { prepareAllShards } from '../../lib/shard/prepare';
import { getPlacement, getGeneration, insertAdoptedPlacements } from '../../lib/directory/placements';
import { moveInputFor, startMove } from '../../lib/moves/start';
import { Router } from '../../lib/router';
import { startWorker } from '../../worker';

const N = 6;
let fleet: Fleet;
let config: Config;
let file: { file: string; remove: () => void };
let schema: string;
let legacyDsn: string;
let legacyDb: string;
let legacy: Pool;
let worker: Awaited<ReturnType<typeof startWorker>> | undefined;
let tq: string;
const tenants: string[] = [];
const extraDbs: string[] = [];
let conflicting: string;

const cli = (args: string[]) => runCli(args, { env: { SHARDCTL_CONFIG: file.file, SHARDCTL_ACTOR: 'adopt-test' } });
const tablesSql = (s: string) => `create schema ${s};
  create table ${s}.accounts(tenant_id text not null, id bigint not null, name text not null, primary key (tenant_id, id));
  create table ${s}.orders(tenant_id text not null, id bigint not null, account_id bigint not null, amount numeric(12, 2), note text,
    primary key (tenant_id, id), foreign key (tenant_id, account_id) references ${s}.accounts(tenant_id, id));
  create table ${s}.events(tenant_id text not null, seq bigserial, payload jsonb, primary key (tenant_id, seq));`;

/** What legacy's application wrote for a tenant: plain SQL, no shardctl anywhere. */
async function writeLegacyRows(pool: Pool, tenant: string, k: number) {
  await pool.query(`insert into ${schema}.accounts select $1, i, 'acct ' || i from generate_series(1, $2::int) i`, [tenant, 3 + k]);
  await pool.query(
    `insert into ${schema}.orders select $1, i, 1 + i % $2::int, i * 1.5, case when i % 2 = 0 then 'n' || i end from generate_series(1, $3::int) i`,
    [tenant, 3 + k, 10 + k],
  );
  await pool.query(`insert into ${schema}.events(tenant_id, payload) select $1, jsonb_build_object('i', i, 't', $1::text) from generate_series(1, $2::int) i`, [
    tenant,
    5 + k,
  ]);
}

/** Every row of a tenant in the three tables, as text, in key order. */
async function rowsOf(pool: Pool, tenant: string): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  for (const t of ['accounts', 'orders', 'events']) {
    const r = await pool.query(`select x::text as row from ${schema}.${t} x where tenant_id = $1 order by 1`, [tenant]);
    out[t] = r.rows.map((x) => x.row);
  }
  return out;
}

const directoryState = async () => ({
  generation: await getGeneration(fleet.directory),
  audit: Number((await fleet.directory.query('select count(*) from shardctl.audit')).rows[0].count),
  units: Number((await fleet.directory.query(`select count(*) from shardctl.units where shard = 'legacy'`)).rows[0].count),
});
const prepared = async () => (await legacy.query(`select to_regclass('shardctl.fence') is not null as p`)).rows[0].p as boolean;

beforeAll(async () => {
  fleet = await ownFleet('adopt', { worker: false });
  schema = uniq('adopt').replace(/-/g, '_');
  const server = fleet.config.shards.find((s) => s.name === 'shard-a')!;
  legacyDb = uniq('adopt_legacy').replace(/-/g, '_');
  const admin = openPool(server.dsn, { max: 1 });
  try {
    await admin.query(`create database ${legacyDb}`);
  } finally {
    await admin.end();
  }
  const u = new URL(server.dsn);
  u.pathname = `/${legacyDb}`;
  legacyDsn = u.toString();
  const bucket = uniq('adopt-b').toLowerCase();
  const s3 = s3ClientFor(fleet.config, 'shard-a');
  try {
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  } finally {
    s3.destroy();
  }
  config = {
    ...fleet.config,
    shards: [...fleet.config.shards, { name: 'legacy', dsn: legacyDsn, bucket }],
    tenant: { ...fleet.config.tenant, schemas: [schema] },
  };
  file = configFile(config);
  legacy = openPool(legacyDsn, { max: 4 });
  await legacy.query(tablesSql(schema));
  for (let k = 0; k < N; k++) {
    const t = `acme-${k}-${uniq('x').slice(-6)}`;
    tenants.push(t);
    await writeLegacyRows(legacy, t, k);
  }
  tenants.sort();
  // The target: the same tables on shard-b, fenced under this config.
  await shardPool('shard-b').query(tablesSql(schema));
  const prep = await prepareAllShards(config, shardPool, { shard: 'shard-b' });
  expect(prep.filter((r) => r.error)).toEqual([]);
  // The fleet's directory learns the config's shards (legacy among them), as `directory migrate` does.
  const m = await cli(['directory', 'migrate']);
  expect(m.code, m.stderr).toBe(0);
  tq = uniq('adopt');
  worker = await startWorker(config, { taskQueue: tq });
}, 180_000);

afterAll(async () => {
  await worker?.shutdown();
  await legacy?.end();
  await fleet?.close();
  file?.remove();
  await shardPool('shard-b')
    .query(`drop schema if exists ${schema} cascade`)
    .catch(() => {});
  const server = openPool(fleet.config.shards.find((s) => s.name === 'shard-a')!.dsn, { max: 1 });
  for (const db of [legacyDb, ...extraDbs]) await server.query(`drop database if exists ${db} with (force)`).catch(() => {});
  await server.end();
  await closePools();
});

describe('shards adopt', () => {
  it('refuses a table without the tenant column and one whose key lacks it, naming each, and changes nothing', { timeout: 60_000 }, async () => {
    await legacy.query(`create table ${schema}.settings(k text primary key, v text); create table ${schema}.notes(id bigint primary key, tenant_id text)`);
    const before = await directoryState();
    const r = await cli(['shards', 'adopt', 'legacy', '--json']);
    expect(r.code, r.stderr).toBe(4);
    const e = jsonError(r);
    expect(e.code).toBe('PreconditionFailed');
    expect(e.message).toMatch(new RegExp(`"${schema}"."settings" has no tenant_id column: its rows belong to no tenant`));
    expect(e.message).toMatch(new RegExp(`"${schema}"."notes" primary key \\(id\\) does not include tenant_id`));
    expect(await directoryState()).toEqual(before);
    expect(await prepared(), 'legacy not even prepared').toBe(false);
    await legacy.query(`drop table ${schema}.settings, ${schema}.notes`);
  });

  it('refuses tenant column values that are not tenant ids, and a shard that is not open, and changes nothing', { timeout: 60_000 }, async () => {
    await legacy.query(`insert into ${schema}.accounts values ('Not An Id', 1, 'x')`);
    const st = await cli(['shards', 'set-status', 'legacy', 'draining']);
    expect(st.code, st.stderr).toBe(0);
    const before = await directoryState();
    const r = await cli(['shards', 'adopt', 'legacy', '--json']);
    expect(r.code, r.stderr).toBe(4);
    const m = jsonError(r).message;
    expect(m).toContain('1 tenant_id value(s) are not valid tenant ids');
    expect(m).toContain('"Not An Id"');
    expect(m).toContain('shard legacy is draining: adopt places tenants on an open shard only');
    expect(await directoryState()).toEqual(before);
    expect(await prepared()).toBe(false);
    await legacy.query(`delete from ${schema}.accounts where tenant_id = 'Not An Id'`);
    expect((await cli(['shards', 'set-status', 'legacy', 'open'])).code).toBe(0);
  });

  it('refuses a tenant found there that the directory places on another shard, naming it, and changes nothing', { timeout: 60_000 }, async () => {
    conflicting = uniq('taken');
    await createTenant({ directory: fleet.directory, shardPool, config }, { tenant: conflicting, shard: 'shard-b', actor: 'test' });
    await legacy.query(`insert into ${schema}.accounts values ($1, 1, 'copy')`, [conflicting]);
    const before = await directoryState();
    const r = await cli(['shards', 'adopt', 'legacy', '--json']);
    expect(r.code, r.stderr).toBe(4);
    expect(jsonError(r).message).toContain(`already placed on another shard: ${conflicting} (on shard-b, epoch 1)`);
    expect(await directoryState()).toEqual(before);
    expect(await prepared()).toBe(false);
    // The dry run says the same, as a plan.
    const d = await cli(['shards', 'adopt', 'legacy', '--dry-run', '--json']);
    expect(d.code).toBe(4);
    expect(JSON.parse(d.stdout)).toMatchObject({ ok: false, dryRun: true });
    await legacy.query(`delete from ${schema}.accounts where tenant_id = $1`, [conflicting]);
  });

  it('--dry-run lists every tenant it would place and changes nothing', { timeout: 60_000 }, async () => {
    const before = await directoryState();
    const r = await cli(['shards', 'adopt', 'legacy', '--dry-run', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const plan = JSON.parse(r.stdout);
    expect(plan).toMatchObject({ shard: 'legacy', ok: true, dryRun: true, reasons: [], place: tenants, present: [], created: [], generation: null });
    expect(plan.tables).toEqual([`${schema}.accounts`, `${schema}.events`, `${schema}.orders`]);
    const text = await cli(['shards', 'adopt', 'legacy', '--dry-run']);
    expect(text.stdout).toContain(`would place ${N} (epoch 1, active, expected load 1 each)`);
    for (const t of tenants) expect(text.stdout).toContain(`  place ${t} -> legacy`);
    expect(await directoryState()).toEqual(before);
    expect(await prepared()).toBe(false);
  });

  it(
    'places every tenant found on legacy in one directory generation, audited, each fenced at epoch 1; a re-run changes nothing',
    { timeout: 60_000 },
    async () => {
      const before = await directoryState();
      const r = await cli(['shards', 'adopt', 'legacy', '--reason', 'onboarding', '--json']);
      expect(r.code, r.stderr).toBe(0);
      const res = JSON.parse(r.stdout);
      expect(res).toMatchObject({ ok: true, dryRun: false, created: tenants, present: [], generation: before.generation + 1, fencesInstalled: N });
      for (const t of tenants) expect(await getPlacement(fleet.directory, t)).toMatchObject({ kind: 'tenant', shard: 'legacy', epoch: 1, state: 'active' });
      const audit = await fleet.directory.query(
        `select action, unit, actor, reason, (detail->>'generation')::bigint as g from shardctl.audit where action in ('tenant.adopt', 'shard.adopt') order by id`,
      );
      expect(audit.rows.filter((a) => a.action === 'tenant.adopt').map((a) => a.unit)).toEqual(tenants);
      expect(audit.rows.filter((a) => a.action === 'shard.adopt')).toHaveLength(1);
      expect(new Set(audit.rows.map((a) => `${a.actor} ${a.reason} ${a.g}`))).toEqual(new Set([`adopt-test onboarding ${before.generation + 1}`]));
      const fences = await legacy.query(`select unit, epoch, owned, frozen from shardctl.fence order by unit`);
      expect(fences.rows).toEqual(tenants.map((unit) => ({ unit, epoch: '1', owned: true, frozen: false })));
      // The fence is on: legacy's old way of writing (no epoch) is refused now.
      await expect(legacy.query(`insert into ${schema}.events(tenant_id, payload) values ($1, '{}')`, [tenants[0]])).rejects.toMatchObject({ code: 'SC428' });

      const after = await directoryState();
      const again = await cli(['shards', 'adopt', 'legacy', '--json']);
      expect(again.code, again.stderr).toBe(0);
      expect(JSON.parse(again.stdout)).toMatchObject({ ok: true, created: [], present: tenants, place: [], generation: null, fencesInstalled: 0 });
      expect(await directoryState()).toEqual(after);
      // The directory's own step, given tenants it already places there, records nothing either.
      expect(await insertAdoptedPlacements(fleet.directory, 'legacy', tenants, 1, { actor: 'test' })).toEqual({
        ok: true,
        created: [],
        present: tenants,
        generation: null,
      });
      expect(await directoryState()).toEqual(after);
      const text = await cli(['shards', 'adopt', 'legacy']);
      expect(text.stdout).toContain('nothing to do: every tenant found is already placed here');
    },
  );

  it("the directory's compare-and-set refuses the whole generation when one tenant is placed on another shard by then", { timeout: 30_000 }, async () => {
    // What a tenant created elsewhere between adopt's plan and its directory transaction meets.
    const taken = uniq('taken');
    await createTenant({ directory: fleet.directory, shardPool, config }, { tenant: taken, shard: 'shard-b', actor: 'test' });
    const before = await directoryState();
    const fresh = uniq('fresh');
    const r = await insertAdoptedPlacements(fleet.directory, 'legacy', [fresh, taken, tenants[0]], 1, { actor: 'test' });
    expect(r).toMatchObject({ ok: false, elsewhere: [{ unit: taken, shard: 'shard-b' }] });
    expect(await getPlacement(fleet.directory, fresh)).toBeUndefined();
    expect(await directoryState()).toEqual(before);
  });

  it('the real move workflow moves an adopted tenant off legacy onto shard-b, row for row; the router then writes it there', { timeout: 240_000 }, async () => {
    const tenant = tenants[1];
    const written = await rowsOf(legacy, tenant);
    expect(written.orders.length).toBe(11);
    const others = Object.fromEntries(await Promise.all(tenants.filter((t) => t !== tenant).map(async (t) => [t, await rowsOf(legacy, t)] as const)));
    const t = await H.temporal();
    try {
      const h = await startMove(t.client, tq, moveInputFor(config, { tenant, target: 'shard-b', requestedBy: 'test', soakSeconds: 1 }));
      const st = await H.waitFor(
        h,
        (s) => {
          if (s.phase === 'failed' || s.phase === 'cancelled') throw new Error(`move ended ${s.phase}: ${s.lastError}`);
          return s.phase === 'done';
        },
        200_000,
      );
      expect(st.phase).toBe('done');
    } finally {
      await t.close();
    }
    expect(await getPlacement(fleet.directory, tenant)).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active' });
    expect(await rowsOf(shardPool('shard-b'), tenant)).toEqual(written);
    expect(await rowsOf(legacy, tenant), 'retired on legacy').toEqual({ accounts: [], orders: [], events: [] });
    for (const [o, rows] of Object.entries(others)) expect(await rowsOf(legacy, o), `${o} untouched`).toEqual(rows);
    const router = await Router.create(config);
    try {
      const shard = await router.withTenant(tenant, { tenants: [tenant] }, 'write', async (tx, route) => {
        await tx.query(`insert into ${schema}.events(tenant_id, payload) values ($1, '{"after": true}')`, [tenant]);
        return route.shard;
      });
      expect(shard).toBe('shard-b');
    } finally {
      await router.close();
    }
    // Adopt again: the moved tenant is shard-b's now, the others are present; nothing to record.
    const before = await directoryState();
    const again = await cli(['shards', 'adopt', 'legacy', '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ created: [], present: tenants.filter((x) => x !== tenant) });
    expect(await directoryState()).toEqual(before);
  });

  it('after adoption, a stray row of a tenant placed elsewhere refuses a re-run, which changes nothing', { timeout: 60_000 }, async () => {
    // Written past the fence, as a foreign tool would (replica role): a row of shard-b's tenant.
    const c = await legacy.connect();
    try {
      await c.query(`set session_replication_role = replica`);
      await c.query(`insert into ${schema}.accounts values ($1, 7, 'stray')`, [conflicting]);
    } finally {
      await c.query('reset session_replication_role').catch(() => {});
      c.release();
    }
    const before = await directoryState();
    const fences = (await legacy.query('select * from shardctl.fence order by unit')).rows;
    const r = await cli(['shards', 'adopt', 'legacy', '--json']);
    expect(r.code, r.stderr).toBe(4);
    expect(jsonError(r).message).toContain(`${conflicting} (on shard-b, epoch 1)`);
    expect(await directoryState()).toEqual(before);
    expect((await legacy.query('select * from shardctl.fence order by unit')).rows).toEqual(fences);
  });

  it('onboards a second database by `shards add` then `shards adopt`, as docs/production.md says', { timeout: 120_000 }, async () => {
    const server = fleet.config.shards.find((x) => x.name === 'shard-a')!;
    const db = uniq('adopt_two').replace(/-/g, '_');
    const admin = openPool(server.dsn, { max: 1 });
    try {
      await admin.query(`create database ${db}`);
    } finally {
      await admin.end();
    }
    extraDbs.push(db);
    const u = new URL(server.dsn);
    u.pathname = `/${db}`;
    const two = openPool(u.toString(), { max: 1 });
    const mine = [`two-a-${uniq('x').slice(-6)}`, `two-b-${uniq('x').slice(-6)}`].sort();
    try {
      await two.query(tablesSql(schema));
      for (const [k, t] of mine.entries()) await writeLegacyRows(two, t, k);
    } finally {
      await two.end();
    }
    const bucket = uniq('adopt-two').toLowerCase();
    const s3 = s3ClientFor(fleet.config, 'shard-a');
    try {
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    } finally {
      s3.destroy();
    }
    const env = { SHARDCTL_CONFIG: file.file, SHARDCTL_ACTOR: 'adopt-test', ADOPT_TWO_DSN: u.toString() };
    const add = await runCli(['shards', 'add', 'legacy-two', '--dsn-env', 'ADOPT_TWO_DSN', '--bucket', bucket], { env });
    expect(add.code, add.stderr).toBe(0);
    const r = await runCli(['shards', 'adopt', 'legacy-two', '--json'], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ ok: true, created: mine, present: [] });
    for (const t of mine) expect(await getPlacement(fleet.directory, t)).toMatchObject({ shard: 'legacy-two', epoch: 1, state: 'active' });
  });
});
