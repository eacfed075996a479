// Micro-benchmark (not a test) of the fence's cost, every ratio against a baseline measured in the
// same run, the two sides interleaved round by round so both see the same machine load:
//  1. insert throughput of N concurrent writers into a fenced table (what `shards prepare`
//     installs) and into a plain one. A fenced transaction opens as the router opens it
//     (`begin; select shardctl.begin_unit_write(unit, epoch)`, one round trip); a plain one sets
//     the same unit and epoch with set_config, so the ratio is the check's cost alone. One
//     scenario writes as a writer outside the router (set_config only: the statement trigger
//     checks its first statement). Besides wall-clock throughput it prints the ratio of the
//     writers' backend CPU time (/proc/<pid>/schedstat, when the server runs on this machine),
//     which the other users of a shared machine disturb far less.
//  2. a router write transaction against the same transaction on a direct connection (BEGIN,
//     the work, COMMIT: three round trips), warm cache, the router's pools sized to the writers.
// Uses a throw-away schema and tenants on one shard and removes them at the end (the router's
// tenants stay in the directory, tagged bench-).
//
//   npx tsx bench/fence-overhead.ts [--shard shard-c] [--writers 8] [--rows 3000] [--rounds 3] [--only <text>]
import { Client, Pool } from 'pg';
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { openPool } from '../lib/connections';
import { loadConfig, shardByName } from '../lib/config';
import { prepareShard } from '../lib/shard/prepare';
import { setUnitFence } from '../lib/shard/fence';
import { ensureDirectory } from '../lib/directory/ensure';
import { createTenant } from '../lib/tenants';
import { Router } from '../lib/router';

type Open = 'router' | 'set_config';
interface Scenario {
  name: string;
  rowsPerStatement: number;
  sharedTenant: boolean;
  isolation: 'read committed' | 'repeatable read';
  syncCommit: boolean;
  /** How the fenced side opens its transactions (the plain side always uses set_config). */
  open?: Open;
  rowsFactor?: number;
  /** Three round trips per transaction, as the router sends them (BEGIN batch, a parameterized INSERT, COMMIT). */
  asRouterSends?: boolean;
}

const SCENARIOS: Scenario[] = [
  {
    name: '1 row/tx, own tenant, RC, sync commit on',
    rowsPerStatement: 1,
    sharedTenant: false,
    isolation: 'read committed',
    syncCommit: true,
    rowsFactor: 1 / 3,
  },
  { name: '1 row/tx, own tenant, RC', rowsPerStatement: 1, sharedTenant: false, isolation: 'read committed', syncCommit: false },
  { name: '1 row/tx, one shared tenant, RC', rowsPerStatement: 1, sharedTenant: true, isolation: 'read committed', syncCommit: false },
  { name: '1 row/tx, own tenant, RR', rowsPerStatement: 1, sharedTenant: false, isolation: 'repeatable read', syncCommit: false },
  { name: '1 row/tx, one shared tenant, RR', rowsPerStatement: 1, sharedTenant: true, isolation: 'repeatable read', syncCommit: false },
  {
    name: '1 row/tx, own tenant, RC, 3 round trips',
    rowsPerStatement: 1,
    sharedTenant: false,
    isolation: 'read committed',
    syncCommit: false,
    asRouterSends: true,
    rowsFactor: 1 / 2,
  },
  {
    name: '1 row/tx, own tenant, RC, outside the router',
    rowsPerStatement: 1,
    sharedTenant: false,
    isolation: 'read committed',
    syncCommit: false,
    open: 'set_config',
  },
  { name: '100 rows/statement, own tenant, RC', rowsPerStatement: 100, sharedTenant: false, isolation: 'read committed', syncCommit: false, rowsFactor: 5 },
  {
    name: '200k rows/statement, own tenant, RC',
    rowsPerStatement: 200_000,
    sharedTenant: false,
    isolation: 'read committed',
    syncCommit: false,
    rowsFactor: 0,
  },
];

function arg(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
}

/** Nanoseconds the backends have run on a CPU, or undefined when their /proc is not readable. */
function backendCpuNs(pids: number[]): number | undefined {
  try {
    return pids.reduce((sum, pid) => sum + Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]), 0);
  } catch {
    return undefined;
  }
}

const ratio = (a: number | undefined, b: number | undefined) => (a && b ? (a / b).toFixed(3) : 'n/a');

