// Clients loadgen and verify create for themselves when the caller injects none: read-only
// shard pools, a directory pool and per-shard S3 clients, all closed together.
import type { Pool } from 'pg';
import type { S3Client } from '@aws-sdk/client-s3';
import type { Config } from '../config';
import { createConnections } from '../connections';
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
  const own = createConnections(config, { max: 4, connectionTimeoutMillis: 5000, readOnly: true });
  return {
    directory: () => injected.directory ?? own.directoryPool(),
    shardPool: (name) => (injected.shardPool ?? own.shardPool)(name),
    s3For: (name) => (injected.s3For ?? own.s3For)(name),
    close: () => own.close(),
  };
}
