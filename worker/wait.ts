// The worker's start-up against servers that are not up yet (a fleet restarting, a worker
// deployed before its Temporal): an unreachable server is retried with capped exponential
// backoff and one log line per attempt, until it answers or the worker is told to stop. Any
// other failure (bad credentials, a missing namespace) still ends the start: retrying cannot fix it.
import { errorFields, type Logger } from '../lib/obs/log';
import { isConnectionError } from '../lib/directory/db';

export interface WaitOptions {
  log: Logger;
  /** Aborted by SIGTERM / SIGINT: the wait ends at once and resolves undefined. */
  signal: AbortSignal;
  /** A human line per attempt (stderr), besides the JSON log line. */
  say?: (line: string) => void;
  firstDelayMs?: number;
  maxDelayMs?: number;
}

/** A server the worker cannot reach yet: the directory (DirectoryUnavailable, a socket error) or Temporal (its TransportError). */
export function isUnreachable(e: any): boolean {
  if (e?.type === 'DirectoryUnavailable' || e?.type === 'Unavailable') return true;
  if (e?.name === 'TransportError') return true;
  for (let c = e, i = 0; c && i < 4; c = c.cause, i++) if (c.code === 14 || isConnectionError(c)) return true;
  return false;
}

/** Backoff before attempt `n + 1` (n ≥ 1): first, 2×first, 4×first, … capped. */
export function retryDelayMs(attempt: number, firstMs = 1000, maxMs = 30_000): number {
  return Math.min(maxMs, firstMs * 2 ** Math.min(30, attempt - 1));
}

/** Runs `attempt` until it succeeds; resolves undefined if the signal stops the wait first. */
export async function untilReachable<T>(server: string, address: string, attempt: () => Promise<T>, opts: WaitOptions): Promise<T | undefined> {
  for (let n = 1; ; n++) {
    if (opts.signal.aborted) return undefined;
    try {
      const r = await attempt();
      if (n > 1) opts.log.info({ server, address, attempts: n }, `${server} reachable`);
      return r;
    } catch (e) {
      if (!isUnreachable(e) || opts.signal.aborted) {
        if (opts.signal.aborted) return undefined;
        throw e;
      }
      const retryInMs = retryDelayMs(n, opts.firstDelayMs, opts.maxDelayMs);
      const f = errorFields(e);
      opts.log.warn({ server, address, attempt: n, retryInMs, ...f }, `waiting for ${server}`);
      opts.say?.(`waiting for ${server} at ${address} (attempt ${n}, next in ${Math.round(retryInMs / 100) / 10}s): ${String(f.err).split('\n')[0]}`);
      await sleep(retryInMs, opts.signal);
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
