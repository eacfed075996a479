// The source side of a move's change stream: the row-filtered publication and the pgoutput slot
// (created publication first, then slot, both before any row is copied), their teardown, and
// WAL position helpers. Idempotent: names are derived from the move, and re-running converges.
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClientBase, Pool } from 'pg';
import { ShardctlError } from '../errors';
import { replicationNamePattern, validateTenantId } from '../ids';
import { normalizeLsn } from './lsn';
import { checkReplicaIdentity } from './replica-identity';
import { createPublicationSql, quoteIdent, TableRef, tableKey, validateReplicationName } from './sql';

type Queryable = Pool | ClientBase;

export interface PublicationSpec {
  publication: string;
  slot: string;
  tables: TableRef[];
  tenantColumn: string;
  unit: string;
}

const PUBLICATION_LOCK_CLASS = 4213;

/**
 * Creates (or verifies) the publication, then the slot. Returns the slot's consistent point
 * (confirmed_flush_lsn): rows copied after this returns plus the stream from this point is complete.
 * `created` is true when this call created the slot.
 */
export async function ensurePublicationAndSlot(source: Pool, opts: PublicationSpec): Promise<{ consistentLsn: string; created: boolean }> {
  const publication = validateReplicationName('publication', opts.publication);
  const slot = validateReplicationName('slot', opts.slot);
  const unit = validateTenantId(opts.unit);
  if (opts.tables.length === 0) throw new ShardctlError('InvalidInput', 'no tables to publish');
  const c = await source.connect();
  try {
    const reasons = await checkReplicaIdentity(c, opts.tables, opts.tenantColumn);
    if (reasons.length) {
      throw new ShardctlError('PreconditionFailed', `cannot stream changes of unit ${unit}: ${reasons.join('; ')}`, { reasons });
    }
    await c.query('begin');
    try {
      await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [PUBLICATION_LOCK_CLASS, publication]);
      const createSql = createPublicationSql(publication, opts.tables, opts.tenantColumn, unit);
      const existing = await c.query<{ pubinsert: boolean; pubupdate: boolean; pubdelete: boolean; pubtruncate: boolean; puballtables: boolean }>(
        'select pubinsert, pubupdate, pubdelete, pubtruncate, puballtables from pg_publication where pubname = $1',
        [publication],
      );
      if (existing.rows.length === 0) {
        // A slot older than its publication cannot be streamed (decoding its early changes fails
        // with "publication does not exist"), and the copy may already rest on its snapshot.
        if (await slotRow(c, slot)) {
          throw new ShardctlError(
            'Conflict',
            `replication slot ${slot} exists without publication ${publication}: it predates the publication and cannot be streamed; drop both (dropPublicationAndSlot) and restart the copy`,
            { slot, publication },
          );
        }
        await c.query(createSql);
      } else {
        const p = existing.rows[0];
        const problems: string[] = [];
        if (p.puballtables) problems.push('it publishes all tables');
        if (!(p.pubinsert && p.pubupdate && p.pubdelete && p.pubtruncate)) problems.push('it does not publish insert, update, delete and truncate');
        problems.push(...(await compareWithExpected(c, publication, createPublicationSql(scratchName(publication), opts.tables, opts.tenantColumn, unit))));
        if (problems.length) {
          throw new ShardctlError(
            'Conflict',
            `publication ${publication} already exists but differs from this move's: ${problems.join('; ')}. Cancel the move that owns it, or drop it (DROP PUBLICATION ${quoteIdent(publication)}) if it is stale`,
            { publication, problems },
          );
        }
      }
      await c.query('commit');
    } catch (e) {
      await c.query('rollback').catch(() => {});
      throw e;
    }
    // A slot cannot be created in a transaction that has written (the publication), hence autocommit.
    const found = await slotRow(c, slot);
    if (found) return { consistentLsn: verifySlot(found, slot), created: false };
    try {
      const r = await c.query<{ lsn: string }>("select lsn::text as lsn from pg_create_logical_replication_slot($1, 'pgoutput')", [slot]);
      return { consistentLsn: normalizeLsn(r.rows[0].lsn), created: true };
    } catch (e: any) {
      if (e?.code !== '42710') throw e; // duplicate_object: a concurrent call created it first
      const again = await slotRow(c, slot);
      if (!again) throw e;
      return { consistentLsn: verifySlot(again, slot), created: false };
    }
  } finally {
    c.release();
  }
}

