// The change stream's delta: the primary keys the applier wrote on the target since the move's
// last full comparison, recorded in the same target transaction as the rows (so "applied" and
// "recorded" cannot disagree, as with the applied LSN). Why it is enough under the fence: after a
// full comparison every row of the unit matched on both sides; afterwards only the stream writes
// the unit's rows on the target (its fence refuses everyone else) and every source change arrives
// through the stream, so a row that differs at the fence point is a row the stream touched.
//
// No apply transaction can slip an untracked change past a start: each apply transaction holds
// the delta lock shared from its BEGIN (deltaLockSql) and records its keys only if tracking is on
// once it holds the lock (deltaTrackingSql, the statement after it); a start takes the lock
// exclusively, so it waits for open apply transactions (their changes commit before the start,
// and the comparison that follows sees them), and every later one sees the start when it asks.
// Tracking cannot change while an apply transaction holds the lock, so asking at BEGIN is asking
// at commit, and a transaction applied with tracking off collects no keys at all.
import type { ClientBase, Pool } from 'pg';
import { escapeLiteral } from 'pg';
import { inTransaction } from '../pg';

const DELTA_LOCK_CLASS = 4213;
/** Keys one target transaction records at most; past it, it records that the delta overflowed. */
export const MAX_TRACKED_KEYS_PER_TRANSACTION = 50_000;
/** The table name of the overflow marker row. */
const OVERFLOW = '*';

const lockKey = (moveId: string, stream: string) => `${moveId}/${stream}`;

/** Statement taking the delta lock shared, for the apply transaction's BEGIN (a literal: it is sent with BEGIN as one simple query). */
export function deltaLockSql(moveId: string, stream: string): string {
  return `SELECT pg_catalog.pg_advisory_xact_lock_shared(${DELTA_LOCK_CLASS}, pg_catalog.hashtext(${escapeLiteral(lockKey(moveId, stream))}))`;
}

/** Whether tracking is on, as one column `tracking`: sent right after deltaLockSql, in the same simple query. */
export function deltaTrackingSql(moveId: string, stream: string): string {
  return `SELECT EXISTS (SELECT 1 FROM shardctl.move_delta_since s WHERE s.move_id OPERATOR(pg_catalog.=) ${escapeLiteral(moveId)} AND s.stream OPERATOR(pg_catalog.=) ${escapeLiteral(stream)}) AS tracking`;
}

/**
 * Starts (or restarts) tracking under `token` (the comparison's own): forgets what was recorded
 * and marks the start. A restart by a superseded delivery changes the token, so a cutover that
 * expects the comparison it knows compares the whole unit instead.
 */
export async function startDelta(pool: Pool, moveId: string, stream: string, token: string): Promise<void> {
  await inTransaction(pool, async (c) => {
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [DELTA_LOCK_CLASS, lockKey(moveId, stream)]);
    await c.query('delete from shardctl.move_delta where move_id = $1 and stream = $2', [moveId, stream]);
    await c.query(
      `insert into shardctl.move_delta_since(move_id, stream, since, token, since_snapshot) values ($1, $2, now(), $3, pg_catalog.pg_current_snapshot())
       on conflict (move_id, stream) do update set since = now(), token = excluded.token, since_snapshot = excluded.since_snapshot, validated = null`,
      [moveId, stream, token],
    );
  });
}

/** The token of the running tracking (null: none): a start under another token forgot what this one recorded. */
export async function deltaTokenOf(pool: Pool, moveId: string, stream: string): Promise<string | null> {
  const r = await pool.query<{ token: string | null }>('select token from shardctl.move_delta_since where move_id = $1 and stream = $2', [moveId, stream]);
  return r.rows[0]?.token ?? null;
}

/**
 * Records, beside the tracking, the ranges validation `name` found equal under `token`: only while
 * that tracking still runs (a restart under another token made them worthless, and this writes
 * nothing). The next attempt of the same validation, a new activity scheduling included, resumes
 * from them (readValidated); a heartbeat reaches Temporal only every few seconds, this row at once.
 */
export async function saveValidated(pool: Pool, moveId: string, stream: string, token: string, name: string, tables: unknown): Promise<void> {
  await pool.query('update shardctl.move_delta_since set validated = $4 where move_id = $1 and stream = $2 and token = $3', [
    moveId,
    stream,
    token,
    JSON.stringify({ name, tables }),
  ]);
}

