// Catch-up's second baseline: native logical replication applying the same backlog as ours, so the
// table shows where PostgreSQL's own apply stands against pgbench's write rate on this machine.
//  - the subscriber: a database of its own on the target server (the tenant tables in the same
//    shape, indexes and foreign keys as the ones our applier writes, no triggers), filled once by
//    the subscription's own initial sync (copy_data) so updates and deletes find their rows;
//  - the publication: the move's (createPublicationSql: the same tables and row filter) plus a
//    one-column marker table of the bench's own;
//  - per round, after pgbench: one marker row is inserted on the source, then the disabled
//    subscription is enabled and timed until the marker row is on the subscriber. Its apply worker
//    commits in source commit order, so the marker there means every pgbench transaction before
//    it is applied (checked: the tenant's row counts must then match the source's). The time
//    includes the worker's start (the launcher, the connection, START_REPLICATION), as ours
//    includes its connection and slot start. The subscription is disabled again (not timed) before
//    the next writes, so its slot, like the move's, holds the next backlog unread.
// Everything is named shardctl_bench_nlr: teardownNativeApply removes it (the subscription, its
// slot, the publication, the marker's schema, the database), and setup first removes what a
// killed run left.
import { Client, Pool } from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';
import { dropPublicationAndSlot } from '../lib/cdc';
import { dsnForDatabase } from '../lib/connections';
import { waitSlotInactive } from '../lib/cdc/publication';
import { createPublicationSql } from '../lib/cdc/sql';
import type { TenantTable } from '../lib/shard/tables';
import { SCHEMA, TABLES, tablesDdl } from './setup';
import { timed } from './measure';
import { cpuOf } from './proc-cpu';
import type { RateSample } from './catchup';

/** The scratch database on the target, the publication, the subscription, its slot and the marker's schema on the source. */
const NLR = 'shardctl_bench_nlr';
const MARKER = `${NLR}.marker`;
const SYNC = new Set(['off', 'local', 'remote_write', 'remote_apply', 'on']);
const bad = (v: string): never => {
  throw new Error(`synchronous_commit ${JSON.stringify(v)}: one of ${[...SYNC].join(', ')}`);
};

export interface NativeApplyContext {
  source: Pool;
  target: Pool;
  sourceDsn: string;
  targetDsn: string;
  tables: TenantTable[];
  tenant: string;
  tenantColumn: string;
  /** The subscription's synchronous_commit: 'off' is its default (the walsender is told only flushed positions). */
  synchronousCommit: string;
  /** When (Date.now()) an apply worker of the subscription was last seen starting; see launcherReady. */
  workerStartedAt?: number;
}

export interface NativeApplySample extends RateSample {
  /** From ENABLE until the apply worker showed in pg_stat_subscription (part of `seconds`). */
  startSeconds: number;
  /**
   * CPU seconds (user + system, /proc) of the round's walsender on the source and apply worker on
   * the target, each a process of its own started by this round's ENABLE, read once the marker is
   * applied: everything they did for the round. null where /proc could not be read.
   */
  cpu: { walsender: number | null; worker: number | null };
}

async function subscriber(ctx: Pick<NativeApplyContext, 'targetDsn'>): Promise<Client> {
  const c = new Client({ connectionString: dsnForDatabase(ctx.targetDsn, NLR), application_name: 'shardctl-bench-nlr' });
  await c.connect();
  return c;
}

async function until(what: string, timeoutMs: number, done: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`native logical replication: ${what} not within ${Math.round(timeoutMs / 1000)} s`);
    await sleep(10);
  }
}

/**
 * PostgreSQL 15's launcher starts apply workers at most once per wal_retrieve_retry_interval (5 s
 * by default): an ENABLE sooner after the last start waits out the rest of it before any worker
 * runs (seen: 5.0 s of a 5.2 s apply). That wait is the launcher's throttle, not the apply's
 * work, so it is waited out here, untimed, before ENABLE.
 */
async function launcherReady(ctx: NativeApplyContext, c: Client): Promise<void> {
  if (ctx.workerStartedAt === undefined) return;
  const r = await c.query(`select setting::int as ms from pg_settings where name = 'wal_retrieve_retry_interval'`);
  const wait = ctx.workerStartedAt + Number(r.rows[0].ms) + 100 - Date.now();
  if (wait > 0) await sleep(wait);
}

/** Disables the subscription and waits until its apply worker and the source's walsender are gone. */
async function disable(ctx: NativeApplyContext, c: Client): Promise<void> {
  await c.query(`alter subscription ${NLR} disable`);
  await until('the apply worker stopping', 60_000, async () => {
    const r = await c.query(`select count(*)::int as n from pg_stat_subscription where subname = $1 and pid is not null`, [NLR]);
    return r.rows[0].n === 0;
  });
  if (!(await waitSlotInactive(ctx.source, NLR, 60_000)))
    throw new Error(`native logical replication: slot ${NLR} still active 60 s after the subscription was disabled`);
}

/** The tenant's rows per table on the source against the subscriber's: they must be equal once the subscriber has applied everything. */
async function checkCounts(ctx: NativeApplyContext, c: Client, when: string): Promise<void> {
  const count = (schemaFilter: string) => TABLES.map((t) => `(select count(*) from ${SCHEMA}.${t}${schemaFilter})::bigint as ${t}`).join(', ');
  const [src, sub] = await Promise.all([ctx.source.query(`select ${count(` where ${ctx.tenantColumn} = $1`)}`, [ctx.tenant]), c.query(`select ${count('')}`)]);
  const differ = TABLES.filter((t) => src.rows[0][t] !== sub.rows[0][t]);
  if (differ.length) {
    throw new Error(
      `native logical replication ${when}: the subscriber's rows differ from the source's tenant rows: ${differ.map((t) => `${t} ${sub.rows[0][t]} against ${src.rows[0][t]}`).join(', ')}`,
    );
  }
}