const scratchName = (publication: string) => `${publication.slice(0, 50)}_expect`;

/** Differences between the existing publication's tables/filters and what `scratchSql` creates. */
async function compareWithExpected(c: ClientBase, publication: string, scratchSql: string): Promise<string[]> {
  const listing = (pub: string) =>
    c.query<{ schemaname: string; tablename: string; rowfilter: string | null }>(
      'select schemaname::text, tablename::text, rowfilter from pg_publication_tables where pubname = $1',
      [pub],
    );
  const actual = await listing(publication);
  // Render the expected filters exactly as PostgreSQL stores them, by creating the publication under
  // a scratch name in a savepoint and rolling it back: no text normalisation of our own to get wrong.
  await c.query('savepoint shardctl_expect');
  let expected;
  try {
    await c.query(scratchSql);
    expected = await listing(scratchName(publication));
  } finally {
    await c.query('rollback to savepoint shardctl_expect');
  }
  const want = new Map(expected.rows.map((r) => [tableKey({ schema: r.schemaname, name: r.tablename }), r.rowfilter]));
  const have = new Map(actual.rows.map((r) => [tableKey({ schema: r.schemaname, name: r.tablename }), r.rowfilter]));
  const problems: string[] = [];
  for (const [t, f] of want) {
    if (!have.has(t)) problems.push(`table ${t} is missing`);
    else if (have.get(t) !== f) problems.push(`table ${t} has row filter ${have.get(t) ?? '(none)'} instead of ${f}`);
  }
  for (const t of have.keys()) if (!want.has(t)) problems.push(`table ${t} is not part of this move`);
  return problems;
}

interface SlotRow {
  plugin: string | null;
  slot_type: string;
  database: string | null;
  current_db: string;
  confirmed_flush_lsn: string | null;
  active_pid: number | null;
}

async function slotRow(c: Queryable, slot: string): Promise<SlotRow | undefined> {
  const r = await c.query<SlotRow>(
    `select plugin::text, slot_type, database::text, current_database()::text as current_db,
            confirmed_flush_lsn::text, active_pid
       from pg_replication_slots where slot_name = $1`,
    [slot],
  );
  return r.rows[0];
}

function verifySlot(s: SlotRow, slot: string): string {
  if (s.slot_type !== 'logical' || s.plugin !== 'pgoutput' || s.database !== s.current_db || !s.confirmed_flush_lsn) {
    throw new ShardctlError(
      'Conflict',
      `replication slot ${slot} exists but is not a pgoutput logical slot of database ${s.current_db} (type ${s.slot_type}, plugin ${s.plugin}, database ${s.database}): drop it with pg_drop_replication_slot('${slot}') if it is stale`,
      { slot },
    );
  }
  return normalizeLsn(s.confirmed_flush_lsn);
}

/** The slot's state for the apply: confirmed position and the walsender holding it, if any. */
export async function slotStatus(source: Queryable, slot: string): Promise<{ confirmedFlushLsn: string; activePid: number | null } | null> {
  const s = await slotRow(source, slot);
  if (!s) return null;
  return { confirmedFlushLsn: verifySlot(s, slot), activePid: s.active_pid };
}

/**
 * Ends the walsender holding the slot (a zombie left by a killed worker keeps it active until
 * wal_sender_timeout) and waits until the slot is free. Returns whether one was terminated.
 */
