// Headroom reservations (table shardctl.reservations, owned here): a move in flight holds its
// unit's load on the shard the unit is not placed on — the target before the switch, the source
// (the way back) after it — so every headroom check counts it on both shards until the move ends.
// Taken once per move under the target's row lock, with the headroom check in the same
// transaction (two concurrent takers are serialised: the second sees the first); released exactly
// once (released_at is set by the one update that finds it open), in the transaction that records
// the move's end. A reservation whose workflow is gone stays open — `shardctl doctor` reports it —
// until the unit's next move (the same workflow id, so the old execution cannot be running) supersedes it.
import type { Pool } from 'pg';
import { ShardctlError } from '../errors';
import { inDirectoryTransaction, type Queryable } from './db';
import { moveTargetProblems, type HeldReservation } from './choose';
import { getResidency } from './policy';
import { shardLoad } from './shards';

export interface Reservation extends HeldReservation {
  source: string;
  target: string;
  workflowId: string;
  takenAt: string;
}

/** Move events after which the move holds nothing any more (recorded by the workflow's `record`). */
export const MOVE_END_ACTIONS: readonly string[] = ['retired', 'rolled-back', 'cancelled', 'failed'];

/**
 * Open reservations counted on the shard named by the SQL expression `shard` (e.g. `s.name` or `$1`):
 * those of moves to or from it whose unit is not placed on it now.
 */
export function openReservationsOn(shard: string): string {
  return `shardctl.reservations r
   where r.released_at is null and (r.target = ${shard} or r.source = ${shard})
     and not exists (select 1 from shardctl.units u where u.unit = r.unit and u.shard = ${shard})`;
}

/** The open reservations counted on `shard`, leaving out those of `exceptUnit` (a unit never competes with itself). */
export async function reservationsOn(db: Queryable, shard: string, exceptUnit?: string): Promise<HeldReservation[]> {
  const r = await db.query(`select r.move_id, r.unit, r.load from ${openReservationsOn('$1')} and r.unit is distinct from $2 order by r.taken_at, r.move_id`, [
    shard,
    exceptUnit ?? null,
  ]);
  return r.rows.map((x) => ({ moveId: x.move_id, unit: x.unit, load: Number(x.load) }));
}

const toReservation = (x: any): Reservation => ({
  moveId: x.move_id,
  unit: x.unit,
  source: x.source,
  target: x.target,
  load: Number(x.load),
  workflowId: x.workflow_id,
  takenAt: x.taken_at instanceof Date ? x.taken_at.toISOString() : String(x.taken_at),
});

/** Every reservation not yet released (doctor's view); none on a directory not yet migrated to have them. */
export async function listOpenReservations(db: Queryable): Promise<Reservation[]> {
  if (!(await db.query(`select to_regclass('shardctl.reservations') is not null as ok`)).rows[0].ok) return [];
  const r = await db.query(
    `select move_id, unit, source, target, load, workflow_id, taken_at from shardctl.reservations where released_at is null order by taken_at, move_id`,
  );
  return r.rows.map(toReservation);
}

export interface ReserveRequest {
  moveId: string;
  unit: string;
  source: string;
  target: string;
  /** The placement's epoch the move planned from: a unit changed since is refused. */
  epoch: number;
  workflowId: string;
  actor: string;
}

export type ReserveResult = { ok: true; reservation: Reservation; taken: boolean } | { ok: false; reasons: string[] };

/**
 * Takes the move's reservation on its target if the target still has headroom counting every other
 * open reservation; a second delivery for the same move returns the one it took. Refusals are reasons.
 */
