// Fence operations on one shard. A fence change takes the unit's advisory lock exclusively, so
// it waits for every in-flight writer of the unit and, once it returns, no write under an
// older state can still commit (writers hold the same lock shared; see schema.ts).
import type { Pool, PoolClient } from 'pg';
import { FENCE_LOCK_CLASS } from './schema';

export interface FenceState {
  unit: string;
  epoch: number;
  owned: boolean;
  frozen: boolean;
}

export async function getUnitFence(db: Pool | PoolClient, unit: string): Promise<FenceState | undefined> {
  const r = await db.query('select unit, epoch, owned, frozen from shardctl.fence where unit = $1', [unit]);
  if (r.rowCount === 0) return undefined;
  const row = r.rows[0];
  return { unit: row.unit, epoch: Number(row.epoch), owned: row.owned, frozen: row.frozen };
}

/**
 * Sets the unit's fence; returns after commit, when every older writer has finished.
 * `expect`, when given, is a compare-and-set guard on the current fence (a mismatch returns
 * the current state without changing anything). Epochs never go down.
 */
export async function setUnitFence(
  pool: Pool,
  next: FenceState,
  opts: { expect?: Partial<FenceState> | 'absent'; lockTimeoutMs?: number } = {},
): Promise<{ ok: boolean; current: FenceState | undefined; waitedMs: number }> {
  const c = await pool.connect();
  try {
    await c.query('begin');
    if (opts.lockTimeoutMs) await c.query(`select set_config('lock_timeout', $1, true)`, [`${opts.lockTimeoutMs}ms`]);
    const t0 = Date.now();
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [FENCE_LOCK_CLASS, next.unit]);
    const waitedMs = Date.now() - t0;
    const current = await getUnitFence(c, next.unit);
    const e = opts.expect;
    const mismatch =
      e === 'absent'
        ? current !== undefined
        : e !== undefined && (!current || Object.entries(e).some(([k, v]) => (current as any)[k] !== v));
    if (mismatch || (current && next.epoch < current.epoch)) {
      await c.query('rollback');
      return { ok: false, current, waitedMs };
    }
    await c.query(
      `insert into shardctl.fence(unit, epoch, owned, frozen, updated_at) values ($1, $2, $3, $4, now())
       on conflict (unit) do update set epoch = excluded.epoch, owned = excluded.owned, frozen = excluded.frozen, updated_at = now()`,
      [next.unit, next.epoch, next.owned, next.frozen],
    );
    await c.query('commit');
    return { ok: true, current: next, waitedMs };
  } catch (err) {
    await c.query('rollback').catch(() => {});
    throw err;
  } finally {
    c.release();
  }
}
