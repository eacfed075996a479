// Isolated user schemas for move tests: a schema of our own on every shard (never `public`),
// a config copy whose tenant schemas include it, shards prepared with that config (so the
// fence trigger covers our tables) and a worker of our own on its own task queue. Plus direct
// fenced writes and exact row snapshots for byte-for-byte comparisons.
import type { Pool, PoolClient } from 'pg';
import { randomBytes } from 'node:crypto';
import type { Config } from '../../lib/config';
import { prepareShard, PrepareResult } from '../../lib/shard/prepare';
import { ShardctlError } from '../../lib/errors';
import { quoteIdent } from '../../lib/shard/tables';
import { STABLE_TEXT_SETTINGS_SQL } from '../../lib/copy/sql';
import { dropPublicationAndSlot } from '../../lib/cdc';
import { replicationNamePattern } from '../../lib/ids';
import { startWorker, StartedWorker } from '../../worker';
import { testConfig, shardPool, uniq } from './stack';

export const SHARDS = ['shard-a', 'shard-b', 'shard-c'] as const;

export interface SchemaWorld {
  /** The schema's name, unquoted (may be mixed case). */
  schema: string;
  /** The schema's name, quoted for SQL text. */
  S: string;
  config: Config;
  taskQueue: string;
  worker: StartedWorker;
  prepared: Record<string, PrepareResult>;
  pool(shard: string): Pool;
  /** Drops this world's replication objects for the given move ids, its schema, and stops its worker. */
  destroy(moveIds: string[]): Promise<void>;
}

/**
 * Creates `<prefix>_<random>` on every shard with `ddl(S, shard)` (S = quoted schema name), then
 * prepares every shard with a config whose tenant schemas are ['public', schema] and starts a worker
 * on a task queue of its own.
 */
export async function createSchemaWorld(
  prefix: string,
  ddl: (S: string, shard: string) => string,
  opts: { shardDsn?: (shard: string, dsn: string) => string } = {},
): Promise<SchemaWorld> {
  const schema = `${prefix}_${randomBytes(4).toString('hex')}`;
  const S = quoteIdent(schema);
  const base = testConfig();
  const taskQueue = uniq(prefix.toLowerCase());
  // `shardDsn`: how this world's worker (and routers made from its config) reach each shard.
  const shards = opts.shardDsn ? base.shards.map((s) => ({ ...s, dsn: opts.shardDsn!(s.name, s.dsn) })) : base.shards;
  const config: Config = { ...base, shards, temporal: { ...base.temporal, taskQueue }, tenant: { ...base.tenant, schemas: ['public', schema] } };
  const pools = new Map(SHARDS.map((s) => [s as string, shardPool(s)]));
  const pool = (shard: string) => pools.get(shard)!;
  for (const s of SHARDS) await pool(s).query(ddl(S, s));
  const prepared: Record<string, PrepareResult> = {};
  for (const s of SHARDS) prepared[s] = await prepareRetrying(pool(s), config);
  const worker = await startWorker(config, { taskQueue });
  return {
    schema,
    S,
    config,
    taskQueue,
    worker,
    prepared,
    pool,
    async destroy(moveIds: string[]) {
      await worker.shutdown().catch(() => {});
      for (const s of SHARDS) {
        for (const id of moveIds) {
          // Every slot and publication of every move (any run) whose id starts with `id`.
          const like = replicationNamePattern(id);
          const names = await pool(s).query(
            `select slot_name as n from pg_replication_slots where slot_name like $1 union select pubname from pg_publication where pubname like $1`,
            [like],
          );
          for (const r of names.rows) await dropPublicationAndSlot(pool(s), { slot: r.n, publication: r.n }).catch(() => {});
        }
        await pool(s)
          .query(`drop schema if exists ${S} cascade`)
          .catch(() => {});
      }
    },
  };
}