async function main() {
  const config = loadConfig();
  const shard = shardByName(config, arg('shard', 'shard-c'));
  const writers = Number(arg('writers', '8'));
  const rows = Number(arg('rows', '3000'));
  const rounds = Number(arg('rounds', '3'));
  const only = arg('only', '');
  const tag = randomBytes(4).toString('hex');
  const schema = `bench_fence_${tag}`;
  const pool = openPool(shard.dsn, { max: 2 });
  const tenants = Array.from({ length: writers }, (_, i) => `bench-${tag}-${i}`);

  await pool.query(`create schema ${schema}`);
  try {
    for (const t of ['fenced', 'plain']) {
      await pool.query(`create table ${schema}.${t} (tenant_id text not null, id bigint not null, payload text not null, primary key (tenant_id, id))`);
    }
    // The real prepare path, limited to the one table that should carry the fence.
    const benchConfig = { ...config, tenant: { ...config.tenant, schemas: [schema], tables: [`${schema}.fenced`] } };
    await prepareShard(pool, benchConfig);
    for (const unit of tenants) await setUnitFence(pool, { unit, epoch: 1, owned: true, frozen: false });

    // An older shard (before the per-transaction check) has no begin_unit_write: its fence is per row.
    const perTx = (await pool.query(`select to_regprocedure('shardctl.begin_unit_write(text,bigint)') is not null as ok`)).rows[0].ok;
    const clients = await Promise.all(tenants.map(() => connect(shard.dsn)));
    const pids = await Promise.all(clients.map(async (c) => Number((await c.query('select pg_backend_pid() as p')).rows[0].p)));
    console.log(`shard ${shard.name}, ${writers} writers, ${rounds} interleaved rounds per side (best round shown)\n`);
    console.log(`${'scenario'.padEnd(46)} ${'plain rows/s'.padStart(13)} ${'fenced rows/s'.padStart(14)}  fenced/plain  CPU plain/fenced`);
    for (const sc of SCENARIOS.filter((s) => !only || s.name.includes(only))) {
      const perWriter =
        sc.rowsFactor === 0
          ? sc.rowsPerStatement
          : Math.max(sc.rowsPerStatement, Math.round((rows * (sc.rowsFactor ?? 1)) / sc.rowsPerStatement) * sc.rowsPerStatement);
      const best: Record<string, number> = { plain: 0, fenced: 0 };
      const cpu: Record<string, number | undefined> = {};
      for (let r = 0; r < rounds; r++) {
        for (const table of r % 2 === 0 ? ['plain', 'fenced'] : ['fenced', 'plain']) {
          await pool.query(`truncate ${schema}.${table}`);
          const open: Open = table === 'plain' || !perTx ? 'set_config' : (sc.open ?? 'router');
          const c0 = backendCpuNs(pids);
          const t0 = process.hrtime.bigint();
          await Promise.all(clients.map((c, w) => runWriter(c, `${schema}.${table}`, sc.sharedTenant ? tenants[0] : tenants[w], w, perWriter, sc, open)));
          const secs = Number(process.hrtime.bigint() - t0) / 1e9;
          const c1 = backendCpuNs(pids);
          best[table] = Math.max(best[table], (perWriter * writers) / secs);
          if (c0 !== undefined && c1 !== undefined) cpu[table] = Math.min(cpu[table] ?? Infinity, c1 - c0);
        }
      }
      console.log(
        `${sc.name.padEnd(46)} ${best.plain.toFixed(0).padStart(13)} ${best.fenced.toFixed(0).padStart(14)}  ${(best.fenced / best.plain).toFixed(3).padStart(12)}  ${ratio(cpu.plain, cpu.fenced).padStart(16)}`,
      );
    }
    await Promise.all(clients.map((c) => c.end()));
    if (!only || 'router'.includes(only)) await routerVsDirect(config, shard.name, shard.dsn, schema, writers, rounds, tag);
  } finally {
    await pool.query(`drop schema ${schema} cascade`);
    await pool.query(`delete from shardctl.fence where unit = any($1)`, [tenants]);
    await pool.end();
  }
}

async function connect(dsn: string): Promise<Client> {
  const c = new Client({ connectionString: dsn });
  await c.connect();
  return c;
}

