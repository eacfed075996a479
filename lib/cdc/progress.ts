// The applied-LSN checkpoint in the target's shardctl.move_progress, written in the same target
// transaction as the rows it describes, so "applied" and "recorded" can never disagree.
// Invariant: the stored LSN only moves forward; a write that would move it back fails the transaction.
import type { ClientBase, Pool } from 'pg';
import { ShardctlError } from '../errors';
import { forgetDelta } from './delta';

export async function readAppliedLsn(client: ClientBase, moveId: string, stream: string): Promise<string | null> {
  const r = await client.query<{ lsn: string | null }>('select lsn::text as lsn from shardctl.move_progress where move_id = $1 and stream = $2', [
    moveId,
    stream,
  ]);
  return r.rows[0]?.lsn ?? null;
}

/** Must run inside the apply transaction. `source` says what vouches for the position. */
export async function writeAppliedLsn(client: ClientBase, moveId: string, stream: string, lsn: string, source: 'commit' | 'keepalive'): Promise<void> {
  const r = await client.query({
    name: 'shardctl_cdc_write_progress',
    text: `insert into shardctl.move_progress as p (move_id, stream, lsn, detail, updated_at)
             values ($1, $2, $3::pg_lsn, jsonb_build_object('kind', 'cdc-apply', 'by', $4::text), now())
             on conflict (move_id, stream) do update
               set lsn = excluded.lsn, detail = p.detail || excluded.detail, updated_at = now()
             where p.lsn is null or p.lsn <= excluded.lsn`,
    values: [moveId, stream, lsn, source],
  });
  if (r.rowCount !== 1) {
    throw new ShardctlError(
      'Conflict',
      `applied LSN of move ${moveId} stream ${stream} is already past ${lsn}: another apply session advanced it`,
      { moveId, stream, lsn },
      true,
    );
  }
}

/**
 * Where reverse replication starts (the next owner's WAL position at the switch); the first record
 * stands. In the same statement, reverse replication's delta starts (lib/cdc/delta.ts): the two
 * sides were equal at the switch, so a rollback compares only what came back. Only the first
 * record starts it, and nothing restarts it: every reverse apply session runs after this.
 */
export async function recordReverseStart(pool: Pool, moveId: string, lsn: string): Promise<void> {
  await pool.query(
    `with started as (
       insert into shardctl.move_progress(move_id, stream, lsn, detail) values ($1, 'reverse', $2, '{"startedAtSwitch":true}')
       on conflict (move_id, stream) do nothing returning move_id)
     insert into shardctl.move_delta_since(move_id, stream, since, token)
       select move_id, 'reverse', now(), 'switch' from started
     on conflict (move_id, stream) do nothing`,
    [moveId, lsn],
  );
}

/** True when a move has any progress recorded on this shard (a resumed move, not a leftover). */
export async function hasMoveProgress(pool: Pool, moveId: string): Promise<boolean> {
  const r = await pool.query('select 1 from shardctl.move_progress where move_id = $1 limit 1', [moveId]);
  return (r.rowCount ?? 0) > 0;
}

/** True when the stream has a progress row on this shard. */
export async function hasStreamProgress(pool: Pool, moveId: string, stream: string): Promise<boolean> {
  const r = await pool.query('select 1 from shardctl.move_progress where move_id = $1 and stream = $2', [moveId, stream]);
  return (r.rowCount ?? 0) > 0;
}

/** Forgets every progress row of a move on this shard, and its change delta (cleanup after cancel, rollback, retire). */
export async function forgetMoveProgress(pool: Pool, moveId: string): Promise<void> {
  await pool.query('delete from shardctl.move_progress where move_id = $1', [moveId]);
  await forgetDelta(pool, moveId);
}
