import { getMaxListeners, setMaxListeners } from 'node:events';

// Bounded parallelism for per-object work. The first failure stops new work from starting and
// is rethrown once the in-flight items settle, so no request outlives the call.
export async function forEachLimit<T>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<void>): Promise<void> {
  const n = Math.max(1, Math.min(Math.floor(limit) || 1, items.length || 1));
  let next = 0;
  let failed: { error: unknown } | undefined;
  const worker = async () => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        await fn(items[i], i);
      } catch (error) {
        failed ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: n }, worker));
  if (failed) throw failed.error;
}

/**
 * Lets `signal` carry the abort listeners of `concurrent` requests at once (the S3 client adds one
 * per request in flight and removes it when the request ends), so a sync of `concurrent` parallel
 * requests does not print Node's listener-leak warning into the worker's log. Only ever raises the limit.
 */
export function allowConcurrentRequests(signal: AbortSignal | undefined, concurrent: number): void {
  if (!signal) return;
  let limit: number;
  try {
    limit = getMaxListeners(signal);
  } catch {
    // Node 20 throws for an EventTarget whose limit is 0 (unlimited): nothing to raise.
    return;
  }
  if (limit !== 0 && limit < concurrent) setMaxListeners(concurrent, signal);
}