/** Runs `fn` in one transaction that writes as `unit` at `epoch`, as the router would. */
export async function asTenant<T>(pool: Pool, unit: string, epoch: number, fn: (c: PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  try {
    await c.query('begin');
    await c.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', $2, true)`, [unit, String(epoch)]);
    const r = await fn(c);
    await c.query('commit');
    return r;
  } catch (e) {
    await c.query('rollback').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
}

export interface RowSnapshot {
  columns: string[];
  /** Key (`::text` of the primary key, joined) → every column's text, bytea also as md5. */
  rows: Map<string, (string | null)[]>;
}

/**
 * Every row of `unit` in `schema.table`, every column as `::text` under pinned output settings
 * (UTC, ISO, hex bytea, exact floats); bytea and long values additionally as md5 + length, so a
 * difference deep inside a TOASTed value is visible without printing it.
 */
export async function snapshotRows(pool: Pool, schema: string, table: string, unit: string): Promise<RowSnapshot> {
  const c = await pool.connect();
  try {
    await c.query('begin isolation level repeatable read read only');
    await c.query(STABLE_TEXT_SETTINGS_SQL);
    const cols = await c.query<{ name: string; type: string }>(
      `select a.attname::text as name, format_type(a.atttypid, a.atttypmod) as type from pg_attribute a
        where a.attrelid = $1::regclass and a.attnum > 0 and not a.attisdropped order by a.attnum`,
      [`${quoteIdent(schema)}.${quoteIdent(table)}`],
    );
    const pk = await c.query<{ name: string }>(
      `select a.attname::text as name from pg_index i cross join lateral unnest(i.indkey::int2[]) with ordinality k(attnum, ord)
         join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
        where i.indrelid = $1::regclass and i.indisprimary order by k.ord`,
      [`${quoteIdent(schema)}.${quoteIdent(table)}`],
    );
    const exprs: string[] = [];
    const names: string[] = [];
    for (const col of cols.rows) {
      const q = quoteIdent(col.name);
      names.push(col.name);
      exprs.push(`case when octet_length(${q}::text) > 4096 then 'md5:' || md5(${q}::text) || ' len:' || octet_length(${q}::text) else ${q}::text end`);
      if (col.type === 'bytea') {
        names.push(`md5(${col.name})`);
        exprs.push(`md5(${q}) || ' len:' || octet_length(${q})`);
      }
    }
    const keyExpr = pk.rows.map((k) => `${quoteIdent(k.name)}::text`).join(` || '|' || `);
    const order = pk.rows.map((k) => `${quoteIdent(k.name)}::text collate "C"`).join(', ');
    const r = await c.query({
      text: `select ${keyExpr} as k, ${exprs.join(', ')} from ${quoteIdent(schema)}.${quoteIdent(table)} where tenant_id = $1 order by ${order}`,
      values: [unit],
      rowMode: 'array',
    });
    await c.query('commit');
    const rows = new Map<string, (string | null)[]>();
    for (const row of r.rows as (string | null)[][]) rows.set(row[0]!, row.slice(1));
    return { columns: names, rows };
  } catch (e) {
    await c.query('rollback').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
}

/** Column-by-column differences between two snapshots (empty when identical). */
export function snapshotDiff(a: RowSnapshot, b: RowSnapshot, label = ['source', 'target']): string[] {
  const out: string[] = [];
  if (a.columns.join(',') !== b.columns.join(',')) out.push(`columns differ: ${a.columns} vs ${b.columns}`);
  for (const [k, va] of a.rows) {
    const vb = b.rows.get(k);
    if (!vb) {
      out.push(`row ${k}: missing on ${label[1]}`);
      continue;
    }
    va.forEach((v, i) => {
      if (v !== vb[i])
        out.push(`row ${k} column ${a.columns[i]}: ${label[0]} ${JSON.stringify(v)?.slice(0, 200)} vs ${label[1]} ${JSON.stringify(vb[i])?.slice(0, 200)}`);
    });
  }
  for (const k of b.rows.keys()) if (!a.rows.has(k)) out.push(`row ${k}: extra on ${label[1]}`);
  return out;
}

/**
 * prepareShard, tried again (at most 3 times) when it gives up on a lock, as its message tells an
 * operator to: with many test files preparing the same shards at once, one prepare can wait out
 * its lock timeout behind the others (seen in CI: "prepare gave up waiting for a table lock").
 */
async function prepareRetrying(pool: Pool, config: Config): Promise<PrepareResult> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await prepareShard(pool, config);
    } catch (e) {
      if (attempt >= 3 || !(e instanceof ShardctlError && e.type === 'Conflict' && e.retriable)) throw e;
    }
  }
}