export async function reserveHeadroom(pool: Pool, req: ReserveRequest, headroomFraction: number): Promise<ReserveResult> {
  return inDirectoryTransaction(pool, async (c) => {
    // Serialises every reservation onto the target (no key update: placements' foreign keys still pass).
    const locked = await c.query('select name from shardctl.shards where name = $1 for no key update', [req.target]);
    if (!locked.rowCount) return { ok: false as const, reasons: [`target ${req.target} is not in the directory's shard inventory`] };
    const mine = await c.query('select *, released_at is not null as released from shardctl.reservations where move_id = $1', [req.moveId]);
    if (mine.rowCount) {
      const x = mine.rows[0];
      if (x.released)
        return {
          ok: false as const,
          reasons: [`the reservation of move ${req.moveId} was already released at ${new Date(x.released_at).toISOString()}; a move reserves once`],
        };
      return { ok: true as const, reservation: toReservation(x), taken: false };
    }
    const other = await c.query('select move_id, target, workflow_id from shardctl.reservations where unit = $1 and released_at is null', [req.unit]);
    if (other.rowCount && other.rows[0].workflow_id === req.workflowId) {
      // The same workflow id runs one execution at a time, and this move's is running: the other
      // move's execution is gone (terminated, timed out) and can never release its reservation.
      await releaseReservation(c, other.rows[0].move_id, {
        actor: req.actor,
        reason: `superseded by move ${req.moveId} of workflow ${req.workflowId}: the move that took it no longer runs`,
      });
    } else if (other.rowCount) {
      const o = other.rows[0];
      return {
        ok: false as const,
        reasons: [
          `unit ${req.unit} already holds a headroom reservation of move ${o.move_id} (to ${o.target}); one move per unit at a time — if no move of it runs, \`shardctl doctor\` reports the reservation and its fix`,
        ],
      };
    }
    const p = await c.query('select shard, epoch, state, expected_load from shardctl.units where unit = $1', [req.unit]);
    const u = p.rows[0];
    if (!u || u.shard !== req.source || Number(u.epoch) !== req.epoch || u.state !== 'active') {
      return {
        ok: false as const,
        reasons: [
          `unit ${req.unit} changed since the plan: directory shows ${u ? `${u.shard} epoch ${u.epoch} ${u.state}` : 'no placement'}, planned from ${req.source} epoch ${req.epoch} active`,
        ],
      };
    }
    const load = Number(u.expected_load);
    const s = await shardLoad(c, req.target, { exceptUnit: req.unit });
    const reasons = s
      ? moveTargetProblems(s, req.unit, load, headroomFraction, await getResidency(c, req.unit))
      : [`target ${req.target} is not in the directory's shard inventory`];
    if (reasons.length) return { ok: false as const, reasons };
    const ins = await c.query(
      `insert into shardctl.reservations(move_id, unit, source, target, load, workflow_id) values ($1, $2, $3, $4, $5, $6)
       returning move_id, unit, source, target, load, workflow_id, taken_at`,
      [req.moveId, req.unit, req.source, req.target, load, req.workflowId],
    );
    await c.query(`insert into shardctl.audit(actor, action, unit, detail) values ($1, 'reservation.take', $2, $3)`, [
      req.actor,
      req.unit,
      JSON.stringify({ moveId: req.moveId, source: req.source, target: req.target, load }),
    ]);
    return { ok: true as const, reservation: toReservation(ins.rows[0]), taken: true };
  });
}

/**
 * Releases the move's reservation if it is open; true only for the call that released it (a
 * second release, or a move that never reserved, changes nothing). Run it in the transaction that
 * records the move's end, so the two commit together.
 */
export async function releaseReservation(db: Queryable, moveId: string, by: { actor: string; reason: string }): Promise<boolean> {
  if (!by.actor?.trim()) throw new ShardctlError('InvalidInput', 'releasing a reservation needs an actor');
  const r = await db.query(
    `update shardctl.reservations set released_at = now(), released_by = $2
      where move_id = $1 and released_at is null returning unit, source, target, load`,
    [moveId, by.actor],
  );
  if (!r.rowCount) return false;
  const x = r.rows[0];
  await db.query(`insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, 'reservation.release', $2, $3, $4)`, [
    by.actor,
    x.unit,
    JSON.stringify({ moveId, source: x.source, target: x.target, load: Number(x.load) }),
    by.reason,
  ]);
  return true;
}
