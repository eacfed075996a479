// Issue 13's real-stack scenario, scaled down for CI: a fleet of the test's own (own directory,
// config file, worker) gets a fourth shard, shard-d, by `shards add`: a real PostgreSQL server of
// its own, started as `dev up --shards 4` starts its fourth shard (lib/dev/postgres.ts
// upPostgresServers: initdb, wal_level=logical, the shardctl database) on a free port in a temp
// folder, its tenant tables created first, with a bucket of its own; stopped and wiped at the
// end. shard-a starts over its
// headroom. Then, under live loadgen writes on every tenant: `rebalance plan --json > plan.json`,
// `rebalance apply --plan plan.json --concurrency 2 --wait`, `shards drain --shard shard-c --wait`.
// It ends with `loadgen verify` clean (every acknowledged write on its tenant's owner), every open
// shard within its headroom, and shard-c empty and closed. Scaled down: six tenants of 30 rows
// and an object each, one-second soaks.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CreateBucketCommand } from '@aws-sdk/client-s3';
import type { Pool } from 'pg';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { closePools, uniq } from '../helpers/stack';
import { configFile, runCli } from '../helpers/cli';
import { openPool } from '../../lib/connections';
import { DEMO_SCHEMA_SQL } from '../../lib/demo/schema';
import { loadConfig, type Config } from '../../lib/config';
import { s3ClientFor } from '../../lib/s3';
import { createTenant } from '../../lib/tenants';
import { seedTenant } from '../../lib/seed';
import { Router } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { startLoadgen } from '../../lib/loadgen';
import { startWorker } from '../../worker';
import { downPostgresServers, pgDsn, upPostgresServers, type PgStack } from '../../lib/dev/postgres';
import { findPgHome, removeRelocatedData } from '../../lib/dev/pg-home';
import { freePort } from '../helpers/ports';
import { listShards, getShard, setShardCapacity } from '../../lib/directory/shards';
import { getPlacement } from '../../lib/directory/placements';
import { usableCapacity } from '../../lib/directory/choose';
import type { RebalanceStatus } from '../../workflows/rebalance-messages';

const ENV = 'SCENARIO_SHARD_D_DSN';
let fleet: Fleet;
const cleanups: (() => Promise<void> | void)[] = [];

beforeAll(async () => {
  fleet = await ownFleet('scen', { worker: false });
}, 120_000);
afterAll(async () => {
  for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => {});
  await fleet?.close();
  await closePools();
});

