// node-pg emits 'error' on a client whose server connection dies (restart, failover, a
// terminated backend). Unhandled, that event kills the whole process — a worker, a router's
// host application. Every pool is hardened here: errors of idle and checked-out clients are
// swallowed at the event level and surface instead as the failure of the next query on them.
import type { Pool } from 'pg';

const noop = () => {};

export function hardenPool<P extends Pool>(pool: P): P {
  pool.on('error', noop);
  pool.on('connect', (client) => {
    client.on('error', noop);
  });
  return pool;
}
