// One apply session per (move, stream) on the target: a session advisory lock, taken before the
// progress row is read. The newest session wins: a previous holder (a worker that is gone but whose
// connection lingers, or a stale activity attempt) is terminated, so it can no longer commit.
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClientBase, Pool } from 'pg';
import { createHash } from 'node:crypto';
import { ShardctlError } from '../errors';

const APPLY_LOCK_CLASS = 4212;

/** The apply lock's key for a move's stream (the one place it is derived). */
export function applyLockKey(moveId: string, stream: string): string {
  return `${moveId}/${stream}`;
}

/** application_name of an apply session: lets a takeover recognise the holder as one of ours for this key. */
export function applySessionTag(key: string): string {
  return `shardctl-apply ${createHash('sha1').update(key).digest('hex').slice(0, 16)}`;
}

/** Sessions other than this one holding the apply lock of `key` on this database. */
async function lockHolders(client: ClientBase, key: string): Promise<{ pid: number; application_name: string }[]> {
  const holders = await client.query<{ pid: number; application_name: string }>(
    `select l.pid, a.application_name
       from pg_locks l join pg_stat_activity a on a.pid = l.pid
      where l.locktype = 'advisory' and l.granted and l.objsubid = 2
        and l.classid = $1::int4::oid and l.objid = hashtext($2)::oid
        and l.database = (select oid from pg_database where datname = current_database())
        and l.pid <> pg_backend_pid()`,
    [APPLY_LOCK_CLASS, key],
  );
  return holders.rows;
}

/** Terminates each holder that is one of ours for `key`; a holder that is not (a hash collision with another move's key) is never touched. */
async function terminateHolders(client: ClientBase, key: string, holders: { pid: number; application_name: string }[]): Promise<void> {
  const tag = applySessionTag(key);
  for (const h of holders) {
    if (h.application_name !== tag) {
      throw new ShardctlError('Conflict', `apply lock for ${key} is held by an unrelated session (pid ${h.pid}, ${h.application_name})`, { pid: h.pid }, true);
    }
    await client.query('select pg_terminate_backend($1)', [h.pid]);
  }
}

export async function acquireApplyLock(client: ClientBase, key: string, timeoutMs = 15_000): Promise<void> {
  const tag = applySessionTag(key);
  await client.query("select set_config('application_name', $1, false)", [tag]);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await client.query<{ ok: boolean }>('select pg_try_advisory_lock($1, hashtext($2)) as ok', [APPLY_LOCK_CLASS, key]);
    if (r.rows[0].ok) return;
    await terminateHolders(client, key, await lockHolders(client, key));
    if (Date.now() > deadline) {
      throw new ShardctlError('Conflict', `another apply session for ${key} still holds the target after ${timeoutMs} ms`, { key }, true);
    }
    await sleep(50);
  }
}

export async function releaseApplyLock(client: ClientBase, key: string): Promise<void> {
  await client.query('select pg_advisory_unlock($1, hashtext($2))', [APPLY_LOCK_CLASS, key]);
  await client.query('reset application_name');
}

/**
 * Ends every apply session of `key` on this shard (terminating its backend, so an open
 * transaction rolls back) and returns once none holds it. Retire calls it after dropping the
 * reverse slot: a late applier can then neither commit what it holds nor stream anything new.
 */
export async function evictApplySessions(pool: Pool, key: string, timeoutMs = 15_000): Promise<void> {
  // Without taking the lock itself: two evictions at once (a redelivered retire) must not end
  // each other, as a lock-taking evictor would be ended by the next one.
  const c = await pool.connect();
  let broken: Error | undefined;
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const holders = await lockHolders(c, key);
      if (holders.length === 0) return;
      await terminateHolders(c, key, holders);
      if (Date.now() > deadline) {
        throw new ShardctlError('Conflict', `an apply session for ${key} still holds the shard after ${timeoutMs} ms of eviction`, { key }, true);
      }
      await sleep(50);
    }
  } catch (e) {
    broken = e as Error;
    throw e;
  } finally {
    c.release(broken);
  }
}
