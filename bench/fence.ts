// The fence's cost on the write path (issue 11), on one shard no move touches, in a schema of its
// own: the same writes into a table carrying the fence (installed by the real prepareShard) and
// into a plain one of the same shape. A fenced transaction opens as the router opens it
// (begin_unit_write); a plain one sets the same unit and epoch, so the ratio is the check's cost
// alone. Writers send one simple-query batch per transaction (one round trip), with
// synchronous_commit off: a commit flush would hide the check's CPU cost in noise.
// And the router: a transaction through Router.withTenant into the fenced table against a direct
// BEGIN; INSERT; <0.5 ms of work>; COMMIT into the plain one, one client, warm cache.
// Every figure here runs many short paired rounds (bench/measure.ts interleavePaired) and is judged
// on the median of its per-round ratios: one long round each side let a neighbour's burst decide it.
import { Client, Pool } from 'pg';
import type { Config } from '../lib/config';
import { prepareShard } from '../lib/shard/prepare';
import { setUnitFence } from '../lib/shard/fence';
import { ensureDirectory } from '../lib/directory/ensure';
import { createTenant, getTenant } from '../lib/tenants';
import { Router } from '../lib/router';
import { ensureDatabase } from '../lib/connections';
import { timed } from './measure';
import { openTransactionSql } from '../lib/router/open-tx';

export const FENCE_SCHEMA = 'shardctl_bench_fence';

export interface WriteScenario {
  name: string;
  writers: number;
  rowsPerStatement: number;
  /** Rows each writer writes per run (one side of one round: a fraction of a second here). */
  rowsPerWriter: number;
  /** Paired rounds (each side once per round). */
  rounds: number;
}

/** The scenarios; `rounds` overrides every scenario's own count of paired rounds. */
export function fenceScenarios(scale: number, rounds?: number): WriteScenario[] {
  return [
    { name: '1-row tx, 8 writers', writers: 8, rowsPerStatement: 1, rowsPerWriter: Math.round(300 * scale), rounds: rounds ?? 15 },
    { name: '100-row statements, 8 writers', writers: 8, rowsPerStatement: 100, rowsPerWriter: Math.round(100 * scale) * 100, rounds: rounds ?? 11 },
    { name: '200k-row statement', writers: 1, rowsPerStatement: 200_000, rowsPerWriter: 200_000, rounds: rounds ?? 7 },
  ];
}

/** Router transactions per side per round, and the router figure's paired rounds. */
export const ROUTER_TRANSACTIONS = 250;
export const ROUTER_ROUNDS = 15;

export interface FenceContext {
  pool: Pool;
  dsn: string;
  shard: string;
  config: Config;
  /** One tenant per writer, owned at epoch 1 on this shard. */
  tenants: string[];
  clients: Client[];
}

export async function setupFenceBench(pool: Pool, dsn: string, shard: string, config: Config, writers: number): Promise<FenceContext> {
  await pool.query(`drop schema if exists ${FENCE_SCHEMA} cascade; create schema ${FENCE_SCHEMA}`);
  for (const t of ['fenced', 'plain']) {
    await pool.query(`create table ${FENCE_SCHEMA}.${t} (tenant_id text not null, id bigint not null, payload text not null, primary key (tenant_id, id))`);
  }
  // The real prepare path, limited to the one table that should carry the fence.
  await prepareShard(pool, { ...config, tenant: { ...config.tenant, schemas: [FENCE_SCHEMA], tables: [`${FENCE_SCHEMA}.fenced`] } });
  const tenants = Array.from({ length: writers }, (_, i) => `bench-fence-${i}`);
  for (const unit of tenants) await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: false });
  const clients = await Promise.all(
    tenants.map(async () => {
      const c = new Client({ connectionString: dsn, application_name: 'bench-writer' });
      await c.connect();
      await c.query('set synchronous_commit = off');
      return c;
    }),
  );
  return { pool, dsn, shard, config, tenants, clients };
}

/** The database beside the shard's own where the plpgsql fence is measured in the same run as the native one. */
export const PLPGSQL_FENCE_DATABASE = 'shardctl_bench_plpgsql_fence';

/**
 * The same bench set-up with the plpgsql fence, in a database of its own on the same server (the
 * two fences cannot both be one database's), for the run that measures the native fence: its
 * figures print beside the native ones, each against its own plain table.
 */
export async function setupPlpgsqlFenceBench(serverDsn: string, shard: string, config: Config, writers: number): Promise<FenceContext> {
  const dsn = await ensureDatabase(serverDsn, PLPGSQL_FENCE_DATABASE);
  const pool = new Pool({ connectionString: dsn, max: 2, application_name: 'shardctl-bench' });
  return setupFenceBench(pool, dsn, shard, { ...config, fence: {} }, writers);
}

/** One run of a scenario into `table`: rows per second over all writers. */
export async function writeRun(ctx: FenceContext, sc: WriteScenario, table: 'fenced' | 'plain'): Promise<number> {
  await ctx.pool.query(`truncate ${FENCE_SCHEMA}.${table}`);
  const writers = ctx.clients.slice(0, sc.writers);
  const { seconds } = await timed(() => Promise.all(writers.map((c, w) => runWriter(c, `${FENCE_SCHEMA}.${table}`, ctx.tenants[w], w, sc))));
  return (sc.rowsPerWriter * writers.length) / seconds;
}

