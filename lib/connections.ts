// The one factory for connections to the fleet: per-shard pools, a directory pool and per-shard
// S3 clients, created lazily from config and closed together. The worker, the CLI verbs,
// loadgen, tools and tests all build theirs here, so pool settings (hardening against dropped
// connections, timeouts, the application_name the write audit relies on) are set in one place.
import { Pool } from 'pg';
import type { S3Client } from '@aws-sdk/client-s3';
import { hardenPool, LINK } from './pg';
import { Config, shardByName } from './config';
import { s3ClientFor } from './s3';

export interface Connections {
  shardPool(name: string): Pool;
  directoryPool(): Pool;
  s3For(shard: string): S3Client;
  close(): Promise<void>;
}

export interface ConnectionOptions {
  /** Names the sessions: 'shardctl-…' is reserved for shardctl's own data plane, whose sessions register themselves (lib/shard/write-audit.ts). */
  applicationName?: string;
  /** Connections per pool. */
  max?: number;
  /** How long getting a client may take (waiting for a free one, or connecting); default LINK.poolWaitTimeoutMs. */
  connectionTimeoutMillis?: number;
  /** Client-side limit on one query (node-pg's query_timeout). */
  queryTimeoutMs?: number;
  /** Server-side limit on one statement (statement_timeout, set at connect). */
  statementTimeoutMs?: number;
  /** TCP keepalive's first probe after this idle time (default LINK's): a dead peer is noticed without a query timing out. */
  keepAliveInitialDelayMs?: number;
  /** Sessions refuse writes (loadgen verify, read-only verbs). */
  readOnly?: boolean;
}

export function openPool(dsn: string, opts: ConnectionOptions = {}): Pool {
  return hardenPool(
    new Pool({
      connectionString: dsn,
      max: opts.max ?? 10,
      idleTimeoutMillis: 30_000,
      connectionTimeoutMillis: opts.connectionTimeoutMillis ?? LINK.poolWaitTimeoutMs,
      keepAlive: LINK.keepAlive,
      keepAliveInitialDelayMillis: opts.keepAliveInitialDelayMs ?? LINK.keepAliveInitialDelayMillis,
      query_timeout: opts.queryTimeoutMs,
      statement_timeout: opts.statementTimeoutMs,
      application_name: opts.applicationName,
      options: opts.readOnly ? '-c default_transaction_read_only=on' : undefined,
    }),
  );
}

export function createConnections(config: Config, opts: ConnectionOptions = {}): Connections {
  const pools = new Map<string, Pool>();
  const s3s = new Map<string, S3Client>();
  const pool = (key: string, dsn: string) => {
    let p = pools.get(key);
    if (!p) pools.set(key, (p = openPool(dsn, opts)));
    return p;
  };
  return {
    shardPool: (name) => pool(`shard:${name}`, shardByName(config, name).dsn),
    directoryPool: () => pool('directory', config.directory.dsn),
    s3For(name) {
      let c = s3s.get(name);
      if (!c) s3s.set(name, (c = s3ClientFor(config, name)));
      return c;
    },
    async close() {
      const all = [...pools.values()];
      pools.clear();
      await Promise.all(all.map((p) => p.end().catch(() => {})));
      for (const c of s3s.values()) c.destroy();
      s3s.clear();
    },
  };
}

/** The same server and credentials as `dsn`, database `database`. */
export function dsnForDatabase(dsn: string, database: string): string {
  const url = new URL(dsn);
  url.pathname = `/${database}`;
  return url.toString();
}

/**
 * Creates database `database` on the server of `dsn` unless it exists (one created meanwhile by
 * another process is not an error) and returns its DSN: scratch databases beside a shard's own
 * (the fence suite's and the fence bench's per implementation).
 */
export async function ensureDatabase(dsn: string, database: string): Promise<string> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(database)) throw new Error(`database name ${JSON.stringify(database)}: lower-case letters, digits and _`);
  const admin = openPool(dsn, { max: 1 });
  try {
    const have = await admin.query('select 1 from pg_database where datname = $1', [database]);
    if (!have.rowCount) await admin.query(`create database ${database}`).catch((e) => (e?.code === '42P04' ? undefined : Promise.reject(e)));
  } finally {
    await admin.end();
  }
  return dsnForDatabase(dsn, database);
}
