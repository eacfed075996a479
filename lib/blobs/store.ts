// The blob manifest recorded on the TARGET shard (table shardctl.blob_manifest): what the copy
// phase put there, per move. recordManifest replaces a move's manifest atomically, so a resumed
// or repeated copy never leaves a mix of two runs.
import { inTransaction } from '../pg';
import type { Pool } from 'pg';
import { ShardctlError } from '../errors';
import type { ManifestEntry } from './manifest';

const DDL = `
create schema if not exists shardctl;
create table if not exists shardctl.blob_manifest (
  move_id text not null,
  key text not null,
  size bigint not null check (size >= 0),
  sha256 text not null,
  primary key (move_id, key)
);`;

const INSERT_CHUNK = 5000;
const ensured = new WeakSet<Pool>();

/** Idempotent, and safe when several workers race: "if not exists" alone is not (pg_type unique). */
export async function ensureManifestTable(pool: Pool): Promise<void> {
  await inTransaction(pool, async (c) => {
    await c.query(`select pg_advisory_xact_lock(hashtext('shardctl.blob_manifest ddl'))`);
    await c.query(DDL);
  });
  ensured.add(pool);
}

function checkMoveId(moveId: unknown): string {
  if (typeof moveId !== 'string' || moveId.length === 0 || moveId.length > 200) {
    throw new ShardctlError('InvalidInput', `invalid move id ${JSON.stringify(String(moveId).slice(0, 80))}`);
  }
  return moveId;
}

/** Replaces the move's manifest with entries, in one transaction. */
export async function recordManifest(pool: Pool, moveId: string, entries: readonly ManifestEntry[]): Promise<void> {
  checkMoveId(moveId);
  const seen = new Set<string>();
  for (const e of entries) {
    if (seen.has(e.key)) throw new ShardctlError('InvalidInput', `manifest lists key ${JSON.stringify(e.key)} twice`);
    if (!Number.isSafeInteger(e.size) || e.size < 0 || !/^[0-9a-f]{64}$/.test(e.sha256)) {
      throw new ShardctlError('InvalidInput', `bad manifest entry for key ${JSON.stringify(e.key)}`);
    }
    seen.add(e.key);
  }
  if (!ensured.has(pool)) await ensureManifestTable(pool);
  await inTransaction(pool, async (c) => {
    // Two deliveries of the same copy may record at once: serialize them per move.
    await c.query(`select pg_advisory_xact_lock(hashtext('blob_manifest:' || $1))`, [moveId]);
    await c.query('delete from shardctl.blob_manifest where move_id = $1', [moveId]);
    for (let i = 0; i < entries.length; i += INSERT_CHUNK) {
      const chunk = entries.slice(i, i + INSERT_CHUNK);
      await c.query(
        `insert into shardctl.blob_manifest (move_id, key, size, sha256)
         select $1, k, s, h from unnest($2::text[], $3::bigint[], $4::text[]) as t(k, s, h)`,
        [moveId, chunk.map((e) => e.key), chunk.map((e) => String(e.size)), chunk.map((e) => e.sha256)],
      );
    }
  });
}

/** The recorded manifest of a move, by key in byte order ([] if none was recorded). */
export async function loadManifest(pool: Pool, moveId: string): Promise<ManifestEntry[]> {
  checkMoveId(moveId);
  if (!ensured.has(pool)) await ensureManifestTable(pool);
  const r = await pool.query<{ key: string; size: string; sha256: string }>(
    'select key, size, sha256 from shardctl.blob_manifest where move_id = $1 order by key collate "C"',
    [moveId],
  );
  return r.rows.map((row) => ({ key: row.key, size: Number(row.size), sha256: row.sha256 }));
}

/** Forgets a move's manifest (cancel/retire cleanup). Idempotent. */
export async function deleteManifest(pool: Pool, moveId: string): Promise<number> {
  checkMoveId(moveId);
  if (!ensured.has(pool)) await ensureManifestTable(pool);
  const r = await pool.query('delete from shardctl.blob_manifest where move_id = $1', [moveId]);
  return r.rowCount ?? 0;
}