/** The fenced side opens as the router opens (lib/router/open-tx.ts); the plain one sets the same unit and epoch. */
function open(table: string, tenant: string): string {
  if (table.endsWith('.fenced')) return openTransactionSql({ unit: tenant, epoch: 1 }, 'write', undefined);
  return `begin; select set_config('shardctl.unit', '${tenant}', true), set_config('shardctl.epoch', '1', true)`;
}

async function runWriter(c: Client, table: string, tenant: string, writer: number, sc: WriteScenario): Promise<void> {
  const base = writer * 10_000_000;
  for (let i = 0; i < sc.rowsPerWriter; i += sc.rowsPerStatement) {
    const from = base + i;
    const to = from + sc.rowsPerStatement - 1;
    await c.query(
      `${open(table, tenant)};
       insert into ${table} (tenant_id, id, payload) select '${tenant}', g, 'payload' from generate_series(${from}, ${to}) g;
       commit;`,
    );
  }
}

export interface RouterContext {
  router: Router;
  direct: Client;
  tenant: string;
  /** The tenant's epoch (the direct side opens at it as the router does) and the router's default deadline. */
  epoch: number;
  deadlineMs: number;
  transactions: number;
}

/** A tenant placed on the fence shard in the directory (its first fence written by createTenant). */
export async function setupRouterBench(fence: FenceContext, directory: Pool, transactions: number): Promise<RouterContext> {
  const { config, pool } = fence;
  await ensureDirectory(directory, config);
  // One fixed unit, created once and reused by every run: the directory has no delete verb (a
  // unit is never removed by accident), so a fresh name per run would leave one behind each time.
  const tenant = 'bench-router';
  const placed =
    (await getTenant(directory, tenant)) ?? (await createTenant({ directory, shardPool: () => pool, config }, { tenant, shard: fence.shard, actor: 'bench' }));
  if (placed.shard !== fence.shard)
    throw new Error(`${tenant} is placed on ${placed.shard}, not on ${fence.shard}: the router bench writes through it on ${fence.shard}`);
  const router = await Router.create(config, { poolMax: 2 });
  const direct = new Client({ connectionString: fence.dsn, application_name: 'bench-direct' });
  await direct.connect();
  return { router, direct, tenant, epoch: placed.epoch, deadlineMs: config.limits.routerDeadlineMs, transactions };
}

// The same work on both sides: one INSERT, then 0.5 ms of server time (and commit without a flush).
const WORK_SQL = `select set_config('synchronous_commit', 'off', true), pg_sleep(0.0005)`;
/** One id sequence for every side: the router and the direct side opened as the router both write the fenced table. */
let nextId = 0;

/** Milliseconds per transaction through the router into the fenced table. */
export async function routerRun(ctx: RouterContext): Promise<number> {
  const { seconds } = await timed(async () => {
    for (let i = 0; i < ctx.transactions; i++) {
      const id = ++nextId;
      await ctx.router.withTenant(ctx.tenant, { tenants: [ctx.tenant] }, 'write', async (tx) => {
        await tx.query(`insert into ${FENCE_SCHEMA}.fenced (tenant_id, id, payload) values ($1, $2, 'payload')`, [ctx.tenant, id]);
        await tx.query(WORK_SQL);
      });
    }
  });
  return (seconds * 1000) / ctx.transactions;
}

/**
 * Milliseconds per transaction on a direct connection: into the plain table after a bare BEGIN, or
 * (`as-router`) into the fenced table after the router's own opening batch, with the statement
 * timeout a fresh call would carry: the same statements the router sends, without the router.
 */
export async function directRun(ctx: RouterContext, open: 'begin' | 'as-router' = 'begin'): Promise<number> {
  const table = open === 'begin' ? 'plain' : 'fenced';
  const { seconds } = await timed(async () => {
    for (let i = 0; i < ctx.transactions; i++) {
      await ctx.direct.query(open === 'begin' ? 'begin' : openTransactionSql({ unit: ctx.tenant, epoch: ctx.epoch }, 'write', undefined, ctx.deadlineMs));
      await ctx.direct.query(`insert into ${FENCE_SCHEMA}.${table} (tenant_id, id, payload) values ($1, $2, 'payload')`, [ctx.tenant, ++nextId]);
      await ctx.direct.query(WORK_SQL);
      await ctx.direct.query('commit');
    }
  });
  return (seconds * 1000) / ctx.transactions;
}

export async function teardownFence(fence: FenceContext | undefined, router?: RouterContext): Promise<void> {
  if (router) {
    await router.router.close();
    await router.direct.end();
  }
  if (!fence) return;
  await Promise.all(fence.clients.map((c) => c.end().catch(() => {})));
  await fence.pool.query(`drop schema if exists ${FENCE_SCHEMA} cascade`);
  // The writers' units only: bench-router stays placed, so its first fence stays with it.
  await fence.pool.query(`delete from shardctl.fence where unit like 'bench-fence-%'`);
}
