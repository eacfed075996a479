// Clients loadgen and verify create for themselves when the caller injects none: read-only
// shard pools, a directory pool and per-shard S3 clients, all closed together.
import { hardenPool } from '../pg';
import { Pool } from 'pg';
import { S3Client } from '@aws-sdk/client-s3';
import { Config, shardByName } from '../config';
import { s3ClientFor } from '../s3';

export interface OwnedClients {
  directory(): Pool;
  shardPool(name: string): Pool;
  s3For(name: string): S3Client;
  close(): Promise<void>;
}

export { s3ClientFor };

export function ownedClients(
  config: Config,
  injected: { directory?: Pool; shardPool?: (name: string) => Pool; s3For?: (name: string) => S3Client } = {},
): OwnedClients {
  const pools: Pool[] = [];
  const shardPools = new Map<string, Pool>();
  const s3s = new Map<string, S3Client>();
  let directory = injected.directory;
  const readOnly = (dsn: string) => {
    const p = hardenPool(new Pool({ connectionString: dsn, max: 4, connectionTimeoutMillis: 5000, options: '-c default_transaction_read_only=on' }));
    pools.push(p);
    return p;
  };
  return {
    directory: () => (directory ??= readOnly(config.directory.dsn)),
    shardPool(name) {
      if (injected.shardPool) return injected.shardPool(name);
      let p = shardPools.get(name);
      if (!p) shardPools.set(name, (p = readOnly(shardByName(config, name).dsn)));
      return p;
    },
    s3For(name) {
      if (injected.s3For) return injected.s3For(name);
      let c = s3s.get(name);
      if (!c) s3s.set(name, (c = s3ClientFor(config, name)));
      return c;
    },
    async close() {
      await Promise.all(pools.map((p) => p.end().catch(() => {})));
      for (const c of s3s.values()) c.destroy();
    },
  };
}
