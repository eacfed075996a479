// Runs an activity function in a real @temporalio/activity Context without a worker: one attempt
// whose heartbeats are handed to `onBeat` instead of Temporal, starting from `heartbeatDetails`
// (the last heartbeat of an earlier attempt, as Temporal gives it to a retry).
import { asyncLocalStorage, Context } from '@temporalio/activity';

export async function runAsAttempt<T>(fn: () => Promise<T>, o: { heartbeatDetails?: unknown; onBeat?: (details: unknown) => void } = {}): Promise<T> {
  const noop = () => undefined;
  const log = { trace: noop, debug: noop, info: noop, warn: noop, error: noop, log: noop };
  const ctx = new Context(
    { heartbeatDetails: o.heartbeatDetails } as never,
    new Promise<never>(noop),
    new AbortController().signal,
    (d) => o.onBeat?.(d),
    undefined,
    log as never,
    {} as never,
    {} as never,
  );
  return asyncLocalStorage.run(ctx, fn);
}
