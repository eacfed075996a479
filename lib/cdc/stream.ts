// The replication connection: pg-logical-replication's LogicalReplicationService carrying pgoutput
// (protocol 1), turned into an ordered, bounded queue of decoded messages and keepalives.
// Invariants: the slot is acknowledged only with positions the caller says are durable (never the
// library's last *received* LSN); memory is bounded by pausing the socket; stop() leaves the slot
// inactive; a connection that goes silent (a half-open link: bytes vanish, no RST) is given up
// after receiveTimeoutMs, which the library alone would never do. Library traps handled here: its
// 'data' events are not awaited (we queue), auto-ack and the ack timer acknowledge unapplied data
// (both off), and acknowledge(lsn) reports lsn + 1. Its per-message handler (an LSN string, an
// event and a promise per message) is replaced by our own on the connection (LeanCopyData).
import { LogicalReplicationService, PgoutputPlugin } from 'pg-logical-replication';
import type { Client } from 'pg';
import { ShardctlError } from '../errors';
import { sessionSettings } from '../pg';
import { formatLsn, parseLsn } from './lsn';
import { PgoutputDecoder, PgoutputMessage } from './pgoutput';

export type StreamItem = { kind: 'message'; msg: PgoutputMessage; bytes: number } | { kind: 'keepalive'; walEnd: string; replyRequested: boolean };

/** What the connection's CopyData messages become (see ExactTextPgoutputPlugin.start). */
export interface CopyDataSink {
  message(msg: PgoutputMessage, bytes: number): void;
  keepalive(walEnd: string, replyRequested: boolean): void;
  fail(e: Error): void;
}

/** XLogData: 'w', WAL start, WAL end, send time (8 bytes each), then the pgoutput message. */
const XLOGDATA = 0x77;
const XLOGDATA_HEADER = 25;
/** Primary keepalive: 'k', WAL end, send time, reply requested (1 byte). */
const KEEPALIVE = 0x6b;

/**
 * pgoutput with exact text values. The stock PgoutputPlugin runs every value through node-pg's type
 * parsers (timestamptz becomes a millisecond Date, json numbers lose precision) and reports an
 * unchanged TOAST value as undefined; we keep its START_REPLICATION command and decode ourselves.
 */
// Structurally the library's AbstractPlugin (which its package index does not export).
class ExactTextPgoutputPlugin {
  readonly options: { protoVersion: 1; publicationNames: string[]; messages: boolean };
  private readonly decoder = new PgoutputDecoder();
  private readonly stock: PgoutputPlugin;
  constructor(
    publication: string,
    private readonly sink: CopyDataSink,
  ) {
    // Logical messages too: the cutover marks its fence point in the stream (FENCE_MARKER_PREFIX).
    this.options = { protoVersion: 1, publicationNames: [publication], messages: true };
    this.stock = new PgoutputPlugin(this.options);
    this.copyData = copyDataHandler(this.decoder, sink);
  }
  get name(): string {
    return 'pgoutput';
  }
  /**
   * The library calls this right after adding its CopyData listener to the connection, and before
   * anything is streamed: that listener is replaced here by copyData, which does per message only
   * what we need (the library's formats an LSN string, emits an event and makes a promise for each:
   * 0.7-2.1 s of 12-18 s busy in node profiles of a 100-row-statement catch-up).
   */
  start(client: Client, slotName: string, lastLsn: string): Promise<any> {
    // node-postgres' own listener goes too: it only hands each message to the active query, whose
    // handler is a no-op for this one (START_REPLICATION, a simple query, for the connection's life).
    const connection = (client as unknown as { connection: NodeJS.EventEmitter }).connection;
    connection.removeAllListeners('copyData');
    connection.on('copyData', this.copyData);
    return this.stock.start(client, slotName, lastLsn);
  }
  /** The library's per-message hook, unused once start() replaced its listener: should it ever be called, the stream fails (never a message dropped). */
  parse(): undefined {
    this.sink.fail(new Error('a replication message reached the library handler instead of ours: the stream is given up'));
    return undefined;
  }
  /** Runs inside the socket's data handler: must never throw. */
  private readonly copyData: (m: { chunk: Buffer }) => void;
}

/**
 * The replication connection's CopyData handler: an XLogData message's pgoutput message decoded
 * (read past its header, not copied), a keepalive's WAL end and reply flag; anything else, or a
 * message that does not decode, fails the stream (never skipped: a gap must never be applied around).
 */
export function copyDataHandler(decoder: PgoutputDecoder, sink: CopyDataSink): (m: { chunk: Buffer }) => void {
  return ({ chunk }) => {
    try {
      const kind = chunk[0];
      if (kind === XLOGDATA) {
        sink.message(decoder.decode(chunk, XLOGDATA_HEADER), chunk.length - XLOGDATA_HEADER);
      } else if (kind === KEEPALIVE) {
        if (chunk.length < 18) throw new Error(`truncated keepalive message (${chunk.length} bytes)`);
        sink.keepalive(formatLsn((BigInt(chunk.readUInt32BE(1)) << 32n) | BigInt(chunk.readUInt32BE(5))), chunk[17] !== 0);
      } else {
        throw new Error(`unknown replication message 0x${kind?.toString(16)} from the walsender`);
      }
    } catch (e: any) {
      sink.fail(e instanceof Error ? e : new Error(String(e)));
    }
  };
}

