// Placement change notifications for routers: a dedicated connection LISTENs on the placement
// channel and reconnects with capped exponential backoff. Notifications sent while disconnected
// are lost, so onReconnect tells the caller to refresh its whole snapshot.
import { Client } from 'pg';
import { PLACEMENT_CHANNEL, PlacementNotification } from './placements';
import { directoryUnavailable } from './db';

export interface PlacementListener {
  close(): Promise<void>;
}

export interface ListenOptions {
  /** Called after every successful re-LISTEN (not the first): refresh the snapshot. */
  onReconnect?: () => void;
  /** Connection and payload errors, for logging; the listener keeps going. */
  onError?: (e: unknown) => void;
  /** When the first connection fails: keep retrying in the background instead of rejecting. */
  retryInitial?: boolean;
  minBackoffMs?: number;
  maxBackoffMs?: number;
  connectionTimeoutMillis?: number;
  applicationName?: string;
}

export async function listenPlacements(
  dsn: string,
  onChange: (n: PlacementNotification) => void,
  opts: ListenOptions = {},
): Promise<PlacementListener> {
  const minBackoff = opts.minBackoffMs ?? 100;
  const maxBackoff = opts.maxBackoffMs ?? 5000;
  let closed = false;
  let client: Client | undefined;
  let timer: NodeJS.Timeout | undefined;
  let attempt = 0;
  let connectedOnce = false;

  const report = (e: unknown) => {
    try {
      opts.onError?.(e);
    } catch {
      /* a logging callback must not break the listener */
    }
  };

  const connect = async (): Promise<void> => {
    const c = new Client({
      connectionString: dsn,
      keepAlive: true,
      connectionTimeoutMillis: opts.connectionTimeoutMillis ?? 5000,
      application_name: opts.applicationName ?? 'shardctl-placement-listener',
    });
    let lost = false;
    const onLost = (e?: unknown) => {
      if (lost) return;
      lost = true;
      if (e) report(e);
      c.removeAllListeners('notification');
      c.end().catch(() => {});
      if (client === c) client = undefined;
      schedule();
    };
    c.on('error', (e) => onLost(e));
    c.on('end', () => onLost());
    c.on('notification', (m) => {
      if (m.channel !== PLACEMENT_CHANNEL || !m.payload) return;
      let n: PlacementNotification;
      try {
        n = JSON.parse(m.payload);
      } catch (e) {
        report(e);
        return;
      }
      onChange(n);
    });
    try {
      await c.connect();
      await c.query(`listen ${PLACEMENT_CHANNEL}`);
    } catch (e) {
      lost = true; // this attempt is over; the caller decides whether to retry
      c.removeAllListeners();
      c.on('error', () => {});
      await c.end().catch(() => {});
      throw e;
    }
    if (closed) {
      await c.end().catch(() => {});
      return;
    }
    client = c;
    attempt = 0;
    if (connectedOnce) {
      try {
        opts.onReconnect?.();
      } catch (e) {
        report(e);
      }
    }
    connectedOnce = true;
  };

  function schedule() {
    if (closed || timer) return;
    const delay = Math.min(maxBackoff, minBackoff * 2 ** attempt) * (0.5 + Math.random() / 2);
    attempt++;
    timer = setTimeout(() => {
      timer = undefined;
      if (closed) return;
      connect().catch((e) => {
        report(e);
        schedule();
      });
    }, delay);
  }

  try {
    await connect();
  } catch (e) {
    if (!opts.retryInitial) throw directoryUnavailable(e, dsn);
    report(e);
    schedule();
  }

  return {
    async close() {
      closed = true;
      if (timer) clearTimeout(timer);
      timer = undefined;
      const c = client;
      client = undefined;
      if (c) {
        c.removeAllListeners('end');
        c.removeAllListeners('notification');
        await c.end().catch(() => {});
      }
    },
  };
}
