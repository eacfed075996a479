// Pure retry policy of the router: which shard errors are worth another attempt, and how long
// to wait before it. No I/O; unit-tested in test/unit/router-retry.test.ts.
import { SQLSTATE } from '../errors';

/**
 * What the router does with an error raised inside a tenant transaction:
 *  - stale: the shard does not own the unit at our epoch → refresh the route, retry elsewhere;
 *  - frozen: cutover in progress → wait with backoff until the deadline;
 *  - serialization: 40001 / 40P01 → retry the whole transaction;
 *  - connect: no connection from the shard's pool in time (ConnectTimeout), or the connection lost
 *    before COMMIT was sent (ConnectionLost: the server rolls the transaction back) → retry
 *    within the deadline on a new connection;
 *  - other: propagate unchanged.
 */
export type ErrorClass = 'stale' | 'frozen' | 'serialization' | 'connect' | 'other';

/** The router's mark on a failure to get a connection from a shard's pool before its connect timeout. */
export const CONNECT_TIMEOUT = 'ConnectTimeout';
/**
 * The router's mark on a connection that broke (reset, terminated) inside a transaction before
 * its COMMIT was sent: nothing of it can have committed, so fn runs again on a new connection,
 * as after a serialization failure. A break once COMMIT was sent is never marked: its outcome is
 * unknown, and it reaches the caller as it is.
 */
export const CONNECTION_LOST = 'ConnectionLost';

const SERIALIZATION_CODES = new Set(['40001', '40P01']);

/**
 * node-postgres's words for a connection not established in time: the pool's wait ("timeout
 * exceeded when trying to connect") or the client's own connect timeout ("Connection terminated
 * due to connection timeout", whichever timer fires first). Nothing was sent, so another attempt
 * is safe; on a lossy link the second one reached a bystander's caller as a refused write.
 */
export function isConnectTimeout(e: unknown): boolean {
  return /^(timeout exceeded when trying to connect|Connection terminated due to connection timeout)/i.test(String((e as Error)?.message ?? ''));
}

/** Classifies by SQLSTATE (`code`), following `cause` a few levels so wrapped errors count too. */
export function classifyError(err: unknown): ErrorClass {
  let e: unknown = err;
  for (let depth = 0; depth < 4 && e && typeof e === 'object'; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') {
      if (code === SQLSTATE.staleRoute) return 'stale';
      if (code === SQLSTATE.frozen) return 'frozen';
      if (SERIALIZATION_CODES.has(code)) return 'serialization';
      if (code === CONNECT_TIMEOUT || code === CONNECTION_LOST) return 'connect';
      // A string code that is none of ours (e.g. 23505, ECONNREFUSED) is final: do not dig further.
      return 'other';
    }
    e = (e as { cause?: unknown }).cause;
  }
  return 'other';
}

export interface BackoffPolicy {
  /** Delay scale of the first retry. */
  baseMs: number;
  /** Upper bound of any single delay. */
  capMs: number;
}

export const FROZEN_BACKOFF: BackoffPolicy = { baseMs: 5, capMs: 100 };
export const STALE_BACKOFF: BackoffPolicy = { baseMs: 5, capMs: 50 };
/** Router.create's first snapshot while the directory cannot be reached. */
export const STARTUP_BACKOFF: BackoffPolicy = { baseMs: 100, capMs: 1000 };

/**
 * Exponential backoff with "equal jitter": for attempt n (0-based) the ceiling is
 * min(cap, base·2^n) and the delay is uniform in [ceiling/2, ceiling], so waiters spread out
 * but never spin at ~0 ms. `random` is injectable for tests (must return [0, 1)).
 */
export function backoffDelayMs(attempt: number, policy: BackoffPolicy = FROZEN_BACKOFF, random: () => number = Math.random): number {
  const n = Math.max(0, Math.floor(attempt));
  // 2^n overflows to Infinity for large n; min() keeps the cap.
  const ceiling = Math.min(policy.capMs, policy.baseMs * 2 ** Math.min(n, 30));
  const r = Math.min(Math.max(random(), 0), 1);
  return Math.round(ceiling / 2 + r * (ceiling / 2));
}

/**
 * How long to sleep before the next frozen retry without overshooting the deadline; undefined
 * when the deadline has already passed (the caller gives up).
 */
export function nextWaitMs(attempt: number, now: number, deadline: number, policy: BackoffPolicy, random: () => number = Math.random): number | undefined {
  const remaining = deadline - now;
  if (remaining <= 0) return undefined;
  return Math.min(backoffDelayMs(attempt, policy, random), remaining);
}
