// Brings the directory to the current schema and registers the config's shards. Idempotent and
// safe to run concurrently (migrations run under an advisory lock; sync only inserts missing).
import type { Pool } from 'pg';
import type { Config } from '../config';
import { migrateDirectory } from './schema';
import { syncShardsFromConfig } from './shards';
import { onDirectory, poolDsn } from './db';

export async function ensureDirectory(pool: Pool, config: Config): Promise<{ migrated: number[]; shardsAdded: string[] }> {
  const migrated = await onDirectory(() => migrateDirectory(pool), poolDsn(pool) ?? config.directory.dsn);
  const shardsAdded = await syncShardsFromConfig(pool, config);
  return { migrated, shardsAdded };
}
