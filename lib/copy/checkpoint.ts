// Copy checkpoints: one row per (move, table) in the target's shardctl.move_progress, written in
// the same transaction as the batch it describes, so a checkpoint never claims rows that did not
// commit and committed rows are never re-counted. Resume contract: the next batch starts
// strictly after `lastKey` (source key order); `done` means every row of the unit that existed
// when the copy began is on the target (later changes arrive through change apply).
import type { Pool, PoolClient } from 'pg';
import type { Key } from './sql';
import { isLsn } from '../cdc/lsn';

export interface CopyCheckpoint {
  lastKey: Key | null;
  rowsCopied: number;
  /** COPY stream bytes of those rows (0 in checkpoints written before it was counted). */
  bytesCopied: number;
  batches: number;
  done: boolean;
  /**
   * With done: the source's WAL insert position read after the last source snapshot of this
   * table's copy was taken. A transaction whose commit comes after it was seen by no batch, so
   * its inserts cannot meet a copied row (lib/cdc/applier.ts, InsertsByCopy). Null: not recorded
   * (a copy by an older shardctl): every insert is an upsert.
   */
  doneAtLsn?: string | null;
}

export interface TableCopyProgress extends CopyCheckpoint {
  /** `schema.table`, unquoted, as in the stream name `copy:<schema>.<table>`. */
  table: string;
  updatedAt: Date;
}

export const EMPTY_CHECKPOINT: CopyCheckpoint = { lastKey: null, rowsCopied: 0, bytesCopied: 0, batches: 0, done: false };

export function parseCheckpoint(detail: any): CopyCheckpoint {
  return {
    lastKey: Array.isArray(detail?.lastKey) ? detail.lastKey.map(String) : null,
    rowsCopied: Number(detail?.rowsCopied ?? 0),
    bytesCopied: Number(detail?.bytesCopied ?? 0),
    batches: Number(detail?.batches ?? 0),
    done: detail?.done === true,
    doneAtLsn: detail?.done === true && isLsn(detail?.doneAtLsn) ? detail.doneAtLsn : null,
  };
}

/**
 * Inside the caller's target transaction: creates the row if absent and locks it, so two
 * copiers of the same move and table (a retried activity overlapping a slow one) serialise
 * and each batch continues from whatever the other committed.
 */
export async function lockCheckpoint(tx: PoolClient, moveId: string, stream: string): Promise<CopyCheckpoint> {
  await tx.query(`insert into shardctl.move_progress (move_id, stream, detail) values ($1, $2, $3) on conflict do nothing`, [
    moveId,
    stream,
    JSON.stringify(EMPTY_CHECKPOINT),
  ]);
  const r = await tx.query(`select detail from shardctl.move_progress where move_id = $1 and stream = $2 for update`, [moveId, stream]);
  return parseCheckpoint(r.rows[0].detail);
}

/** The committed checkpoint without locking it (the copy's choice of path at its start). */
export async function readCheckpoint(db: Pool | PoolClient, moveId: string, stream: string): Promise<CopyCheckpoint> {
  const r = await db.query(`select detail from shardctl.move_progress where move_id = $1 and stream = $2`, [moveId, stream]);
  return r.rows.length ? parseCheckpoint(r.rows[0].detail) : EMPTY_CHECKPOINT;
}

export async function writeCheckpoint(tx: PoolClient, moveId: string, stream: string, cp: CopyCheckpoint): Promise<void> {
  await tx.query(`update shardctl.move_progress set detail = $3, updated_at = now() where move_id = $1 and stream = $2`, [moveId, stream, JSON.stringify(cp)]);
}

/** Every table's copy checkpoint of a move, as the target has committed them. */
export async function copyProgress(target: Pool | PoolClient, moveId: string): Promise<TableCopyProgress[]> {
  const r = await target.query(`select stream, detail, updated_at from shardctl.move_progress where move_id = $1 and stream like 'copy:%' order by stream`, [
    moveId,
  ]);
  return r.rows.map((row) => ({ table: String(row.stream).slice('copy:'.length), updatedAt: row.updated_at, ...parseCheckpoint(row.detail) }));
}

/** Forgets a move's copy checkpoints (cancel, after the target rows are deleted). */
export async function clearCopyProgress(target: Pool | PoolClient, moveId: string): Promise<number> {
  const r = await target.query(`delete from shardctl.move_progress where move_id = $1 and stream like 'copy:%'`, [moveId]);
  return r.rowCount ?? 0;
}
