// Brings the directory to the current schema and registers the config's shards. Idempotent and
// safe to run concurrently (migrations run under an advisory lock; sync only inserts missing).
// What it changed is audited under the operator of the verb that ran it: `directory.migrate` for
// the migrations this call applied (none: no entry), `shard.register` for the shards it added.
import type { Pool } from 'pg';
import type { Config } from '../config';
import { migrateDirectory } from './schema';
import { CONFIG_SYNC, syncShardsFromConfig, type DirectoryOperator } from './shards';
import { onDirectory, poolDsn } from './db';
import { appendAudit } from './audit';

export async function ensureDirectory(
  pool: Pool,
  config: Config,
  operator: DirectoryOperator = CONFIG_SYNC,
): Promise<{ migrated: number[]; shardsAdded: string[] }> {
  const migrated = await onDirectory(() => migrateDirectory(pool), poolDsn(pool) ?? config.directory.dsn);
  if (migrated.length) await appendAudit(pool, { ...operator, action: 'directory.migrate', unit: null, detail: { migrated } });
  const shardsAdded = await syncShardsFromConfig(pool, config, operator);
  return { migrated, shardsAdded };
}
