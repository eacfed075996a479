// `shardctl shards add NAME --dsn-env VAR --bucket B` (issue 13) on a fleet of the test's own
// (its own directory database and config file, test/helpers/fleet.ts). The new shard is a real
// database of its own on one of the stack's servers, with a bucket of its own. Proven here:
//   - each bad request is refused with its reason and changes nothing (config bytes, directory
//     inventory, audit log): an unset variable, a bad class, a name in use, a DSN that reaches a
//     database the fleet already has under another name, another shard's bucket, a missing
//     bucket, an unreachable server;
//   - an accepted add records the variable's name, never the DSN, in the config; registers the
//     shard in the directory with its class, region and capacities, audited; prepares it;
//   - a worker started on that file before the add learns the shard from it (no restart) and moves a tenant onto it, and the tenant's rows
//     are all there (and a write after the switch) and retired on the source;
//   - a dedicated-class shard takes no shared unit: `tenant create --shard` and `move plan` refuse.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import { CreateBucketCommand } from '@aws-sdk/client-s3';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli, jsonError, configFile } from '../helpers/cli';
import { closePools, shardPool, testConfig, uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import { openPool } from '../../lib/connections';
import { loadConfig, type Config } from '../../lib/config';
import { s3ClientFor } from '../../lib/s3';
import { createTenant } from '../../lib/tenants';
import { Router } from '../../lib/router';
import { startWorker } from '../../worker';

let fleet: Fleet;
let file: { file: string; remove: () => void };
let schema: string;
let newDb: string;
let newDsn: string;
let bucket: string;
let dedicatedDb: string;
const dropDbs: [string, string][] = [];
const ENV = 'SADD_TEST_DSN';

const cli = (args: string[], env: Record<string, string | undefined> = {}) =>
  runCli(args, { env: { SHARDCTL_CONFIG: file.file, SHARDCTL_ACTOR: 'add-test', ...env } });
const inventory = async () => (await fleet.directory.query('select * from shardctl.shards order by name')).rows;
const addAudits = async () => (await fleet.directory.query(`select actor, detail, reason from shardctl.audit where action = 'shard.add' order by id`)).rows;

/** A database of its own on `server`'s Postgres (same server, another database), with the test schema's table. */
async function makeDatabase(server: Config['shards'][number], prefix: string): Promise<string> {
  const name = uniq(prefix).replace(/-/g, '_');
  const admin = openPool(server.dsn, { max: 1 });
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  dropDbs.push([server.dsn, name]);
  const u = new URL(server.dsn);
  u.pathname = `/${name}`;
  const p = openPool(u.toString(), { max: 1 });
  try {
    await p.query(`create schema ${schema}; create table ${schema}.items(tenant_id text not null, id bigint not null, v text, primary key (tenant_id, id))`);
  } finally {
    await p.end();
  }
  return u.toString();
}

beforeAll(async () => {
  fleet = await ownFleet('sadd', { worker: false });
  schema = uniq('sadd').replace(/-/g, '_');
  // The fleet's tenant tables are this test's own schema: no other suite's table is in its moves.
  const config: Config = { ...fleet.config, tenant: { ...fleet.config.tenant, schemas: [schema] } };
  file = configFile(config);
  const a = openPool(config.shards.find((s) => s.name === 'shard-a')!.dsn, { max: 1 });
  try {
    await a.query(`create schema ${schema}; create table ${schema}.items(tenant_id text not null, id bigint not null, v text, primary key (tenant_id, id))`);
  } finally {
    await a.end();
  }
  expect((await cli(['shards', 'prepare', '--shard', 'shard-a'])).code).toBe(0);
  const server = config.shards.find((s) => s.name === 'shard-c')!;
  newDsn = await makeDatabase(server, 'sadd_new');
  newDb = new URL(newDsn).pathname.slice(1);
  dedicatedDb = await makeDatabase(server, 'sadd_ded');
  bucket = uniq('sadd-b').toLowerCase();
  const s3 = s3ClientFor(config, 'shard-a');
  try {
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await s3.send(new CreateBucketCommand({ Bucket: `${bucket}-d` }));
  } finally {
    s3.destroy();
  }
}, 180_000);

afterAll(async () => {
  await fleet?.close();
  file?.remove();
  for (const [dsn, name] of dropDbs) {
    const p = openPool(dsn, { max: 1 });
    await p.query(`drop database if exists ${name} with (force)`).catch(() => {});
    await p.end();
  }
  await closePools();
});

describe('shards add', () => {
  it('refuses each bad request with its reason, changing nothing', { timeout: 120_000 }, async () => {
    const before = { bytes: fs.readFileSync(file.file, 'utf8'), shards: await inventory(), audits: await addAudits() };
    const shardB = fleet.config.shards.find((s) => s.name === 'shard-b')!;
    const cases: { args: string[]; env?: Record<string, string>; code: number; message: RegExp }[] = [
      { args: ['shard-x', '--dsn-env', ENV, '--bucket', bucket], code: 2, message: new RegExp(`environment variable ${ENV} is not set`) },
      {
        args: ['shard-x', '--dsn-env', ENV, '--bucket', bucket, '--class', 'huge'],
        env: { [ENV]: newDsn },
        code: 2,
        message: /--class must be one of shared, dedicated/,
      },
      {
        args: ['shard-x', '--dsn-env', ENV, '--bucket', bucket, '--capacity-ops', '-3'],
        env: { [ENV]: newDsn },
        code: 2,
        message: /--capacity-ops wants a positive whole number/,
      },
      { args: ['shard-a', '--dsn-env', ENV, '--bucket', bucket], env: { [ENV]: newDsn }, code: 4, message: /shard shard-a is in the config already/ },
      // Another name for shard-b's own database: a move between the two would retire its own target.
      { args: ['shard-x', '--dsn-env', ENV, '--bucket', bucket], env: { [ENV]: shardB.dsn }, code: 4, message: /which is shard shard-b already/ },
      {
        args: ['shard-x', '--dsn-env', ENV, '--bucket', bucket],
        env: { [ENV]: fleet.config.directory.dsn },
        code: 4,
        message: /which is the directory already/,
      },
      { args: ['shard-x', '--dsn-env', ENV, '--bucket', shardB.bucket], env: { [ENV]: newDsn }, code: 4, message: /share one bucket/ },
      { args: ['shard-x', '--dsn-env', ENV, '--bucket', `${bucket}-nope`], env: { [ENV]: newDsn }, code: 4, message: /does not exist: create it first/ },
      {
        args: ['shard-x', '--dsn-env', ENV, '--bucket', bucket],
        env: { [ENV]: 'postgres://shardctl@127.0.0.1:1/x' },
        code: 5,
        message: /cannot reach shard-x/,
      },
    ];
    for (const c of cases) {
      const r = await cli(['shards', 'add', ...c.args, '--json'], c.env);
      expect(r.code, `${c.args.join(' ')}: ${r.stderr}`).toBe(c.code);
      expect(jsonError(r).message).toMatch(c.message);
    }
    expect(fs.readFileSync(file.file, 'utf8')).toBe(before.bytes);
    expect(await inventory()).toEqual(before.shards);
    expect(await addAudits()).toEqual(before.audits);
  });

  it(
    'adds a shard by the name of its DSN variable, registers and prepares it, and a move lands there on a worker started before the add',
    { timeout: 240_000 },
    async () => {
      // A worker already running on that config file, with the variable in its environment: it
      // learns the added shard from the file (lib/config-reload.ts), no restart.
      const config = loadConfig({ file: file.file });
      expect(config.shards.map((s) => s.name)).not.toContain('shard-x');
      const tq = uniq('sadd');
      const worker = await startWorker(config, { taskQueue: tq, configFile: file.file, configEnv: { ...process.env, [ENV]: newDsn } });
      try {
        await addAndMove(config, tq);
      } finally {
        await worker.shutdown();
      }
    },
  );

  async function addAndMove(config: Config, tq: string) {
    const r = await cli(
      [
        'shards',
        'add',
        'shard-x',
        '--dsn-env',
        ENV,
        '--bucket',
        bucket,
        '--region',
        'eu-test-1',
        '--capacity-ops',
        '500',
        '--capacity-bytes',
        '1000000000',
        '--reason',
        'growth',
        '--json',
      ],
      { [ENV]: newDsn },
    );
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out).toMatchObject({
      name: 'shard-x',
      dsnEnv: ENV,
      bucket,
      class: 'shared',
      region: 'eu-test-1',
      capacity: 500,
      capacityBytes: 1e9,
      tenantTables: [`${schema}.items`, 'shardctl.blob_index'], // the blob index is created and fenced by prepare
    });
    expect(out.server.database).toBe(newDb);

    // The config names the variable, never the DSN (nor its password).
    const text = fs.readFileSync(file.file, 'utf8');
    expect(JSON.parse(text).shards.at(-1)).toEqual({ name: 'shard-x', dsnEnv: ENV, bucket });
    expect(text).not.toContain(newDb);
    // Without the variable, the config says which one is missing.
    const unset = await cli(['shards', 'list', '--json']);
    expect(unset.code).toBe(2);
    expect(jsonError(unset).message).toContain(`environment variable ${ENV} is not set`);

    const row = (await inventory()).find((s) => s.name === 'shard-x');
    expect(row).toMatchObject({ status: 'open', class: 'shared', region: 'eu-test-1', capacity: '500', capacity_bytes: '1000000000' });
    expect(await addAudits()).toEqual([{ actor: 'add-test', detail: expect.objectContaining({ shard: 'shard-x', dsnEnv: ENV, bucket }), reason: 'growth' }]);
    const list = await cli(['shards', 'list', '--json'], { [ENV]: newDsn });
    expect(list.code, list.stderr).toBe(0);
    expect(JSON.parse(list.stdout).find((s: { name: string }) => s.name === 'shard-x')).toMatchObject({
      status: 'open',
      units: 0,
      reachable: true,
      schemaInstalled: true,
      fencedTables: 2, // items and the blob index
      fence: testConfig().fence.library ? 'native' : 'plpgsql', // as the config prepared it
      tenantTables: 2,
      region: 'eu-test-1',
      tenantBytes: expect.any(Number),
      writesPerSecond: 0,
      slotRetainedBytes: expect.any(Number), // the server's slots: other suites' moves off shard-c count too
    });
    const again = await cli(['shards', 'add', 'shard-x', '--dsn-env', ENV, '--bucket', `${bucket}-d`, '--json'], { [ENV]: dedicatedDb });
    expect(again.code).toBe(4);
    expect(jsonError(again).message).toContain('shard shard-x is in the config already');

    // The running worker has learned shard-x from the file (polled each second).
    const deadline = Date.now() + 15_000;
    while (!config.shards.some((s) => s.name === 'shard-x') && Date.now() < deadline) await new Promise((res) => setTimeout(res, 200));
    expect(config.shards.find((s) => s.name === 'shard-x')).toMatchObject({ name: 'shard-x', bucket, dsn: newDsn });
    // It moves a tenant from shard-a onto shard-x (the router and the tenant use the same config object).
    const router = await Router.create(config);
    try {
      const tenant = uniq('sx');
      await createTenant({ directory: fleet.directory, shardPool, config }, { tenant, shard: 'shard-a', actor: 'test' });
      const write = (id: number) =>
        router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) => tx.query(`insert into ${schema}.items values ($1, $2, $3)`, [tenant, id, `v${id}`]));
      for (let i = 1; i <= 50; i++) await write(i);
      const h = await H.startMove(fleet.t.client, tq, H.moveInput(tenant, 'shard-x', { soakSeconds: 1 }));
      expect(await h.result()).toMatchObject({ phase: 'done', source: 'shard-a', target: 'shard-x', validation: { ok: true } });
      await write(51); // after the switch, the router finds shard-x
      const x = openPool(newDsn, { max: 1 });
      try {
        const got = await x.query(`select count(*)::int as n, max(id)::int as top from ${schema}.items where tenant_id = $1`, [tenant]);
        expect(got.rows[0]).toEqual({ n: 51, top: 51 });
      } finally {
        await x.end();
      }
      // shards list measures the shard's tenant tables: bytes now, rows from the statistics.
      const listed = JSON.parse((await cli(['shards', 'list', '--rate-window', '0', '--json'], { [ENV]: newDsn })).stdout);
      const sx = listed.find((s: { name: string }) => s.name === 'shard-x');
      expect(sx.tenantBytes).toBeGreaterThan(0);
      expect(sx.writesPerSecond).toBeNull();
      const src = await shardPool('shard-a').query(`select count(*)::int as n from ${schema}.items where tenant_id = $1`, [tenant]);
      expect(src.rows[0].n).toBe(0); // retired after the soak
      expect((await fleet.directory.query('select shard, epoch from shardctl.units where unit = $1', [tenant])).rows[0]).toEqual({
        shard: 'shard-x',
        epoch: '2',
      });
    } finally {
      await router.close();
    }
  }

  it('a dedicated-class shard takes no shared unit', { timeout: 120_000 }, async () => {
    const env = { [ENV]: newDsn, SADD_DED_DSN: dedicatedDb };
    const r = await cli(['shards', 'add', 'shard-y', '--dsn-env', 'SADD_DED_DSN', '--bucket', `${bucket}-d`, '--class', 'dedicated', '--json'], env);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ name: 'shard-y', class: 'dedicated' });
    const created = await cli(['tenant', 'create', uniq('sy'), '--shard', 'shard-y', '--json'], env);
    expect(created.code).toBe(4);
    expect(jsonError(created).message).toMatch(/shard-y is a dedicated-class shard, kept for an isolated tenant/);
    const tenant = uniq('sy');
    expect((await cli(['tenant', 'create', tenant, '--shard', 'shard-a'], env)).code).toBe(0);
    const plan = await cli(['move', 'plan', '--tenant', tenant, '--to', 'shard-y', '--json'], env);
    expect(plan.code).toBe(4);
    expect(plan.stdout + plan.stderr).toMatch(/shard-y is a dedicated-class shard/);
  });
});
