// The copy phase and its two baselines, each moving the same tenant rows from source to target:
//  - ours: lib/copy's copyTenant into the prepared (fenced, audited) tables, as the copy activity
//    runs it, checkpoints and all;
//  - raw pipe: one binary `COPY (SELECT ... WHERE tenant) TO STDOUT` piped into `COPY ... FROM
//    STDIN` per table, into RAW_SCHEMA (same indexes, no triggers), one transaction per table;
//  - native initial sync: `CREATE SUBSCRIPTION` on a row-filtered publication, in a database of
//    its own on the target server (same tables, no triggers), timed until every table is synced.
// Each side empties its target tables and checkpoints both servers first (not timed), so no side
// pays for the previous one's dirty buffers.
import { Client, Pool } from 'pg';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { copyTenant, REPLICA_ROLE_SQL } from '../lib/copy';
import type { TenantTable } from '../lib/shard/tables';
import { COLUMNS, RAW_SCHEMA, SCHEMA, TABLES, tablesDdl, truncateTarget } from './setup';
import { timed } from './measure';

export interface CopySample {
  rows: number;
  /** Binary COPY stream bytes of those rows (measured by the raw pipe; the same rows are the same bytes). */
  bytes: number;
  seconds: number;
}

export interface CopyContext {
  source: Pool;
  target: Pool;
  sourceDsn: string;
  targetDsn: string;
  tables: TenantTable[];
  tenant: string;
  tenantColumn: string;
  /** Caps rows per batch (absent: the copy sizes batches in bytes). */
  batchRows?: number;
}

const NATIVE_DB = 'shardctl_bench_native';
const NATIVE_NAME = 'shardctl_bench_native';

async function settle(ctx: CopyContext): Promise<void> {
  await Promise.all([ctx.source.query('checkpoint'), ctx.target.query('checkpoint')]);
}

export function rawCopyPipe(ctx: CopyContext): Promise<CopySample> {
  return pipeTables(ctx, RAW_SCHEMA, false);
}

/**
 * Diagnostic: the same raw pipe into the prepared tables (fence and write-audit triggers), as a
 * replica session named like ours. Its gap to rawCopyPipe is what the triggers' mere presence
 * costs any COPY (a BEFORE ROW trigger turns off COPY's multi-row insert even when it does not fire).
 */
export function rawPipeIntoPrepared(ctx: CopyContext): Promise<CopySample> {
  return pipeTables(ctx, SCHEMA, true);
}

async function pipeTables(ctx: CopyContext, into: string, replica: boolean): Promise<CopySample> {
  await truncateTarget(ctx.target, into);
  await settle(ctx);
  const [s, t] = [await ctx.source.connect(), await ctx.target.connect()];
  try {
    let rows = 0;
    let bytes = 0;
    const { seconds } = await timed(async () => {
      for (const table of TABLES) {
        const cols = COLUMNS[table].join(', ');
        await t.query('begin');
        if (replica) await t.query(REPLICA_ROLE_SQL);
        const out = s.query(copyTo(`copy (select ${cols} from ${SCHEMA}.${table} where tenant_id = '${ctx.tenant}') to stdout (format binary)`));
        out.on('data', (c: Buffer) => void (bytes += c.length));
        const sink = t.query(copyFrom(`copy ${into}.${table} (${cols}) from stdin (format binary)`));
        await pipeline(out, sink);
        await t.query('commit');
        rows += sink.rowCount ?? 0;
      }
    });
    return { rows, bytes, seconds };
  } finally {
    s.release();
    t.release();
  }
}

let copyRuns = 0;

/** lib/copy as the copy activity calls it; `bytes` is filled in by the caller from the raw pipe. */
export async function ourCopy(ctx: CopyContext): Promise<CopySample> {
  await truncateTarget(ctx.target, SCHEMA);
  await ctx.target.query(`delete from shardctl.move_progress where move_id like 'bench-copy-%'`);
  await settle(ctx);
  const moveId = `bench-copy-${++copyRuns}`;
  const { value, seconds } = await timed(() =>
    copyTenant({
      source: ctx.source,
      target: ctx.target,
      tables: ctx.tables,
      tenantColumn: ctx.tenantColumn,
      unit: ctx.tenant,
      moveId,
      batchRows: ctx.batchRows,
    }),
  );
  return { rows: value.rowsCopied, bytes: 0, seconds };
}

/** The native subscriber's database on the target server, with the bench tables and no triggers. */
export async function createNativeTarget(ctx: CopyContext): Promise<void> {
  await dropNativeTarget(ctx);
  await ctx.target.query(`create database ${NATIVE_DB}`);
  const c = await nativeClient(ctx);
  try {
    await c.query(tablesDdl(SCHEMA, { foreignKeys: false }));
  } finally {
    await c.end();
  }
  const filter = `where (tenant_id = '${ctx.tenant}')`;
  await ctx.source.query(`create publication ${NATIVE_NAME} for table ${TABLES.map((t) => `${SCHEMA}.${t} ${filter}`).join(', ')}`);
}

export async function nativeInitialSync(ctx: CopyContext): Promise<CopySample> {
  const c = await nativeClient(ctx);
  try {
    await c.query(`truncate ${TABLES.map((t) => `${SCHEMA}.${t}`).join(', ')}`);
    // The subscription's own slot is made beforehand (not timed): ours is made before the copy too.
    await ctx.source.query(`select pg_create_logical_replication_slot($1, 'pgoutput')`, [NATIVE_NAME]);
    await settle(ctx);
    const { seconds } = await timed(async () => {
      await c.query(
        `create subscription ${NATIVE_NAME} connection '${ctx.sourceDsn}' publication ${NATIVE_NAME}
           with (create_slot = false, slot_name = '${NATIVE_NAME}', copy_data = true)`,
      );
      for (;;) {
        const r = await c.query(
          `select count(*) filter (where srsubstate not in ('s', 'r'))::int as pending, count(*)::int as n
             from pg_subscription_rel where srsubid = (select oid from pg_subscription where subname = $1)`,
          [NATIVE_NAME],
        );
        if (r.rows[0].n === TABLES.length && r.rows[0].pending === 0) break;
        await sleep(25);
      }
    });
    const counts = await c.query(`select ${TABLES.map((t) => `(select count(*) from ${SCHEMA}.${t})`).join(' + ')} as n`);
    await c.query(`drop subscription ${NATIVE_NAME}`); // drops its slot on the source too
    return { rows: Number(counts.rows[0].n), bytes: 0, seconds };
  } finally {
    await c.end();
  }
}

export async function dropNativeTarget(ctx: Pick<CopyContext, 'source' | 'target' | 'targetDsn'>): Promise<void> {
  const exists = await ctx.target.query(`select 1 from pg_database where datname = $1`, [NATIVE_DB]);
  if (exists.rowCount) {
    const c = await nativeClient(ctx);
    try {
      const sub = await c.query(`select 1 from pg_subscription where subname = $1`, [NATIVE_NAME]);
      if (sub.rowCount) await c.query(`drop subscription ${NATIVE_NAME}`);
    } finally {
      await c.end();
    }
    await ctx.target.query(`drop database ${NATIVE_DB} with (force)`);
  }
  await ctx.source.query(`drop publication if exists ${NATIVE_NAME}`);
  await ctx.source.query(`select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = $1 and not active`, [NATIVE_NAME]);
}

async function nativeClient(ctx: Pick<CopyContext, 'targetDsn'>): Promise<Client> {
  const url = new URL(ctx.targetDsn);
  url.pathname = `/${NATIVE_DB}`;
  const c = new Client({ connectionString: url.toString() });
  await c.connect();
  return c;
}