export async function releaseSlot(source: Queryable, slot: string, timeoutMs = 15_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  let terminated = false;
  for (;;) {
    const r = await source.query<{ active_pid: number | null }>('select active_pid from pg_replication_slots where slot_name = $1', [slot]);
    const pid = r.rows[0]?.active_pid ?? null;
    if (pid === null) return terminated;
    if (Date.now() > deadline) {
      throw new ShardctlError('Conflict', `replication slot ${slot} is still held by backend ${pid} after ${timeoutMs} ms`, { slot, pid }, true);
    }
    await source.query('select pg_terminate_backend($1)', [pid]);
    terminated = true;
    await sleep(50);
  }
}

/** Waits (without terminating anyone) for the slot to become inactive; false on timeout. */
export async function waitSlotInactive(source: Queryable, slot: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await source.query<{ active: boolean }>('select active from pg_replication_slots where slot_name = $1', [slot]);
    if (!r.rows[0]?.active) return true;
    if (Date.now() > deadline) return false;
    await sleep(25);
  }
}

/** Idempotent teardown: the slot (after ending any walsender on it), then the publication. */
export async function dropPublicationAndSlot(
  source: Pool,
  opts: { publication: string; slot: string },
): Promise<{ droppedSlot: boolean; droppedPublication: boolean }> {
  const publication = validateReplicationName('publication', opts.publication);
  const slot = validateReplicationName('slot', opts.slot);
  let droppedSlot = false;
  for (let attempt = 0; ; attempt++) {
    if (!(await slotRow(source, slot))) break;
    await releaseSlot(source, slot);
    try {
      await source.query('select pg_drop_replication_slot($1)', [slot]);
      droppedSlot = true;
      break;
    } catch (e: any) {
      if (e?.code === '42704') break; // undefined_object: dropped concurrently
      if (e?.code !== '55006' || attempt >= 20) throw e; // object_in_use: a walsender re-acquired it
    }
  }
  const r = await source.query('select 1 from pg_publication where pubname = $1', [publication]);
  if (r.rowCount) await source.query(`drop publication if exists ${quoteIdent(publication)}`);
  return { droppedSlot, droppedPublication: (r.rowCount ?? 0) > 0 };
}

export async function currentWalLsn(source: Queryable): Promise<string> {
  const r = await source.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn');
  return normalizeLsn(r.rows[0].lsn);
}

/** WAL the slot retains beyond its confirmed position, in bytes. */
export async function slotLagBytes(source: Queryable, slot: string): Promise<number> {
  const r = await source.query<{ lag: string | null }>(
    'select greatest(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::text as lag from pg_replication_slots where slot_name = $1',
    [slot],
  );
  if (r.rows.length === 0) throw new ShardctlError('NotFound', `replication slot ${slot} does not exist`, { slot });
  return Number(r.rows[0].lag ?? 0);
}

/**
 * WAL each of shardctl's slots on this server holds back: pg_current_wal_lsn() - restart_lsn,
 * what the server must keep on disk for the slot (not the apply's lag, which is measured from
 * confirmed_flush_lsn). A slot that never reserved WAL is left out.
 */
export async function shardctlSlotsRetainedBytes(source: Queryable): Promise<{ slot: string; retainedBytes: number }[]> {
  const r = await source.query<{ slot_name: string; retained: string }>(
    `select slot_name, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::text as retained
       from pg_replication_slots where slot_name like $1 and restart_lsn is not null order by slot_name`,
    [replicationNamePattern('')],
  );
  return r.rows.map((x) => ({ slot: x.slot_name, retainedBytes: Math.max(0, Number(x.retained)) }));
}

/** Bytes of source WAL written after `lsn` (the apply's lag). */
export async function walBytesSince(source: Queryable, lsn: string): Promise<number> {
  const r = await source.query<{ lag: string }>('select greatest(pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn), 0)::text as lag', [lsn]);
  return Number(r.rows[0].lag);
}