export interface ReplicationStreamOptions {
  dsn: string;
  slot: string;
  publication: string;
  /** START_REPLICATION position; '0/0' means the slot's confirmed position. */
  startLsn: string;
  /** Decoded bytes held unapplied before the socket is paused. */
  maxQueueBytes: number;
  applicationName: string;
  /** Status updates carrying the durable position are sent at least this often (below wal_sender_timeout). */
  statusIntervalMs?: number;
  /**
   * Receive deadline: with no byte from the server for this long (while we are not the ones
   * holding the socket paused), the connection is destroyed and the stream fails with a retryable
   * 'Unavailable'. A third of it into a silence we ask for a keepalive (a status update with the
   * reply-requested flag), so a live but idle server always answers well within it, whatever its
   * wal_sender_timeout.
   */
  receiveTimeoutMs?: number;
  /** The position already durable (the slot's confirmed point, or the applied progress): what status updates carry until acknowledge() moves it. */
  durableLsn?: string;
  /** The source shard's name, for error messages (never the DSN). */
  sourceName?: string;
}

export const DEFAULT_RECEIVE_TIMEOUT_MS = 10_000;

export class ReplicationStream {
  private readonly service: LogicalReplicationService;
  private readonly plugin: ExactTextPgoutputPlugin;
  // A FIFO as an array and a head index: Array.shift() copies the whole array once it is large
  // (tens of thousands of decoded messages here), which made a big transaction's apply O(n²).
  private readonly queue: (StreamItem | undefined)[] = [];
  private head = 0;
  private queueBytes = 0;
  private paused = false;
  private failure: Error | null = null;
  private waiter: (() => void) | null = null;
  private subscription: Promise<unknown> | null = null;
  private statusTimer: NodeJS.Timeout | null = null;
  private durable: string | null = null;
  private stopped = false;
  private watchdog: NodeJS.Timeout | null = null;
  /** When the last byte arrived (or the socket was last resumed by us, or the stream started). */
  private heardAt = Date.now();
  private askedAt = 0;
  bytesReceived = 0;
  pauses = 0;

