// Throughput of the COPY-based batch copy (lib/copy) against a naive row-by-row INSERT baseline,
// measured in the same run on the dev stack (shard-a → shard-b), same rows, same batch size,
// both upserting with the data-plane role. Usage: npx tsx bench/copy-throughput.ts [rows] [batchRows]
import { openPool } from '../lib/connections';
import { randomBytes } from 'node:crypto';
import { loadConfig, shardByName } from '../lib/config';
import { listTenantTables, quoteIdent } from '../lib/shard/tables';
import { copyTenantTable, REPLICA_ROLE_SQL } from '../lib/copy';

const ROWS = Number(process.argv[2] ?? 50_000);
const BATCH = Number(process.argv[3] ?? 5_000);
const SCHEMA = `bench_copy_${randomBytes(4).toString('hex')}`;
const TENANT = 'bench-tenant';

const ddl = (table: string) => `
  create table ${SCHEMA}.${table} (
    tenant_id text not null, id uuid not null, account_id uuid, title text not null, body text,
    version int not null default 1, payload jsonb not null default '{}', amount numeric(14,2),
    updated_at timestamptz not null default now(), primary key (tenant_id, id))`;

async function main() {
  const config = loadConfig();
  const source = openPool(shardByName(config, 'shard-a').dsn, { max: 4 });
  const target = openPool(shardByName(config, 'shard-b').dsn, { max: 4 });
  try {
    for (const p of [source, target]) await p.query(`create schema ${SCHEMA}; ${ddl('docs')}; ${ddl('docs_naive')}`);
    await source.query(
      `insert into ${SCHEMA}.docs (tenant_id, id, account_id, title, body, version, payload, amount)
       select $1, gen_random_uuid(), gen_random_uuid(), 'title ' || i, repeat(md5(i::text), 6), i % 17,
              jsonb_build_object('i', i, 'tags', jsonb_build_array('a', 'b')), i * 1.25
         from generate_series(1, $2::int) i`,
      [TENANT, ROWS],
    );
    await source.query(`analyze ${SCHEMA}.docs`);
    const [table] = await listTenantTables(source, { column: 'tenant_id', schemas: [SCHEMA], tables: ['docs'] });
    const moveId = `bench-${SCHEMA}`;

    // 1. COPY-based batches.
    const t0 = process.hrtime.bigint();
    const res = await copyTenantTable({ source, target, table, tenantColumn: 'tenant_id', unit: TENANT, moveId, batchRows: BATCH });
    const copySec = Number(process.hrtime.bigint() - t0) / 1e9;

    // 2. Naive: same keyset batches read from the source, one INSERT ... ON CONFLICT per row.
    const cols = table.columns.filter((c) => !c.generated).map((c) => c.name);
    const list = cols.map(quoteIdent).join(', ');
    const insert =
      `insert into ${SCHEMA}.docs_naive (${list}) values (${cols.map((_, i) => `$${i + 1}`).join(', ')})` +
      ` on conflict (tenant_id, id) do update set ${cols
        .filter((c) => c !== 'tenant_id' && c !== 'id')
        .map((c) => `${quoteIdent(c)} = excluded.${quoteIdent(c)}`)
        .join(', ')}`;
    const tgt = await target.connect();
    const t1 = process.hrtime.bigint();
    let last: string | null = null;
    let naiveRows = 0;
    for (;;) {
      const batch: { rows: string[][] } = await source.query({
        text: `select ${cols.map((c) => `${quoteIdent(c)}::text`).join(', ')} from ${SCHEMA}.docs
                where tenant_id = $1 ${last ? 'and id > $3::uuid' : ''} order by tenant_id, id limit $2`,
        values: last ? [TENANT, BATCH, last] : [TENANT, BATCH],
        rowMode: 'array',
      });
      if (batch.rows.length === 0) break;
      await tgt.query('begin');
      await tgt.query(REPLICA_ROLE_SQL);
      for (const row of batch.rows) await tgt.query({ text: insert, values: row, name: 'naive-insert' });
      await tgt.query('commit');
      naiveRows += batch.rows.length;
      last = batch.rows[batch.rows.length - 1][cols.indexOf('id')];
      if (batch.rows.length < BATCH) break;
    }
    const naiveSec = Number(process.hrtime.bigint() - t1) / 1e9;
    tgt.release();

    const counts = await target.query(`select (select count(*) from ${SCHEMA}.docs)::int as a, (select count(*) from ${SCHEMA}.docs_naive)::int as b`);
    const copyRate = res.rowsCopied / copySec;
    const naiveRate = naiveRows / naiveSec;
    console.log(`rows=${ROWS} batchRows=${BATCH} format=${res.format}`);
    console.log(
      `COPY batches : ${res.rowsCopied} rows in ${copySec.toFixed(2)} s = ${Math.round(copyRate)} rows/s (${res.batches} batches; target has ${counts.rows[0].a})`,
    );
    console.log(`row-by-row   : ${naiveRows} rows in ${naiveSec.toFixed(2)} s = ${Math.round(naiveRate)} rows/s (target has ${counts.rows[0].b})`);
    console.log(`ratio        : COPY is ${(copyRate / naiveRate).toFixed(1)}x the row-by-row baseline`);
    await target.query(`delete from shardctl.move_progress where move_id = $1`, [moveId]).catch(() => {});
  } finally {
    for (const p of [source, target]) await p.query(`drop schema if exists ${SCHEMA} cascade`).catch(() => {});
    await Promise.all([source.end(), target.end()]);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
