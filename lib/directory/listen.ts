// The one LISTEN on the placement channel: a dedicated connection that reconnects with capped,
// jittered backoff until stopped. Notifications sent while disconnected are lost, so every
// reconnect tells the caller to reload its snapshot. Used by the router (lib/router) and tests.
import { Client } from 'pg';
import { PLACEMENT_CHANNEL, type PlacementNotification } from './placements';
import { directoryUnavailable } from './db';
import { parsePlacementNotification, type UnitObservation } from '../router/snapshot';
import { backoffDelayMs } from '../router/retry';

export interface ListenerHooks {
  /** A parsed announcement, or undefined when the payload was malformed. */
  onNotification(o: UnitObservation | undefined): void;
  /** Called after every successful (re)connect: notifications may have been missed before it. */
  onConnected(): void;
  onDisconnected(err: Error | undefined): void;
}

export interface ListenerOptions {
  connectTimeoutMs: number;
  minReconnectDelayMs?: number;
  maxReconnectDelayMs?: number;
  applicationName?: string;
}

/** LISTEN on the placement channel on a dedicated connection, reconnecting until stopped. */
export class PlacementListener {
  private client: Client | undefined;
  private stopped = false;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  listening = false;

  constructor(
    private readonly dsn: string,
    private readonly hooks: ListenerHooks,
    private readonly opts: ListenerOptions,
  ) {}

  /** Resolves after the first connection attempt, whether it succeeded or not. */
  async start(): Promise<void> {
    await this.connect();
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const client = new Client({
      connectionString: this.dsn,
      connectionTimeoutMillis: this.opts.connectTimeoutMs,
      keepAlive: true,
      application_name: this.opts.applicationName ?? 'shardctl-router-listen',
    });
    let done = false;
    const lost = (err?: Error) => {
      if (done) return;
      done = true;
      this.listening = false;
      if (this.client === client) this.client = undefined;
      client.end().catch(() => {});
      if (this.stopped) return;
      this.hooks.onDisconnected(err);
      this.scheduleReconnect();
    };
    client.on('error', (e) => lost(e));
    client.on('end', () => lost());
    client.on('notification', (msg) => {
      if (msg.channel === PLACEMENT_CHANNEL) this.hooks.onNotification(parsePlacementNotification(msg.payload));
    });
    try {
      await client.connect();
      await client.query(`listen ${PLACEMENT_CHANNEL}`);
    } catch (e) {
      lost(e as Error);
      return;
    }
    if (this.stopped) {
      done = true;
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    this.failures = 0;
    this.listening = true;
    this.hooks.onConnected();
  }

  private scheduleReconnect(): void {
    if (this.stopped || this.timer) return;
    const delay = backoffDelayMs(this.failures++, { baseMs: this.opts.minReconnectDelayMs ?? 100, capMs: this.opts.maxReconnectDelayMs ?? 5000 });
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.connect();
    }, delay);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.listening = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const c = this.client;
    this.client = undefined;
    if (c) await c.end().catch(() => {});
  }
}

/**
 * A callback-style listener over the same class: `onChange` gets each announcement as sent.
 * Rejects with DirectoryUnavailable when the first connection fails (unless `retryInitial`).
 */
export async function listenPlacements(
  dsn: string,
  onChange: (n: PlacementNotification) => void,
  opts: {
    onReconnect?: () => void;
    retryInitial?: boolean;
    minBackoffMs?: number;
    maxBackoffMs?: number;
    connectionTimeoutMillis?: number;
    applicationName?: string;
  } = {},
): Promise<{ close(): Promise<void> }> {
  let connects = 0;
  let firstError: Error | undefined;
  const l = new PlacementListener(
    dsn,
    {
      onNotification: (o) => {
        if (o?.placement) onChange({ unit: o.unit, shard: o.placement.shard, epoch: o.placement.epoch, state: o.placement.state, generation: o.generation });
      },
      onConnected: () => {
        if (connects++ > 0) opts.onReconnect?.();
      },
      onDisconnected: (err) => {
        if (connects === 0) firstError ??= err;
      },
    },
    {
      connectTimeoutMs: opts.connectionTimeoutMillis ?? 5000,
      minReconnectDelayMs: opts.minBackoffMs,
      maxReconnectDelayMs: opts.maxBackoffMs,
      applicationName: opts.applicationName ?? 'shardctl-placement-listener',
    },
  );
  await l.start();
  if (!l.listening && !opts.retryInitial) {
    await l.stop();
    throw directoryUnavailable(firstError, dsn);
  }
  return { close: () => l.stop() };
}