  constructor(private readonly opts: ReplicationStreamOptions) {
    // Same session settings as PostgreSQL's own walreceiver: unambiguous, exact text output.
    this.durable = opts.durableLsn && parseLsn(opts.durableLsn) > 0n ? opts.durableLsn : null;
    this.service = new LogicalReplicationService(
      {
        ...sessionSettings(opts.dsn, { applicationName: opts.applicationName }),
        options: '-c datestyle=ISO -c intervalstyle=postgres -c extra_float_digits=3',
      },
      { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: false } },
    );
    this.plugin = new ExactTextPgoutputPlugin(opts.publication, {
      message: (msg, bytes) => {
        this.heardAt = Date.now();
        this.bytesReceived += bytes;
        this.push({ kind: 'message', msg, bytes });
      },
      keepalive: (walEnd, replyRequested) => {
        this.heardAt = Date.now();
        this.push({ kind: 'keepalive', walEnd, replyRequested });
      },
      fail: (e) => this.fail(e),
    });
  }

  start(): void {
    const s = this.service;
    s.on('start', () => {
      this.heardAt = Date.now(); // the server answered START_REPLICATION: the deadline counts from here, not from a slow connect
    });
    s.on('error', (e: Error) => this.fail(e));
    this.subscription = s.subscribe(this.plugin, this.opts.slot, this.opts.startLsn).then(
      () => this.fail(new Error('the replication connection ended')),
      (e: any) => this.fail(e instanceof Error ? e : new Error(String(e))),
    );
    const every = this.opts.statusIntervalMs ?? 5000;
    this.statusTimer = setInterval(() => {
      if (this.durable) void this.sendStatus(this.durable, false);
    }, every);
    this.statusTimer.unref();
    this.heardAt = Date.now();
    const deadline = this.opts.receiveTimeoutMs ?? DEFAULT_RECEIVE_TIMEOUT_MS;
    this.watchdog = setInterval(() => this.checkAlive(deadline), Math.max(50, Math.min(1000, deadline / 6)));
    this.watchdog.unref();
  }

  /** The receive deadline's check (a timer: it must fire whatever the caller is blocked on). */
  private checkAlive(deadline: number): void {
    if (this.stopped || this.failure) return;
    const now = Date.now();
    // Paused by us (backpressure): the server cannot send, so its silence says nothing.
    if (this.paused) this.heardAt = now;
    const silent = now - this.heardAt;
    if (silent >= deadline) {
      const who = this.opts.sourceName ?? 'the source shard';
      this.fail(
        new ShardctlError(
          'Unavailable',
          `the replication stream from ${who} received nothing for ${silent} ms (receive deadline ${deadline} ms; a keepalive was asked for): the connection is given up as half-open, and the next round resumes from the applied position`,
          { shard: this.opts.sourceName, receiveTimeoutMs: deadline },
          true,
        ),
      );
      // Destroyed now: a clean end on a half-open connection would wait for a reply that never comes.
      this.socket()?.destroy?.();
      return;
    }
    if (silent >= deadline / 3 && now - this.askedAt >= deadline / 3 && this.durable) {
      this.askedAt = now;
      void this.sendStatus(this.durable, true);
    }
  }

  /**
   * Next item in wire order, or null after timeoutMs. Throws as soon as the connection has failed,
   * dropping what it queued: the round ends now, and the next one is redelivered everything after
   * the applied position.
   */
  async next(timeoutMs: number): Promise<StreamItem | null> {
    if (this.failure) throw this.failure;
    if (this.queuedItems === 0 && !this.failure && timeoutMs > 0) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          this.waiter = null;
          resolve();
        }, timeoutMs);
        this.waiter = () => {
          clearTimeout(t);
          this.waiter = null;
          resolve();
        };
      });
    }
    return this.takeNow();
  }

  /** next() without waiting: the next item if one is queued (no promise: the apply loop's common case). */
  takeNow(): StreamItem | null {
    if (this.failure) throw this.failure;
    const item = this.take();
    if (!item) return null;
    if (item.kind === 'message') this.queueBytes -= item.bytes;
    if (this.paused && this.queueBytes <= this.opts.maxQueueBytes / 2) this.setPaused(false);
    return item;
  }

  /** The connection failed (and was given up): nothing more comes from it. */
  get failed(): boolean {
    return this.failure !== null;
  }

  get queuedItems(): number {
    return this.queue.length - this.head;
  }

  /** The oldest queued item, removed; compacts the array once half of it is taken. */
  private take(): StreamItem | undefined {
    if (this.head >= this.queue.length) return undefined;
    const item = this.queue[this.head];
    this.queue[this.head++] = undefined;
    if (this.head === this.queue.length) {
      this.queue.length = 0;
      this.head = 0;
    } else if (this.head >= 1024 && this.head * 2 >= this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
    return item;
  }

  /**
   * Reports `lsn` as written, flushed and applied; the slot's confirmed_flush_lsn becomes exactly
   * this. Only call it with a position durably committed on the target. ping asks the walsender to
   * answer with a keepalive carrying its send position.
   */
  acknowledge(lsn: string, ping = false): Promise<boolean> {
    this.durable = lsn;
    return this.sendStatus(lsn, ping);
  }

  private async sendStatus(lsn: string, ping: boolean): Promise<boolean> {
    const v = parseLsn(lsn);
    if (v === 0n || this.stopped) return false;
    // The library writes lsn + 1 ("last byte + 1"); PostgreSQL's own apply worker reports the commit
    // end itself, and that is what our progress row holds. Compensate so both agree exactly.
    return this.service.acknowledge(formatLsn(v - 1n), ping).catch(() => false);
  }

  async stop(timeoutMs = 5000): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.statusTimer) clearInterval(this.statusTimer);
    if (this.watchdog) clearInterval(this.watchdog);
    const socket = this.socket();
    // A failed connection has nothing to end cleanly; a half-open one would wait out the timer.
    if (this.failure) socket?.destroy?.();
    const ended = this.service.destroy().catch(() => undefined);
    const timer = new Promise<void>((r) => setTimeout(r, timeoutMs).unref());
    await Promise.race([ended, timer]);
    socket?.destroy?.(); // no-op after a clean end; unblocks a hung one
    await Promise.race([this.subscription ?? Promise.resolve(), timer]);
    this.queue.length = 0;
    this.head = 0;
    this.queueBytes = 0;
  }

  private push(item: StreamItem): void {
    if (this.stopped || this.failure) return; // nothing after a failure: a gap must never be applied around
    this.queue.push(item);
    if (item.kind === 'message') {
      this.queueBytes += item.bytes;
      if (!this.paused && this.queueBytes > this.opts.maxQueueBytes) this.setPaused(true);
    }
    this.waiter?.();
  }

  private fail(e: Error): void {
    if (this.stopped || this.failure) return;
    this.failure = e;
    this.waiter?.();
  }

  // The library keeps the socket private; its own flowControl path pauses it the same way. Before
  // the connection is up (connecting, authenticating) only its client holds it.
  private socket(): { pause(): void; resume(): void; destroy?(): void } | undefined {
    const svc = this.service as any;
    return svc._connection?.stream ?? svc._client?.connection?.stream;
  }

  private setPaused(p: boolean): void {
    const sock = this.socket();
    if (!sock) return;
    this.paused = p;
    if (p) {
      this.pauses++;
      sock.pause();
    } else {
      this.heardAt = Date.now(); // the silence we imposed does not count against the server
      sock.resume();
    }
  }
}