/**
 * What validation `name` recorded under the tracking that runs now: its token and ranges, or
 * undefined (nothing recorded, another validation's, or tracking restarted since).
 */
export async function readValidated(pool: Pool, moveId: string, stream: string, name: string): Promise<{ token: string; tables: unknown } | undefined> {
  const r = await pool.query<{ token: string | null; validated: { name?: unknown; tables?: unknown } | null }>(
    'select token, validated from shardctl.move_delta_since where move_id = $1 and stream = $2',
    [moveId, stream],
  );
  const row = r.rows[0];
  if (!row?.token || !row.validated || row.validated.name !== name) return undefined;
  return { token: row.token, tables: row.validated.tables };
}

/**
 * Records the keys a target transaction wrote (table -> JSON arrays of the key's text values), if
 * tracking is on; `overflow` records that there were too many to list. Inside the apply
 * transaction, which holds the delta lock since its BEGIN.
 */
export async function recordTouched(client: ClientBase, moveId: string, stream: string, touched: Map<string, Set<string>>, overflow: boolean): Promise<void> {
  const tables: string[] = [];
  const keys: string[] = [];
  for (const [t, ks] of touched) {
    for (const k of ks) {
      tables.push(t);
      keys.push(k);
    }
  }
  if (overflow) {
    tables.push(OVERFLOW);
    keys.push('overflow');
  }
  if (!keys.length) return;
  await client.query({
    name: 'shardctl_cdc_record_delta',
    text: `insert into shardctl.move_delta(move_id, stream, tbl, key)
           select $1, $2, u.t, u.k from unnest($3::text[], $4::text[]) as u(t, k)
            where exists (select 1 from shardctl.move_delta_since s where s.move_id = $1 and s.stream = $2)
           on conflict do nothing`,
    values: [moveId, stream, tables, keys],
  });
}

export type Delta =
  | { tracked: false; why: string }
  | {
      tracked: true;
      total: number;
      tables: Map<string, string[]>;
      overflow: boolean;
      /** When tracking started: seconds since the epoch on the database's clock. */ since: string;
      /** The start's snapshot (pg_snapshot text; null from an older shardctl): what committed after it is new. */
      sinceSnapshot: string | null;
    };

/**
 * The recorded delta, table by table, when tracking started under the expected token (`'any'`:
 * whichever start). `overflow` (and no keys) when it holds more than `cap` keys, or a transaction
 * recorded that it had too many: the caller compares the whole unit instead.
 */
export async function readDelta(pool: Pool, moveId: string, stream: string, cap: number, expect: { token: string } | 'any'): Promise<Delta> {
  const m = await pool.query<{ token: string | null; since: string; snap: string | null }>(
    'select token, extract(epoch from since)::text as since, since_snapshot::text as snap from shardctl.move_delta_since where move_id = $1 and stream = $2',
    [moveId, stream],
  );
  const since = m.rows[0]?.since;
  const sinceSnapshot = m.rows[0]?.snap ?? null;
  if (!m.rowCount) return { tracked: false, why: 'no delta tracked' };
  if (expect !== 'any' && m.rows[0].token !== expect.token) return { tracked: false, why: 'the delta was restarted after the comparison the move knows' };
  const n = await pool.query<{ n: string; overflow: boolean }>(
    'select count(*) as n, bool_or(tbl = $3) as overflow from shardctl.move_delta where move_id = $1 and stream = $2',
    [moveId, stream, OVERFLOW],
  );
  const total = Number(n.rows[0].n);
  if (total > cap || n.rows[0].overflow) return { tracked: true, total, tables: new Map(), overflow: true, since, sinceSnapshot };
  const r = await pool.query<{ tbl: string; keys: string[] }>(
    'select tbl, array_agg(key order by key) as keys from shardctl.move_delta where move_id = $1 and stream = $2 group by tbl',
    [moveId, stream],
  );
  return { tracked: true, total, tables: new Map(r.rows.map((x) => [x.tbl, x.keys])), overflow: false, since, sinceSnapshot };
}

/** Forgets the move's delta on this shard (with its progress, at cleanup). */
export async function forgetDelta(db: ClientBase | Pool, moveId: string): Promise<void> {
  await db.query('delete from shardctl.move_delta where move_id = $1', [moveId]);
  await db.query('delete from shardctl.move_delta_since where move_id = $1', [moveId]);
}
