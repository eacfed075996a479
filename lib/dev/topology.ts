// The dev stack's topology: one source of truth for `shardctl dev up` and the test that checks
// temporal-dev.yml agrees with it. Pure data; safe anywhere.

export const SHARD_NAMES = ['shard-a', 'shard-b', 'shard-c'] as const;
export const PG_SERVERS = ['directory', ...SHARD_NAMES] as const;
/** `directory` or a dev shard's name (`dev up --shards N`: shard-a, shard-b, ... one letter each). */
export type PgServerName = string;

/** Shards a dev stack may have (`dev up --shards N`): one letter each, shard-a .. shard-z. */
export const MAX_DEV_SHARDS = 26;

/** The first `n` dev shard names: shard-a, shard-b, ...; the default stack is the first three. */
export function devShardNames(n: number): string[] {
  if (!Number.isInteger(n) || n < 1 || n > MAX_DEV_SHARDS) throw new RangeError(`a dev stack has 1..${MAX_DEV_SHARDS} shards, got ${n}`);
  return Array.from({ length: n }, (_, i) => `shard-${String.fromCharCode(97 + i)}`);
}

/** Default ports; all avoid the 5432/7233/8233/9000 defaults of system services. */
export const DEFAULT_PORTS = {
  temporal: 17233,
  temporalUi: 18233,
  s3: 19000,
  toxiproxy: 18474,
  pg: { directory: 15432, 'shard-a': 15433, 'shard-b': 15434, 'shard-c': 15435 } as Record<PgServerName, number>,
};

/** postgresql.conf settings every dev server runs with (CDC needs logical WAL and slots). */
export const PG_SETTINGS: Record<string, string> = {
  wal_level: 'logical',
  max_replication_slots: '32',
  max_wal_senders: '32',
  max_slot_wal_keep_size: '1GB',
  max_connections: '400',
  shared_buffers: '64MB',
  fsync: 'on',
  synchronous_commit: 'on',
  wal_sender_timeout: '30s',
};

export const PG_USER = 'shardctl';
export const PG_PASSWORD = 'shardctl-dev';
export const PG_DATABASE = 'shardctl';

export const TEMPORAL_NAMESPACE = 'default';
export const TEMPORAL_TASK_QUEUE = 'shardctl-moves';

/** Custom search attributes the move workflows keep current (DESIGN.md §6). */
export const SEARCH_ATTRIBUTES: Record<string, 'Keyword' | 'Int' | 'Text' | 'Datetime'> = {
  ShardctlUnit: 'Keyword',
  ShardctlSource: 'Keyword',
  ShardctlTarget: 'Keyword',
  ShardctlPhase: 'Keyword',
  ShardctlBlockedReason: 'Keyword',
};

export const S3_REGION = 'us-east-1';
export const S3_ACCESS_KEY = 'shardctl';
export const S3_SECRET_KEY = 'shardctl-dev-secret';

export function bucketFor(shard: string): string {
  return `shardctl-${shard}`;
}