describe('register shard-d, plan, apply under load, drain shard-c', () => {
  it('ends with loadgen verify clean, every shard within its headroom, shard-c empty and closed', { timeout: 400_000 }, async () => {
    // shard-d: a server of its own (stopped last: its cleanup runs after every pool's), and a bucket of its own.
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-scen-d-'));
    const dev = path.join(root, '.dev');
    fs.mkdirSync(dev);
    const server: PgStack = { root, dev, ports: { pg: { 'shard-d': await freePort() } }, servers: ['shard-d'] };
    cleanups.push(async () => {
      await downPostgresServers(server, (m) => process.stderr.write(`scenario: ${m}\n`));
      removeRelocatedData(findPgHome(dev));
      fs.rmSync(root, { recursive: true, force: true });
    });
    const startedAt = Date.now();
    await upPostgresServers(server, (m) => process.stderr.write(`scenario: ${m}\n`));
    process.stderr.write(`scenario: shard-d's server up in ${Date.now() - startedAt} ms\n`);
    const dsn = pgDsn(server, 'shard-d');
    const u = new URL(dsn);
    process.env[ENV] = dsn;
    cleanups.push(() => void delete process.env[ENV]);
    // The tenant tables, as an operator's schema migration would create them before the add.
    const d = openPool(u.toString(), { max: 1 });
    try {
      await d.query(DEMO_SCHEMA_SQL);
    } finally {
      await d.end();
    }
    const bucket = uniq('scen-d').toLowerCase();
    const s3 = s3ClientFor(fleet.config, 'shard-a');
    try {
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    } finally {
      s3.destroy();
    }

    // The CLI's runs go to this test's worker (started once shard-d is in the file).
    const tq = uniq('scen');
    const file = configFile({ ...fleet.config, temporal: { ...fleet.config.temporal, taskQueue: tq } });
    cleanups.push(() => file.remove());
    const cli = (args: string[]) => runCli(['--config', file.file, ...args], { env: { SHARDCTL_ACTOR: 'scenario', [ENV]: u.toString() }, timeoutMs: 300_000 });
    const add = await cli(['shards', 'add', 'shard-d', '--dsn-env', ENV, '--bucket', bucket, '--capacity-ops', '700', '--reason', 'scenario']);
    expect(add.code, add.stderr).toBe(0);
    const config: Config = loadConfig({ file: file.file });
    expect(config.shards.map((s) => s.name)).toEqual(['shard-a', 'shard-b', 'shard-c', 'shard-d']);
    // A server of its own: another cluster than every stack shard's.
    const systemId = async (url: string) => {
      const p = openPool(url, { max: 1 });
      try {
        return (await p.query('select system_identifier::text as id from pg_control_system()')).rows[0].id as string;
      } finally {
        await p.end();
      }
    };
    const others = await Promise.all(fleet.config.shards.map((x) => systemId(x.dsn)));
    expect(others).not.toContain(await systemId(dsn));
    const worker = await startWorker(config, { taskQueue: tq });
    cleanups.push(() => worker.shutdown());

    // Six tenants, shard-a heavy: four there, one on shard-b, one on shard-c; shard-d empty.
    const pools = new Map<string, Pool>();
    const poolOf = (s: string) => {
      if (!pools.has(s)) pools.set(s, openPool(config.shards.find((x) => x.name === s)!.dsn, { max: 2 }));
      return pools.get(s)!;
    };
    cleanups.push(async () => {
      for (const p of pools.values()) await p.end();
    });
    const router = await Router.create(config);
    const deps = createDeps(config);
    cleanups.push(async () => {
      await router.close();
      await deps.close();
    });
    const within = async () =>
      (await listShards(fleet.directory))
        .filter((s) => s.status === 'open')
        .map((s) => ({ shard: s.name, over: s.load + s.reserved > usableCapacity(s.capacity, config.limits.headroomFraction) }));
    const tenants: string[] = [];
    for (const [shard, n] of [
      ['shard-a', 4],
      ['shard-b', 1],
      ['shard-c', 1],
    ] as const) {
      for (let i = 0; i < n; i++) {
        const tenant = uniq('scen');
        await createTenant({ directory: fleet.directory, shardPool: poolOf, config }, { tenant, shard, expectedLoad: 200, actor: 'test' });
        await seedTenant({ router, s3For: (s) => deps.s3For(s), config, tenant, rows: 30, blobs: 1 });
        tenants.push(tenant);
      }
    }

    // Capacity 700 each (usable 630 with the default 10 % headroom): shard-a's 800 is over it.
    for (const s of ['shard-a', 'shard-b', 'shard-c']) await setShardCapacity(fleet.directory, s, 700, { actor: 'test' });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'scen-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    const logFile = path.join(dir, 'loadgen.jsonl');
    const lg = startLoadgen({ config, router, s3For: (s) => deps.s3For(s), tenants, rate: 20, durationMs: 300_000, logFile, concurrency: 2 });
    cleanups.push(async () => {
      lg.stop();
      await lg.done.catch(() => {});
    });
    await new Promise((r) => setTimeout(r, 1000));

    expect(await within(), 'shard-a over its headroom before').toContainEqual({ shard: 'shard-a', over: true });

    // Plan, saved; applied with two moves at once.
    const planned = await cli(['rebalance', 'plan', '--json']);
    expect(planned.code, planned.stderr).toBe(0);
    const planFile = path.join(dir, 'plan.json');
    fs.writeFileSync(planFile, planned.stdout);
    const moves = JSON.parse(planned.stdout).moves as { unit: string; from: string; to: string }[];
    expect(moves.length, planned.stdout).toBeGreaterThanOrEqual(2);
    expect(
      moves.some((m) => m.to === 'shard-d'),
      'the plan uses the new shard',
    ).toBe(true);
    const applied = await cli([
      'rebalance',
      'apply',
      '--plan',
      planFile,
      '--concurrency',
      '2',
      '--per-shard',
      '2',
      '--soak',
      '1s',
      '--yes',
      '--wait',
      '--json',
    ]);
    expect(applied.code, applied.stdout + applied.stderr).toBe(0);
    const st = JSON.parse(applied.stdout).status as RebalanceStatus;
    expect(st).toMatchObject({ phase: 'done', plans: 1, maxConcurrent: 2 });
    expect(st.moves.map((m) => [m.unit, m.to, m.state])).toEqual(moves.map((m) => [m.unit, m.to, 'done']));
    for (const m of moves) expect(await getPlacement(fleet.directory, m.unit)).toMatchObject({ shard: m.to, epoch: 2, state: 'active' });
    for (const s of await within()) expect(s.over, `${s.shard} over its headroom after the apply`).toBe(false);

    // Drain shard-c: its units move off and it ends closed.
    const onC = [];
    for (const t of tenants) if ((await getPlacement(fleet.directory, t))!.shard === 'shard-c') onC.push(t);
    expect(onC.length, 'something left on shard-c to drain').toBeGreaterThan(0);
    const drained = await cli(['shards', 'drain', '--shard', 'shard-c', '--soak', '1s', '--yes', '--wait', '--json']);
    expect(drained.code, drained.stdout + drained.stderr).toBe(0);
    const ds = JSON.parse(drained.stdout.trim().split('\n').at(-1)!).status as RebalanceStatus;
    expect(ds).toMatchObject({ phase: 'done', drain: { shard: 'shard-c', closed: true, reasons: [] } });
    expect(await getShard(fleet.directory, 'shard-c')).toMatchObject({ status: 'closed', units: 0, load: 0 });
    for (const t of onC) expect((await getPlacement(fleet.directory, t))!.shard).not.toBe('shard-c');
    for (const s of await within()) expect(s.over, `${s.shard} over its headroom after the drain`).toBe(false);

    lg.stop();
    const stats = await lg.done;
    expect(stats.writes.ack).toBeGreaterThan(20);
    expect({ mismatches: stats.readMismatches, unknown: stats.writes.unknown }).toEqual({ mismatches: 0, unknown: 0 });
    const verify = await cli(['loadgen', 'verify', '--log', logFile, '--json']);
    expect(verify.code, verify.stdout + verify.stderr).toBe(0);
    expect(JSON.parse(verify.stdout)).toMatchObject({ ok: true });
    console.log(
      `scenario: ${moves.length} planned move(s) applied, ${ds.moves.length} drained; loadgen ${stats.writes.ack} acked, ${stats.writes.refused ?? 0} refused, ${stats.reads.ok} reads ok`,
    );
  });
});