/** One round trip per transaction (a simple-query batch), so the client adds little noise. */
async function runWriter(c: Client, table: string, tenant: string, writer: number, total: number, sc: Scenario, open: Open) {
  await c.query(`set synchronous_commit = ${sc.syncCommit ? 'on' : 'off'}`);
  const opening =
    open === 'router'
      ? `select shardctl.begin_unit_write('${tenant}', 1)`
      : `select set_config('shardctl.unit', '${tenant}', true), set_config('shardctl.epoch', '1', true)`;
  const base = writer * 10_000_000;
  if (sc.asRouterSends) {
    for (let i = 0; i < total; i++) {
      await c.query(`begin isolation level ${sc.isolation}; ${opening}`);
      await c.query(`insert into ${table} (tenant_id, id, payload) values ($1, $2, 'payload')`, [tenant, base + i]);
      await c.query('commit');
    }
    return;
  }
  for (let i = 0; i < total; i += sc.rowsPerStatement) {
    const from = base + i;
    const to = from + sc.rowsPerStatement - 1;
    await c.query(
      `begin isolation level ${sc.isolation}; ${opening};
       insert into ${table} (tenant_id, id, payload) select '${tenant}', g, 'payload' from generate_series(${from}, ${to}) g;
       commit;`,
    );
  }
}

/**
 * Router transaction vs. the same transaction on a direct connection (BEGIN; work; COMMIT, three
 * round trips), `writers` callers at once, each doing `perCaller` transactions. The work: a 0.5 ms
 * sleep (latency only), then a 100-row insert into the plain table (CPU). Both sides use the
 * plain table so that only the router's own cost (its first-statement check, pool, proxy) differs.
 */
async function routerVsDirect(
  config: ReturnType<typeof loadConfig>,
  shardName: string,
  dsn: string,
  schema: string,
  writers: number,
  rounds: number,
  tag: string,
) {
  const shardPool = openPool(dsn, { max: 2 });
  const deps = { directory: openPool(config.directory.dsn, { max: 2 }), shardPool: () => shardPool, config };
  await ensureDirectory(deps.directory, config);
  const tenants = Array.from({ length: writers }, (_, i) => `bench-${tag}-r${i}`);
  for (const tenant of tenants) await createTenant(deps, { tenant, shard: shardName, actor: 'bench' });
  const router = await Router.create(config, { poolMax: writers, listen: false });
  const direct = new Pool({ connectionString: dsn, max: writers });
  const works: Array<{ name: string; sql: (tenant: string, n: number) => string; perCaller: number }> = [
    { name: '0.5 ms sleep', sql: () => 'select pg_sleep(0.0005)', perCaller: 300 },
    {
      name: '100-row insert',
      sql: (tenant, n) => `insert into ${schema}.plain select '${tenant}', g, 'payload' from generate_series(${n * 100}, ${n * 100 + 99}) g`,
      perCaller: 150,
    },
  ];
  try {
    // Warm: pools filled, plans cached, the router's snapshot loaded.
    await Promise.all(tenants.map((t) => router.withTenant(t, { tenants: [t] }, 'write', async (tx) => tx.query('select 1'))));
    await Promise.all(tenants.map(async () => (await direct.query('select 1')).rowCount));
    console.log(`\n${'router vs. direct connection'.padEnd(46)} ${'direct tx/s'.padStart(13)} ${'router tx/s'.padStart(14)}  router/direct time`);
    let n = 0;
    // One caller: the latency of a transaction. All callers: throughput (on a small machine, CPU).
    for (const callers of [1, writers]) {
      for (const w of works) {
        const best: Record<string, number> = { router: 0, direct: 0 };
        for (let r = 0; r < rounds; r++) {
          for (const side of r % 2 === 0 ? ['direct', 'router'] : ['router', 'direct']) {
            await direct.query(`truncate ${schema}.plain`);
            const t0 = process.hrtime.bigint();
            await Promise.all(
              tenants.slice(0, callers).map(async (tenant) => {
                for (let i = 0; i < w.perCaller; i++) {
                  const sql = w.sql(tenant, n++);
                  if (side === 'router') {
                    await router.withTenant(tenant, { tenants: [tenant] }, 'write', async (tx) => tx.query(sql));
                  } else {
                    const c = await direct.connect();
                    try {
                      await c.query('begin');
                      await c.query(sql);
                      await c.query('commit');
                    } finally {
                      c.release();
                    }
                  }
                }
              }),
            );
            const secs = Number(process.hrtime.bigint() - t0) / 1e9;
            best[side] = Math.max(best[side], (w.perCaller * callers) / secs);
          }
        }
        const name = `${w.name}, ${callers} caller${callers === 1 ? '' : 's'}`;
        console.log(
          `${name.padEnd(46)} ${best.direct.toFixed(0).padStart(13)} ${best.router.toFixed(0).padStart(14)}  ${(best.direct / best.router).toFixed(3).padStart(18)}`,
        );
      }
    }
  } finally {
    await router.close();
    await direct.end();
    await shardPool.end();
    await deps.directory.end();
  }
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
