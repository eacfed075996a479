// node-pg emits 'error' on a client whose server connection dies (restart, failover, a
// terminated backend). Unhandled, that event kills the whole process — a worker, a router's
// host application. Every pool is hardened here: errors of idle and checked-out clients are
// swallowed at the event level and surface instead as the failure of the next query on them.
// Also the one place of the link settings (TCP keepalive, connect bounds) and of bounded sessions.
import type { ClientBase, Pool, PoolClient } from 'pg';
import { ShardctlError } from './errors';

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

/**
 * TCP settings of every connection to the fleet (pools, the apply session, the replication
 * stream), in this one place. Keepalive lets the kernel notice a peer gone without a FIN/RST (a
 * host powered off, a NAT that forgot the flow); it cannot notice a partition behind something
 * that keeps the TCP connection alive (a proxy, a load balancer), which is why the replication
 * stream has a receive deadline and the apply session bounded statements on top of it.
 */
export const LINK = {
  keepAlive: true,
  keepAliveInitialDelayMillis: 10_000,
  /** Connecting (TCP, startup, authentication) to a dedicated session gives up after this. */
  connectTimeoutMs: 10_000,
  /** A pool's wait for a client (a free one, or a new connection) gives up after this. */
  poolWaitTimeoutMs: 30_000,
} as const;

/** node-pg client settings for a dedicated session (not pooled) to a fleet server. */
export function sessionSettings(dsn: string, o: { applicationName: string; queryTimeoutMs?: number }) {
  return {
    connectionString: dsn,
    application_name: o.applicationName,
    keepAlive: LINK.keepAlive,
    keepAliveInitialDelayMillis: LINK.keepAliveInitialDelayMillis,
    connectionTimeoutMillis: LINK.connectTimeoutMs,
    query_timeout: o.queryTimeoutMs,
  };
}

/** node-pg's own words for a client-side timeout: a query with no answer, a connect that never finished. */
function isClientTimeout(e: unknown): boolean {
  return /^(Query read timeout|timeout expired|Connection terminated due to connection timeout|timeout exceeded when trying to connect)/.test(
    String((e as Error)?.message ?? ''),
  );
}

/**
 * The client with every query bounded client-side (node-pg's per-query query_timeout), for a
 * session that must never hang on a server that stopped answering. A timeout is reported as the
 * server's unavailability, naming `who` (a shard name, never a DSN), retryable; after one the
 * session is unusable (the unanswered query still occupies it), so every later query fails at
 * once and the caller must discard the client (release(true) / end).
 */
export function boundQueries<C extends ClientBase>(client: C, timeoutMs: number, who: string): C & { timedOut: boolean } {
  let timedOut: ShardctlError | null = null;
  const named = (e: unknown) => {
    if (timedOut) return timedOut;
    const n = nameTimeout(e, who, timeoutMs);
    if (n !== e) timedOut = n as ShardctlError;
    return n;
  };
  const query = (config: any, values?: any) => {
    if (timedOut) return Promise.reject(timedOut);
    const bounded =
      typeof config === 'string' ? { text: config, values, query_timeout: timeoutMs } : { ...config, query_timeout: config.query_timeout ?? timeoutMs };
    return (client.query as (c: unknown, v?: unknown) => Promise<unknown>)(bounded, values).catch((e: unknown) => {
      throw named(e);
    });
  };
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === 'query') return query;
      if (prop === 'timedOut') return timedOut !== null;
      const v = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  }) as C & { timedOut: boolean };
}

/** A client-side timeout error (node-pg's), named for `who` as boundQueries names it; other errors unchanged. */
export function nameTimeout(e: unknown, who: string, timeoutMs: number): unknown {
  if (!isClientTimeout(e)) return e;
  return new ShardctlError(
    'Unavailable',
    `${who} did not answer within ${timeoutMs} ms (a partition or a stuck server): the session is given up`,
    { server: who, timeoutMs },
    true,
  );
}
