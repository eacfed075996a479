// Who holds a unit's write lock on a shard, and a wait, outside the write pause, for a moment
// when none of them has held it long. Every fenced write of a unit holds its advisory lock
// (FENCE_LOCK_CLASS, hashtext(unit)) shared from its check to its commit, and a fence raise takes
// it exclusively: it waits for every writer in flight, and every write behind it waits with it.
// A write that runs for a second (a cascade over an unindexed foreign key, a batch job) in flight
// at the freeze would hold the whole tenant's writes for that second; waiting for it before the
// freeze costs nobody a pause.
import type { Pool, PoolClient } from 'pg';
import { FENCE_LOCK_CLASS } from './fence-sql';

export interface UnitWriter {
  /** 0 for a prepared transaction (it has no session; COMMIT PREPARED or ROLLBACK PREPARED ends it). */
  pid: number;
  /** The server's virtual transaction id: tells a session's next transaction from this one. */
  vxid: string;
  /**
   * How long its transaction has been open, by the server's clock; null when this role may not
   * see it (pg_stat_activity shows other roles' sessions only to pg_read_all_stats).
   */
  xactMs: number | null;
  /** pg_stat_activity's state ('active', 'idle in transaction', ...), null when not visible. */
  state: string | null;
}

/** Sessions of this database holding the unit's write lock now (ours excepted). No query text: it may hold a tenant's data. */
export async function unitWriters(db: Pool | PoolClient, unit: string): Promise<UnitWriter[]> {
  const r = await db.query(
    `select coalesce(l.pid, 0) as pid, l.virtualtransaction as vxid,
            case when l.pid is null then 'prepared transaction' else a.state end as state,
            (extract(epoch from (pg_catalog.clock_timestamp() - a.xact_start)) * 1000)::float8 as xact_ms
       from pg_catalog.pg_locks l
       left join pg_catalog.pg_stat_activity a on a.pid = l.pid
      where l.locktype = 'advisory' and l.granted
        and l.database = (select oid from pg_catalog.pg_database where datname = pg_catalog.current_database())
        and l.classid = $1 and l.objid = (pg_catalog.hashtext($2)::bigint & 4294967295)::oid and l.objsubid = 2
        and l.pid is distinct from pg_catalog.pg_backend_pid()`,
    [FENCE_LOCK_CLASS, unit],
  );
  return r.rows.map((w) => ({ pid: w.pid, vxid: w.vxid, xactMs: w.xact_ms === null ? null : Number(w.xact_ms), state: w.state ?? null }));
}

export interface LongWriter {
  pid: number;
  /** At least this long: its transaction's age when visible, else how long we have seen it hold the lock. */
  heldMs: number;
  state: string | null;
}

export interface QuietWait {
  /** How long the wait took (0: quiet at the first look). */
  waitedMs: number;
  /** Gave up at maxWaitMs with a long writer still holding the lock (the freeze goes ahead; the fence's lock budget bounds it). */
  gaveUp: boolean;
  /** The longest writer waited for (or still holding, when gaveUp). */
  longest?: LongWriter;
}

export interface QuietWaitOptions {
  /** A writer holding the lock at least this long is waited for. */
  longMs: number;
  /** Give up (and go ahead) after this long. */
  maxWaitMs: number;
  /** The first look's interval; it doubles up to 200 ms (reading pg_locks takes every lock partition briefly). */
  pollMs?: number;
  /** Each look that found long writers (for heartbeats). */
  onWait?(writers: LongWriter[], waitedMs: number): void;
  now?(): number;
  sleep?(ms: number): Promise<void>;
  signal?: AbortSignal;
}

/**
 * Returns once no session has held the unit's write lock for `longMs` or more (writers come and
 * go; only long ones are waited for). A holder whose transaction age we may not see is watched:
 * one still there `longMs` after it was first seen is long. Bounded by `maxWaitMs`.
 */
export async function awaitQuietWriters(db: Pool | PoolClient, unit: string, o: QuietWaitOptions): Promise<QuietWait> {
  const now = o.now ?? Date.now;
  const sleep = o.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  let pollMs = o.pollMs ?? Math.max(5, Math.min(25, Math.floor(o.longMs / 2)));
  const t0 = now();
  const firstSeen = new Map<string, number>();
  let longest: LongWriter | undefined;
  for (;;) {
    const writers = await unitWriters(db, unit);
    const t = now();
    const current = new Set<string>();
    const long: LongWriter[] = [];
    for (const w of writers) {
      const key = `${w.pid}/${w.vxid}`;
      current.add(key);
      if (!firstSeen.has(key)) firstSeen.set(key, t);
      const heldMs = Math.max(t - firstSeen.get(key)!, w.xactMs ?? 0);
      if (heldMs >= o.longMs) long.push({ pid: w.pid, heldMs: Math.round(heldMs), state: w.state });
    }
    for (const k of firstSeen.keys()) if (!current.has(k)) firstSeen.delete(k);
    long.sort((a, b) => b.heldMs - a.heldMs);
    if (long.length && (!longest || long[0].heldMs >= longest.heldMs)) longest = long[0];
    // Quiet: no holder is long, and each one's age is known or was watched for longMs.
    const agesKnown = writers.every((w) => w.xactMs !== null) || t - t0 >= o.longMs;
    if (!long.length && agesKnown) return { waitedMs: t - t0, gaveUp: false, ...(longest ? { longest } : {}) };
    if (t - t0 >= o.maxWaitMs || o.signal?.aborted) return { waitedMs: t - t0, gaveUp: long.length > 0, ...(longest ? { longest } : {}) };
    if (long.length) o.onWait?.(long, t - t0);
    await sleep(Math.min(pollMs, Math.max(1, o.maxWaitMs - (t - t0))));
    pollMs = Math.min(200, pollMs * 2);
  }
}

/** The holders of a unit's write lock, for an operator's message: ` (pid 7 active, open 900 ms; ...)`, '' for none (no query text). */
export function describeWriters(held: UnitWriter[], max = 3): string {
  if (!held.length) return '';
  const each = held.slice(0, max).map((w) => `pid ${w.pid}${w.state ? ` ${w.state}` : ''}${w.xactMs !== null ? `, open ${Math.round(w.xactMs)} ms` : ''}`);
  return ` (${each.join('; ')}${held.length > max ? `; ${held.length - max} more` : ''})`;
}

/** One line for the operator about the writer a cutover waited for (no query text). */
export function describeLongWriter(w: LongWriter): string {
  return `pid ${w.pid}${w.state ? ` (${w.state})` : ''} held its write ${w.heldMs} ms`;
}
