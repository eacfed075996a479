// Connections to the placement directory and the one place that turns "cannot reach it" into
// ShardctlError('DirectoryUnavailable'). Callers map errors here so operators see one clear line.
import { inTransaction } from '../pg';
import { openPool } from '../connections';
import { Pool, PoolClient, Client } from 'pg';
import { ShardctlError } from '../errors';
import type { Config } from '../config';

/** Anything that can run one query: a pool, a checked-out client, or a plain client. */
export type Queryable = Pool | PoolClient | Client;

export const DEFAULT_CONNECT_TIMEOUT_MS = 5000;

/** A pool on the directory that fails fast when the server is unreachable. */
export function openDirectoryPool(config: Config, opts: { max?: number; connectionTimeoutMillis?: number } = {}): Pool {
  // Hardened: client errors surface on the next use instead of crashing.
  return openPool(config.directory.dsn, { max: opts.max ?? 8, connectionTimeoutMillis: opts.connectionTimeoutMillis ?? DEFAULT_CONNECT_TIMEOUT_MS });
}

const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE']);

/** True for errors that mean "the server could not be reached or went away", not a bad query. */
export function isConnectionError(e: any): boolean {
  if (!e) return false;
  if (e instanceof ShardctlError) return false;
  if (CONNECTION_CODES.has(e.code)) return true;
  // 08xxx connection exceptions; 57P01-03 shutdown / cannot connect now; 53300 too many connections.
  if (typeof e.code === 'string' && (/^08/.test(e.code) || /^57P0[1-3]$/.test(e.code) || e.code === '53300')) return true;
  const msg = String(e.message ?? '');
  return /timeout exceeded when trying to connect|Connection terminated|connection timeout|Client has encountered a connection error|getaddrinfo/i.test(msg);
}

/** host:port of a DSN, never its password. */
export function dsnHost(dsn: string): string {
  try {
    const u = new URL(dsn);
    return `${u.hostname}:${u.port || '5432'}${u.pathname}`;
  } catch {
    return '(unparsable dsn)';
  }
}

export function directoryUnavailable(e: any, dsn?: string): ShardctlError {
  const where = dsn ? ` at ${dsnHost(dsn)}` : '';
  const why = String(e?.code ?? e?.message ?? e).split('\n')[0];
  return new ShardctlError(
    'DirectoryUnavailable',
    `placement directory unreachable${where} (${why}): placements and tenant creation wait until it is back`,
    { cause: why },
    true,
  );
}

/** Runs fn; a connection failure becomes DirectoryUnavailable, anything else passes through. */
export async function onDirectory<T>(fn: () => Promise<T>, dsn?: string): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (isConnectionError(e)) throw directoryUnavailable(e, dsn);
    throw e;
  }
}

/** The DSN a pool was built from, when known (for messages only). */
export function poolDsn(db: Queryable): string | undefined {
  const o: any = (db as any).options ?? (db as any).connectionParameters;
  if (o?.connectionString) return o.connectionString;
  if (o?.host) return `postgres://${o.host}:${o.port ?? 5432}/${o.database ?? ''}`;
  return undefined;
}

/** One transaction on the directory; an unreachable directory becomes DirectoryUnavailable. */
export function inDirectoryTransaction<T>(pool: Pool, fn: (c: PoolClient) => Promise<T>): Promise<T> {
  return onDirectory(() => inTransaction(pool, fn), poolDsn(pool));
}
