// The directory's move records (shardctl.moves) and the audit entries that describe a move.
// Operator identities and the directory's own clock live here, so the reported write pause
// includes any time a unit stayed frozen while a worker was dead.
import type { Pool } from 'pg';
import { inDirectoryTransaction, type Queryable } from './db';
import { MOVE_END_ACTIONS, releaseReservation } from './reservations';

export interface MoveEvent {
  moveId: string;
  unit: string;
  source: string;
  target: string;
  workflowId: string;
  action: string;
  actor: string;
  status: string;
  reason?: string;
  detail?: Record<string, unknown>;
}

/**
 * Upserts the move record and appends one audit entry `move.<action>`. `idem` (derived from the
 * activity execution) makes a redelivered event a no-op instead of a duplicate audit row. An event
 * that ends the move (MOVE_END_ACTIONS) releases its headroom reservation in the same transaction.
 */
export async function recordMoveEvent(pool: Pool, e: MoveEvent, idem: string | null): Promise<void> {
  await inDirectoryTransaction(pool, async (db) => {
    await db.query(
      `insert into shardctl.moves(move_id, unit, source, target, workflow_id, status, started_by, detail)
       values ($1, $2, $3, $4, $5, $6, $7, $8)
       on conflict (move_id) do update set status = excluded.status, updated_at = now(),
         detail = shardctl.moves.detail || excluded.detail`,
      [e.moveId, e.unit, e.source, e.target, e.workflowId, e.status, e.actor, JSON.stringify(e.detail ?? {})],
    );
    await db.query(
      `insert into shardctl.audit(actor, action, unit, detail, reason, idem) values ($1, $2, $3, $4, $5, $6)
       on conflict (idem) where idem is not null do nothing`,
      [e.actor, `move.${e.action}`, e.unit, JSON.stringify({ moveId: e.moveId, ...(e.detail ?? {}) }), e.reason ?? null, idem],
    );
    if (MOVE_END_ACTIONS.includes(e.action)) await releaseReservation(db, e.moveId, { actor: e.actor, reason: `move ${e.action}` });
  });
}

/**
 * The write pause as the directory saw it: from the last freeze to the switch of this move, both
 * stamped by the directory's clock. Unlike a timer in one attempt, it includes any time the unit
 * stayed frozen because a worker died mid-cutover.
 */
export async function measuredPauseMs(db: Queryable, unit: string, moveId: string, switchAction: string): Promise<number | null> {
  const r = await db.query(
    `select round(extract(epoch from (max(at) filter (where action = $3) - max(at) filter (where action = 'freeze'))) * 1000)::bigint as ms
       from shardctl.audit where unit = $1 and detail->>'moveId' = $2 and action in ('freeze', $3)`,
    [unit, moveId, switchAction],
  );
  const ms = r.rows[0]?.ms;
  return ms === null || ms === undefined ? null : Number(ms);
}

/**
 * How long the unit has been frozen by this move's latest freeze, on the directory's clock (now()
 * minus that freeze's audit entry; a takeover is a refreeze and keeps it). Null without a freeze.
 */
export async function frozenForMs(db: Queryable, unit: string, moveId: string): Promise<number | null> {
  const r = await db.query(
    `select round(extract(epoch from (now() - max(at))) * 1000)::bigint as ms
       from shardctl.audit where unit = $1 and detail->>'moveId' = $2 and action = 'freeze'`,
    [unit, moveId],
  );
  const ms = r.rows[0]?.ms;
  return ms === null || ms === undefined ? null : Number(ms);
}

/** The detail of this move's switch audit entry (the switch's own record), if it switched. */
export async function switchDetail(db: Queryable, unit: string, moveId: string, switchAction: string): Promise<Record<string, unknown> | undefined> {
  const r = await db.query(`select detail from shardctl.audit where unit = $1 and action = $2 and detail->>'moveId' = $3 order by id desc limit 1`, [
    unit,
    switchAction,
    moveId,
  ]);
  return r.rows[0]?.detail ?? undefined;
}

/** The audit actions after which a move holds nothing on either shard any more (its way back included). */
export const MOVE_END_AUDIT_ACTIONS = ['move.retired', 'move.cancelled', 'move.failed', 'move.rolled-back'] as const;

export interface MoveInFlight {
  moveId: string;
  unit: string;
  source: string;
  target: string;
  /** The phase its last recorded event saw. */
  status: string;
}

/**
 * Moves onto or off `shard` that have not ended (no retire, cancel, failure or rollback recorded):
 * a move in soak still has its source as the way back. A move whose workflow was terminated
 * outside shardctl never records its end and stays here until an operator reconciles it.
 */
export async function movesInFlight(db: Queryable, shard: string): Promise<MoveInFlight[]> {
  const r = await db.query(
    `select m.move_id, m.unit, m.source, m.target, m.status from shardctl.moves m
      where (m.source = $1 or m.target = $1)
        and not exists (select 1 from shardctl.audit a where a.unit = m.unit and a.detail->>'moveId' = m.move_id and a.action = any($2::text[]))
      order by m.created_at`,
    [shard, [...MOVE_END_AUDIT_ACTIONS]],
  );
  return r.rows.map((x) => ({ moveId: x.move_id, unit: x.unit, source: x.source, target: x.target, status: x.status }));
}

/** What the last unthrottled table copies took, from their `move.copied` audit entries. */
export interface MeasuredCopies {
  /** How many moves' copies were summed (0: none measured yet). */
  moves: number;
  rows: number;
  bytes: number;
  seconds: number;
}

/**
 * The copy throughput moves have measured: the sums of the newest `limit` `move.copied` entries
 * whose copy ran unthrottled and unpaused (those measure the throttle or the pause, not the fleet).
 */
export async function measuredCopies(db: Queryable, limit = 20): Promise<MeasuredCopies> {
  const r = await db.query(
    `select count(*) as moves, coalesce(sum((detail->>'rows')::bigint), 0) as rows, coalesce(sum((detail->>'bytes')::bigint), 0) as bytes,
            coalesce(sum((detail->>'seconds')::double precision), 0) as seconds
       from (select detail from shardctl.audit
              where action = 'move.copied' and coalesce((detail->>'rowsPerSecond')::bigint, 0) = 0 and detail->'paused' is null
                and (detail->>'seconds')::double precision > 0
              order by id desc limit $1) c`,
    [limit],
  );
  const x = r.rows[0];
  return { moves: Number(x.moves), rows: Number(x.rows), bytes: Number(x.bytes), seconds: Number(x.seconds) };
}
