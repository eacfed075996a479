// node-pg emits 'error' on a client whose server connection dies (restart, failover, a
// terminated backend). Unhandled, that event kills the whole process — a worker, a router's
// host application. Every pool is hardened here: errors of idle and checked-out clients are
// swallowed at the event level and surface instead as the failure of the next query on them.
import type { Pool, PoolClient } from 'pg';

const noop = () => {};

export function hardenPool<P extends Pool>(pool: P): P {
  pool.on('error', noop);
  pool.on('connect', (client) => {
    client.on('error', noop);
  });
  return pool;
}

/** Runs fn in one transaction on a client of the pool: commit on success, rollback on error. */
export async function inTransaction<T>(pool: Pool, fn: (c: PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  try {
    await c.query('begin');
    const out = await fn(c);
    await c.query('commit');
    return out;
  } catch (e) {
    await c.query('rollback').catch(() => {});
    throw e;
  } finally {
    c.release();
  }
}
