// Whether a shard can hold a move's replication slot: the source streams the move's changes (the
// forward slot), the target streams them back during soak (the reverse slot, the way back). Both
// need wal_level=logical and a free slot under max_replication_slots; a move that found neither
// would retry its slot creation until an operator noticed. The reading is I/O, the verdict pure.
import type { Pool, PoolClient } from 'pg';

export interface ReplicationCapacity {
  walLevel: string;
  maxSlots: number;
  /** Slots of any kind on the server (they share max_replication_slots). */
  usedSlots: number;
}

export async function replicationCapacity(db: Pool | PoolClient): Promise<ReplicationCapacity> {
  const r = await db.query(
    `select current_setting('wal_level') as wal, current_setting('max_replication_slots')::int as max,
            (select count(*) from pg_catalog.pg_replication_slots)::int as used`,
  );
  return { walLevel: r.rows[0].wal, maxSlots: r.rows[0].max, usedSlots: r.rows[0].used };
}

/** Why `shard`, as the move's source (forward slot) or target (reverse slot), cannot hold its slot; empty when it can. */
export function replicationCapacityProblems(shard: string, side: 'source' | 'target', c: ReplicationCapacity): string[] {
  const slot = side === 'source' ? "the move's forward slot" : 'the reverse slot (the way back during soak)';
  const out: string[] = [];
  if (c.walLevel !== 'logical')
    out.push(`${side} ${shard} has wal_level=${c.walLevel}: ${slot} needs wal_level=logical (ALTER SYSTEM SET wal_level = logical, then restart it)`);
  if (c.maxSlots - c.usedSlots < 1)
    out.push(
      `${side} ${shard} has no free replication slot (${c.usedSlots} of max_replication_slots=${c.maxSlots} used): ${slot} needs one; raise max_replication_slots or drop orphaned slots (\`shardctl doctor\`)`,
    );
  return out;
}

/** The server's max_slot_wal_keep_size in bytes, or null when it sets none (-1). */
export async function walKeepLimitBytes(db: Pool | PoolClient): Promise<number | null> {
  const r = await db.query(
    `select case when current_setting('max_slot_wal_keep_size') = '-1' then null
                 else pg_size_bytes(current_setting('max_slot_wal_keep_size'))::text end as limit`,
  );
  return r.rows[0].limit === null ? null : Number(r.rows[0].limit);
}