/**
 * The subscriber and the publication, the subscriber filled by the subscription's initial sync of
 * the tenant's rows (not timed), then the subscription disabled. Call after the move's own slot
 * and copy (setupCatchUp) and before any write, so both start from the same rows.
 */
export async function setupNativeApply(ctx: NativeApplyContext): Promise<void> {
  await teardownNativeApply(ctx);
  await ctx.source.query(`create schema ${NLR}; create table ${MARKER} (round int primary key)`);
  await ctx.source.query(createPublicationSql(NLR, ctx.tables, ctx.tenantColumn, ctx.tenant));
  await ctx.source.query(`alter publication ${NLR} add table ${MARKER}`);
  await ctx.target.query(`create database ${NLR}`);
  const c = await subscriber(ctx);
  try {
    await c.query(tablesDdl(SCHEMA));
    await c.query(`create schema ${NLR}; create table ${MARKER} (round int primary key)`);
    const sync = SYNC.has(ctx.synchronousCommit) ? ctx.synchronousCommit : bad(ctx.synchronousCommit);
    await c.query(
      `create subscription ${NLR} connection '${ctx.sourceDsn}' publication ${NLR}
         with (copy_data = true, create_slot = true, enabled = true, synchronous_commit = '${sync}')`,
    );
    ctx.workerStartedAt = Date.now();
    await until('the initial sync', 600_000, async () => {
      const r = await c.query(
        `select count(*) filter (where srsubstate <> 'r')::int as pending, count(*)::int as n
           from pg_subscription_rel where srsubid = (select oid from pg_subscription where subname = $1)`,
        [NLR],
      );
      return r.rows[0].n === TABLES.length + 1 && r.rows[0].pending === 0;
    });
    await disable(ctx, c);
    await checkCounts(ctx, c, 'after its initial sync');
  } finally {
    await c.end();
  }
}

/** Marks the end of a round's writes on the source: call after pgbench, before either apply. */
export async function markEndOfWrites(ctx: NativeApplyContext, round: number): Promise<void> {
  await ctx.source.query(`insert into ${MARKER} (round) values ($1)`, [round]);
}

/**
 * Enables the subscription and times it until the round's marker row is on the subscriber:
 * `transactions` (pgbench's of this round) per second. Then disables it again (not timed) and
 * checks the subscriber holds the source's tenant rows.
 */
export async function nativeApply(ctx: NativeApplyContext, round: number, transactions: number, maxSeconds: number): Promise<NativeApplySample> {
  const c = await subscriber(ctx);
  try {
    await launcherReady(ctx, c);
    let startSeconds = NaN;
    const t0 = process.hrtime.bigint();
    const { seconds } = await timed(async () => {
      await c.query(`alter subscription ${NLR} enable`);
      await until(`applying round ${round}'s backlog`, maxSeconds * 1000, async () => {
        const r = await c.query(
          `select exists (select 1 from pg_stat_subscription where subname = $1 and relid is null and pid is not null) as started,
                  exists (select 1 from ${MARKER} where round = $2) as applied`,
          [NLR, round],
        );
        if (r.rows[0].started && Number.isNaN(startSeconds)) {
          startSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
          ctx.workerStartedAt = Date.now();
        }
        return r.rows[0].applied;
      });
    });
    if (Number.isNaN(startSeconds)) ctx.workerStartedAt = Date.now(); // started and done between two polls
    const [w, s] = await Promise.all([
      c.query(`select pid from pg_stat_subscription where subname = $1 and relid is null`, [NLR]),
      ctx.source.query(`select active_pid as pid from pg_replication_slots where slot_name = $1`, [NLR]),
    ]);
    const cpu = { walsender: cpuOf(s.rows[0]?.pid), worker: cpuOf(w.rows[0]?.pid) };
    await disable(ctx, c);
    await checkCounts(ctx, c, `after round ${round}`);
    return { transactions, seconds, startSeconds, cpu };
  } finally {
    await c.end();
  }
}

/** Removes everything setupNativeApply creates; safe to call when none of it exists. */
export async function teardownNativeApply(ctx: NativeApplyContext): Promise<void> {
  const exists = await ctx.target.query(`select 1 from pg_database where datname = $1`, [NLR]);
  if (exists.rowCount) {
    const c = await subscriber(ctx);
    try {
      const sub = await c.query(`select subenabled from pg_subscription where subname = $1`, [NLR]);
      if (sub.rowCount) {
        // Detached from its slot first, so dropping it does not depend on reaching the source;
        // the slot is dropped on the source below.
        if (sub.rows[0].subenabled) await disable(ctx, c);
        await c.query(`alter subscription ${NLR} set (slot_name = none)`);
        await c.query(`drop subscription ${NLR}`);
      }
    } finally {
      await c.end();
    }
    await ctx.target.query(`drop database ${NLR} with (force)`);
  }
  await dropPublicationAndSlot(ctx.source, { publication: NLR, slot: NLR });
  await ctx.source.query(`drop schema if exists ${NLR} cascade`);
}
