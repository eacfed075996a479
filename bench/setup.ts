// The bench's own data set, on the dev stack's shards: schema `shardctl_bench` with three tenant
// tables shaped like production ones — a wide table whose text body is TOASTed out of line
// (docs), a narrow append-mostly one (events) and a child of the wide one (comments, FK) — one
// tenant of N rows plus a neighbour of N/10 on the source, fenced by the real `prepareShard`.
// Everything here is the bench's: dropBenchSchema removes it.
import type { Pool } from 'pg';
import type { Config } from '../lib/config';
import { prepareShard } from '../lib/shard/prepare';
import { listTenantTables, TenantTable } from '../lib/shard/tables';
import { setUnitFence } from '../lib/shard/fence';

export const SCHEMA = 'shardctl_bench';
/** On the target only: the same tables, same indexes, no triggers: the raw COPY pipe lands here. */
export const RAW_SCHEMA = 'shardctl_bench_raw';
export const TABLES = ['docs', 'comments', 'events'] as const;
/** Column lists in table order (every column; none is generated). */
export const COLUMNS: Record<(typeof TABLES)[number], string[]> = {
  docs: ['tenant_id', 'id', 'account_id', 'title', 'body', 'tags', 'payload', 'amount', 'created_at', 'updated_at', 'version'],
  comments: ['tenant_id', 'doc_id', 'n', 'author', 'body', 'created_at'],
  events: ['tenant_id', 'id', 'kind', 'at', 'value', 'doc_id'],
};

/** The tables; without foreign keys (their RI triggers) for the baselines' "no triggers" copies. */
export function tablesDdl(schema: string, opts: { foreignKeys: boolean } = { foreignKeys: true }): string {
  return `
create schema if not exists ${schema};
create table ${schema}.docs (
  tenant_id text not null, id bigint not null, account_id bigint not null, title text not null,
  body text not null, tags text[] not null, payload jsonb not null, amount numeric(14,2),
  created_at timestamptz not null, updated_at timestamptz not null, version int not null default 1,
  primary key (tenant_id, id));
create index on ${schema}.docs (tenant_id, account_id);
create table ${schema}.comments (
  tenant_id text not null, doc_id bigint not null, n int not null, author text not null,
  body text not null, created_at timestamptz not null,
  primary key (tenant_id, doc_id, n)${
    opts.foreignKeys
      ? `,
  foreign key (tenant_id, doc_id) references ${schema}.docs (tenant_id, id)`
      : ''
  });
create table ${schema}.events (
  tenant_id text not null, id bigint not null, kind smallint not null, at timestamptz not null,
  value double precision, doc_id bigint, primary key (tenant_id, id));
create index on ${schema}.events (tenant_id, at);
create sequence ${schema}.event_ids;`;
}

export interface RowCounts {
  docs: number;
  comments: number;
  events: number;
}

/** N rows of a tenant: a tenth wide docs, three comments per doc, the rest events. */
export function rowCounts(rows: number): RowCounts {
  const docs = Math.max(1, Math.round(rows / 10));
  const comments = docs * 3;
  return { docs, comments, events: Math.max(1, rows - docs - comments) };
}

/** Seeds one tenant with server-side generate_series (the bench measures moves, not seeding). */
export async function seedTenantRows(pool: Pool, schema: string, tenant: string, n: RowCounts): Promise<void> {
  // docs.body: 128 md5s, 4 KiB of hex that pglz cannot shrink by a quarter, so it is stored out of line.
  await pool.query(
    `insert into ${schema}.docs
     select $1, i, i % 997, 'document ' || i, (select string_agg(md5(g::text || '.' || i), '') from generate_series(1, 128) g),
            array['t' || i % 7, 't' || i % 11], jsonb_build_object('i', i, 'flags', jsonb_build_array(i % 2 = 0, i % 3 = 0)),
            i * 1.25, timestamptz '2024-01-01' + i * interval '1 second', timestamptz '2024-06-01' + i * interval '1 second', 1 + i % 5
       from generate_series(1, $2::int) i`,
    [tenant, n.docs],
  );
  await pool.query(
    `insert into ${schema}.comments
     select $1, d, k, 'user' || (d * 3 + k) % 101, 'comment ' || k || ' on ' || d || ': ' || md5(d::text || k) || md5(k::text || d),
            timestamptz '2024-02-01' + d * interval '1 second'
       from generate_series(1, $2::int) d, generate_series(1, 3) k`,
    [tenant, n.docs],
  );
  await pool.query(
    `insert into ${schema}.events
     select $1, i, (i % 13)::smallint, timestamptz '2024-03-01' + i * interval '10 ms', i / 7.0, 1 + i % $3::int
       from generate_series(1, $2::int) i`,
    [tenant, n.events, n.docs],
  );
}

export interface BenchShards {
  source: Pool;
  target: Pool;
}

/**
 * Creates the schema on both shards, seeds the source (tenant + neighbour), vacuums it (a
 * settled table, as production's are), installs the fence and write audit on both with the real
 * prepare, and gives the source ownership of the tenant at epoch 1.
 */
export async function createBenchData(
  shards: BenchShards,
  config: Config,
  opts: { tenant: string; neighbour: string; rows: number },
): Promise<{ tables: TenantTable[]; counts: RowCounts; tenantBytes: number }> {
  const { source, target } = shards;
  await dropBenchSchema([source, target]);
  for (const p of [source, target]) await p.query(tablesDdl(SCHEMA));
  await target.query(tablesDdl(RAW_SCHEMA, { foreignKeys: false }));
  const counts = rowCounts(opts.rows);
  await seedTenantRows(source, SCHEMA, opts.tenant, counts);
  await seedTenantRows(source, SCHEMA, opts.neighbour, rowCounts(Math.max(10, Math.round(opts.rows / 10))));
  await source.query(`select setval('${SCHEMA}.event_ids', $1::bigint)`, [counts.events * 10]);
  await source.query(`vacuum (analyze) ${SCHEMA}.docs, ${SCHEMA}.comments, ${SCHEMA}.events`);
  const benchConfig: Config = { ...config, tenant: { ...config.tenant, schemas: [SCHEMA], tables: undefined } };
  for (const p of [source, target]) await prepareShard(p, benchConfig);
  await setUnitFence(source, { unit: opts.tenant, epoch: 1, owned: true, frozen: false });
  await setUnitFence(source, { unit: opts.neighbour, epoch: 1, owned: true, frozen: false });
  const tables = await listTenantTables(source, { column: config.tenant.column, schemas: [SCHEMA] });
  const size = await source.query(
    `select (select sum(pg_total_relation_size(c.oid)) from pg_class c where c.relnamespace = '${SCHEMA}'::regnamespace and c.relkind = 'r')::bigint as b`,
  );
  return { tables, counts, tenantBytes: Number(size.rows[0].b) };
}

export async function truncateTarget(target: Pool, schema: string): Promise<void> {
  await target.query(`truncate ${TABLES.map((t) => `${schema}.${t}`).join(', ')}`);
}

export async function dropBenchSchema(pools: Pool[]): Promise<void> {
  for (const p of pools) {
    await p.query(`drop schema if exists ${SCHEMA} cascade; drop schema if exists ${RAW_SCHEMA} cascade`);
    await p.query(`delete from shardctl.fence where unit like 'bench-%'`).catch(() => {});
    await p.query(`delete from shardctl.move_progress where move_id like 'bench-%'`).catch(() => {});
  }
}
