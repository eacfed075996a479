// Pacing for the bulk copy, so a move never starves the source's own tenants:
//  - a rate limit (rows per second, 0 = unlimited) enforced by sleeping between batches;
//  - back-pressure: before each batch, if more than `maxSourceActive` other client backends are
//    active on the source (pg_stat_activity), wait with exponential backoff (200 ms .. 5 s)
//    until it drops. Crude but cheap, and it reacts to whatever is loading the source.
// Every wait is abortable by the copy's signal.
import { setTimeout as delay } from 'node:timers/promises';
import type { PoolClient } from 'pg';

export const DEFAULT_MAX_SOURCE_ACTIVE = 32;

/** Sleeps ms; rejects with the signal's reason when it aborts first. */
export async function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  signal?.throwIfAborted();
  if (ms <= 0) return;
  try {
    await delay(ms, undefined, { signal });
  } catch (e) {
    throw signal?.aborted ? signal.reason : e;
  }
}

/** Milliseconds to wait so that `rows` copied since `startedAt` stay within `rowsPerSecond`. */
export function rateDelayMs(rows: number, startedAt: number, rowsPerSecond: number, now = Date.now()): number {
  if (!rowsPerSecond || rowsPerSecond <= 0) return 0;
  return Math.max(0, Math.ceil((rows / rowsPerSecond) * 1000 - (now - startedAt)));
}

export async function activeSourceBackends(source: PoolClient): Promise<number> {
  const r = await source.query(
    `select count(*)::int as n from pg_stat_activity
      where state = 'active' and backend_type = 'client backend' and pid <> pg_backend_pid()`,
  );
  return r.rows[0].n;
}

/** Waits while the source is busier than `maxActive`; returns the time spent waiting. */
export async function waitForSourceCapacity(source: PoolClient, maxActive: number, signal?: AbortSignal, onWait?: (reason: string) => void): Promise<number> {
  if (!(maxActive > 0)) return 0;
  const t0 = Date.now();
  let delay = 200;
  for (;;) {
    const active = await activeSourceBackends(source);
    if (active <= maxActive) return Date.now() - t0;
    onWait?.(`source busy: ${active} active backends > ${maxActive}; copy paused ${delay} ms`);
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 5000);
  }
}
