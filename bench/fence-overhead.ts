// Micro-benchmark (not a test): insert throughput into a table with and without the fence
// trigger, N concurrent writers in the same run, plain and fenced rounds interleaved so both see
// the same machine load. Every transaction sets unit and epoch in both cases, so the ratio is
// the trigger's cost alone. Uses a throw-away schema on one shard and removes it at the end.
//
//   npx tsx bench/fence-overhead.ts [--shard shard-c] [--writers 8] [--rows 3000] [--rounds 2]
import { Client } from 'pg';
import { openPool } from '../lib/connections';
import { randomBytes } from 'node:crypto';
import { loadConfig, shardByName } from '../lib/config';
import { prepareShard } from '../lib/shard/prepare';
import { setUnitFence } from '../lib/shard/fence';

interface Scenario {
  name: string;
  rowsPerStatement: number;
  sharedTenant: boolean;
  isolation: 'read committed' | 'repeatable read';
  syncCommit: boolean;
  rowsFactor?: number;
}

const SCENARIOS: Scenario[] = [
  {
    name: '1 row/tx, own tenant each, RC, sync commit on',
    rowsPerStatement: 1,
    sharedTenant: false,
    isolation: 'read committed',
    syncCommit: true,
    rowsFactor: 1 / 3,
  },
  { name: '1 row/tx, own tenant each, RC', rowsPerStatement: 1, sharedTenant: false, isolation: 'read committed', syncCommit: false },
  { name: '1 row/tx, one shared tenant, RC', rowsPerStatement: 1, sharedTenant: true, isolation: 'read committed', syncCommit: false },
  { name: '1 row/tx, own tenant each, RR', rowsPerStatement: 1, sharedTenant: false, isolation: 'repeatable read', syncCommit: false },
  { name: '1 row/tx, one shared tenant, RR', rowsPerStatement: 1, sharedTenant: true, isolation: 'repeatable read', syncCommit: false },
  {
    name: '100 rows/statement, own tenant each, RC',
    rowsPerStatement: 100,
    sharedTenant: false,
    isolation: 'read committed',
    syncCommit: false,
    rowsFactor: 5,
  },
];

function arg(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
}

async function main() {
  const config = loadConfig();
  const shard = shardByName(config, arg('shard', 'shard-c'));
  const writers = Number(arg('writers', '8'));
  const rows = Number(arg('rows', '3000'));
  const rounds = Number(arg('rounds', '2'));
  const only = process.argv.includes('--only') ? arg('only', '') : '';
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

    const clients = await Promise.all(
      tenants.map(async () => {
        const c = new Client({ connectionString: shard.dsn });
        await c.connect();
        return c;
      }),
    );
    console.log(`shard ${shard.name}, ${writers} writers, ${rounds} interleaved rounds per table (best round shown)\n`);
    console.log(`${'scenario'.padEnd(44)} ${'plain rows/s'.padStart(13)} ${'fenced rows/s'.padStart(14)}  fenced/plain`);
    for (const sc of SCENARIOS.filter((s) => !only || s.name.includes(only))) {
      const perWriter = Math.max(sc.rowsPerStatement, Math.round((rows * (sc.rowsFactor ?? 1)) / sc.rowsPerStatement) * sc.rowsPerStatement);
      const best: Record<string, number> = { plain: 0, fenced: 0 };
      for (let r = 0; r < rounds; r++) {
        for (const table of r % 2 === 0 ? ['plain', 'fenced'] : ['fenced', 'plain']) {
          await pool.query(`truncate ${schema}.${table}`);
          const t0 = process.hrtime.bigint();
          await Promise.all(clients.map((c, w) => runWriter(c, `${schema}.${table}`, sc.sharedTenant ? tenants[0] : tenants[w], w, perWriter, sc)));
          const secs = Number(process.hrtime.bigint() - t0) / 1e9;
          best[table] = Math.max(best[table], (perWriter * writers) / secs);
        }
      }
      console.log(
        `${sc.name.padEnd(44)} ${best.plain.toFixed(0).padStart(13)} ${best.fenced.toFixed(0).padStart(14)}  ${(best.fenced / best.plain).toFixed(3)}`,
      );
    }
    await Promise.all(clients.map((c) => c.end()));
  } finally {
    await pool.query(`drop schema ${schema} cascade`);
    await pool.query('delete from shardctl.fence where unit = any($1)', [tenants]);
    await pool.end();
  }
}

/** One round trip per transaction (a simple-query batch), so the client adds little noise. */
async function runWriter(c: Client, table: string, tenant: string, writer: number, total: number, sc: Scenario) {
  await c.query(`set synchronous_commit = ${sc.syncCommit ? 'on' : 'off'}`);
  const base = writer * 10_000_000;
  for (let i = 0; i < total; i += sc.rowsPerStatement) {
    const from = base + i;
    const to = from + sc.rowsPerStatement - 1;
    await c.query(
      `begin isolation level ${sc.isolation};
       select set_config('shardctl.unit', '${tenant}', true), set_config('shardctl.epoch', '1', true);
       insert into ${table} (tenant_id, id, payload) select '${tenant}', g, 'payload' from generate_series(${from}, ${to}) g;
       commit;`,
    );
  }
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
