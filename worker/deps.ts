// The dependencies activities are built from: config plus lazily created pools and S3 clients.
// Workers resolve shard connections from config; workflows only ever name shards.
import { hardenPool } from '../lib/pg';
import { Pool } from 'pg';
import { S3Client } from '@aws-sdk/client-s3';
import { Config, shardByName } from '../lib/config';
import { s3ClientFor } from '../lib/s3';

export interface Deps {
  config: Config;
  shardPool(name: string): Pool;
  directoryPool(): Pool;
  s3For(shard: string): S3Client;
  /** Fault hook: called at named fault points; the crash suite makes it SIGKILL the worker. */
  faultPoint(name: string): Promise<void>;
  close(): Promise<void>;
}

export function createDeps(config: Config, opts: { faultPoint?: (name: string) => Promise<void> } = {}): Deps {
  const pools = new Map<string, Pool>();
  const s3s = new Map<string, S3Client>();
  const pool = (key: string, dsn: string) => {
    let p = pools.get(key);
    if (!p) {
      // application_name marks shardctl's own data-plane sessions (see lib/shard/write-audit.ts).
      p = hardenPool(new Pool({ connectionString: dsn, max: 10, idleTimeoutMillis: 30_000, application_name: 'shardctl-worker' }));
      pools.set(key, p);
    }
    return p;
  };
  return {
    config,
    shardPool: (name) => pool(`shard:${name}`, shardByName(config, name).dsn),
    directoryPool: () => pool('directory', config.directory.dsn),
    s3For(name) {
      let c = s3s.get(name);
      if (!c) s3s.set(name, (c = s3ClientFor(config, name)));
      return c;
    },
    faultPoint: opts.faultPoint ?? (async () => {}),
    async close() {
      await Promise.all([...pools.values()].map((p) => p.end().catch(() => {})));
      for (const c of s3s.values()) c.destroy();
    },
  };
}
