// What a split column costs the fence (docs/architecture.md, "Splitting a tenant"), on one shard
// in a schema of its own: the same writes (1-row transactions; one 20,000-row statement) into
//   fenced  a tenant table with the ordinary fence, by an unsplit tenant (the baseline);
//   unsplit a table whose fence reads a split column, by an unsplit tenant;
//   sub-unit the same table, by a sub-unit of a tenant split 4 ways (a row's unit hashed per row).
// Every transaction opens as the router opens it (open_unit_write), in one simple-query batch,
// synchronous_commit off. Paired rounds (bench/measure.ts interleavePaired), judged on the median
// of per-round ratios to the baseline. Run: `npx tsx bench/split-fence.ts [--rounds 9]`.
import { Client } from 'pg';
import { loadConfig, shardByName, type Config } from '../lib/config';
import { openPool } from '../lib/connections';
import { prepareShard } from '../lib/shard/prepare';
import { ensureDirectory } from '../lib/directory/ensure';
import { createTenant } from '../lib/tenants';
import { splitTenant } from '../lib/tenant-split';
import { tenantUnitForRow } from '../lib/buckets/route';
import { interleavePaired, log, timed } from './measure';

const SCHEMA = 'shardctl_bench_split';
const SHARD = 'shard-c';
const WAYS = 4;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const rounds = Number(process.argv[process.argv.indexOf('--rounds') + 1]) || 9;
  const base = loadConfig();
  const dsn = shardByName(base, SHARD).dsn;
  const pool = openPool(dsn, { max: 2 });
  const directory = openPool(base.directory.dsn, { max: 2 });
  const tables = [`${SCHEMA}.fenced`, `${SCHEMA}.split`];
  const config: Config = { ...base, tenant: { ...base.tenant, schemas: [SCHEMA], tables, splitColumns: { [`${SCHEMA}.split`]: 'k' } } };
  // The split checks every table of its config: give it the split table alone.
  const splitConfig: Config = { ...config, tenant: { ...config.tenant, tables: [`${SCHEMA}.split`] } };
  await pool.query(`drop schema if exists ${SCHEMA} cascade; create schema ${SCHEMA}`);
  for (const t of ['fenced', 'split'])
    await pool.query(`create table ${SCHEMA}.${t} (tenant_id text not null, k text not null, payload text not null, primary key (tenant_id, k))`);
  await prepareShard(pool, config);
  await ensureDirectory(directory, config, { actor: 'bench' });
  const stamp = Date.now().toString(36);
  const plain = `bench-split-plain-${stamp}`;
  const hot = `bench-split-hot-${stamp}`;
  const deps = { directory, shardPool: () => pool, config: splitConfig };
  const p = await createTenant(deps, { tenant: plain, shard: SHARD, actor: 'bench' });
  await createTenant(deps, { tenant: hot, shard: SHARD, actor: 'bench' });
  const split = await splitTenant(deps, { tenant: hot, ways: WAYS, actor: 'bench' });
  const splits = new Map([[hot, WAYS]]);
  // Keys of sub-unit hot:1, so one transaction can write many of them.
  const subKeys: string[] = [];
  for (let i = 0; subKeys.length < 20_000; i++) if (tenantUnitForRow(hot, `k${i}`, splits) === `${hot}:1`) subKeys.push(`k${i}`);
  const plainKeys = subKeys;

  const c = new Client({ connectionString: dsn });
  await c.connect();
  await c.query('set synchronous_commit = off');
  const lit = (s: string) => `'${s.replace(/'/g, "''")}'`;
  let run = 0;
  const side = (table: string, unit: string, epoch: number, tenant: string, keys: string[]) => ({
    oneRow: async () => {
      const r = run++;
      return (
        await timed(async () => {
          for (let i = 0; i < 300; i++) {
            await c.query(
              `begin; call shardctl.open_unit_write(${lit(unit)}, ${epoch}); insert into ${SCHEMA}.${table} values (${lit(tenant)}, ${lit(`${keys[i]}`)}, 'p${r}') on conflict (tenant_id, k) do update set payload = excluded.payload; commit`,
            );
          }
        })
      ).seconds;
    },
    bulk: async () => {
      const r = run++;
      await c.query(`begin; call shardctl.open_unit_write(${lit(unit)}, ${epoch}); delete from ${SCHEMA}.${table} where tenant_id = ${lit(tenant)}; commit`);
      return (
        await timed(() =>
          c.query(
            `begin; call shardctl.open_unit_write(${lit(unit)}, ${epoch}); insert into ${SCHEMA}.${table} select ${lit(tenant)}, k, 'p${r}' from unnest(array[${keys.map(lit).join(',')}]::text[]) k; commit`,
          ),
        )
      ).seconds;
    },
  });
  const fenced = side('fenced', plain, p.epoch, plain, plainKeys);
  const unsplit = side('split', plain, p.epoch, plain, plainKeys);
  const sub = side('split', `${hot}:1`, split.epoch, hot, subKeys);
  const out: Record<string, unknown> = {};
  for (const [name, pick] of [
    ['1-row tx (300 per side per round)', 'oneRow'],
    ['20,000-row statement', 'bulk'],
  ] as const) {
    log(`${name}: ${rounds} paired rounds`);
    const s = await interleavePaired(rounds, [
      ['fenced', fenced[pick]],
      ['unsplit', unsplit[pick]],
      ['subUnit', sub[pick]],
    ]);
    const ratio = (k: 'unsplit' | 'subUnit') => median(s[k].map((v, i) => v / s.fenced[i]));
    out[name] = {
      medianSeconds: { fenced: median(s.fenced), unsplit: median(s.unsplit), subUnit: median(s.subUnit) },
      ratioToFenced: { unsplit: Number(ratio('unsplit').toFixed(2)), subUnit: Number(ratio('subUnit').toFixed(2)) },
    };
  }
  console.log(JSON.stringify({ shard: SHARD, ways: WAYS, rounds, figures: out }, null, 2));
  await c.end();
  await pool.query(`drop schema if exists ${SCHEMA} cascade`);
  await pool.end();
  await directory.end();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
