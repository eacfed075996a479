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

/**
 * Runs fn in one transaction on a client of the pool: commit on success, rollback on error. A
 * client whose rollback fails too (a query timeout, a dead or blackholed connection) is discarded:
 * its connection may still carry the unanswered query, and the next user would wait behind it.
 */
export async function inTransaction<T>(pool: Pool, fn: (c: PoolClient) => Promise<T>): Promise<T> {
  const c = await pool.connect();
  let broken = false;
  try {
    await c.query('begin');
    const out = await fn(c);
    await c.query('commit');
    return out;
  } catch (e) {
    await c.query('rollback').catch(() => (broken = true));
    throw e;
  } finally {
    c.release(broken);
  }
}
