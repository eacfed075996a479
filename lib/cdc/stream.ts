// The replication connection: pg-logical-replication's LogicalReplicationService carrying pgoutput
// (protocol 1), turned into an ordered, bounded queue of decoded messages and keepalives.
// Invariants: the slot is acknowledged only with positions the caller says are durable (never the
// library's last *received* LSN); memory is bounded by pausing the socket; stop() leaves the slot
// inactive. Library traps handled here: its 'data' events are not awaited (we queue), auto-ack and
// the ack timer acknowledge unapplied data (both off), and acknowledge(lsn) reports lsn + 1.
import { LogicalReplicationService, PgoutputPlugin } from 'pg-logical-replication';
import type { Client } from 'pg';
import { formatLsn, parseLsn } from './lsn';
import { PgoutputDecoder, PgoutputMessage } from './pgoutput';

export type StreamItem =
  { kind: 'message'; walStart: string; msg: PgoutputMessage; bytes: number } | { kind: 'keepalive'; walEnd: string; replyRequested: boolean };

type Parsed = { ok: true; msg: PgoutputMessage; bytes: number } | { ok: false; error: Error };

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
  constructor(publication: string) {
    // Logical messages too: the cutover marks its fence point in the stream (FENCE_MARKER_PREFIX).
    this.options = { protoVersion: 1, publicationNames: [publication], messages: true };
    this.stock = new PgoutputPlugin(this.options);
  }
  get name(): string {
    return 'pgoutput';
  }
  start(client: Client, slotName: string, lastLsn: string): Promise<any> {
    return this.stock.start(client, slotName, lastLsn);
  }
  /** Runs inside the socket's data handler: must never throw. */
  parse(buffer: Buffer): Parsed {
    try {
      return { ok: true, msg: this.decoder.decode(buffer), bytes: buffer.length };
    } catch (e: any) {
      return { ok: false, error: e instanceof Error ? e : new Error(String(e)) };
    }
  }
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
}

export class ReplicationStream {
  private readonly service: LogicalReplicationService;
  private readonly plugin: ExactTextPgoutputPlugin;
  private readonly queue: StreamItem[] = [];
  private queueBytes = 0;
  private paused = false;
  private failure: Error | null = null;
  private waiter: (() => void) | null = null;
  private subscription: Promise<unknown> | null = null;
  private statusTimer: NodeJS.Timeout | null = null;
  private durable: string | null = null;
  private stopped = false;
  bytesReceived = 0;
  pauses = 0;

  constructor(private readonly opts: ReplicationStreamOptions) {
    // Same session settings as PostgreSQL's own walreceiver: unambiguous, exact text output.
    this.service = new LogicalReplicationService(
      { connectionString: opts.dsn, application_name: opts.applicationName, options: '-c datestyle=ISO -c intervalstyle=postgres -c extra_float_digits=3' },
      { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: false } },
    );
    this.plugin = new ExactTextPgoutputPlugin(opts.publication);
  }

  start(): void {
    const s = this.service;
    s.on('data', (walStart: string, parsed: Parsed) => {
      if (!parsed.ok) return this.fail(parsed.error);
      this.bytesReceived += parsed.bytes;
      this.push({ kind: 'message', walStart, msg: parsed.msg, bytes: parsed.bytes });
    });
    s.on('heartbeat', (walEnd: string, _ts: number, shouldRespond: boolean) => {
      this.push({ kind: 'keepalive', walEnd, replyRequested: shouldRespond });
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
  }

  /** Next item in wire order, or null after timeoutMs. Throws once the connection has failed. */
  async next(timeoutMs: number): Promise<StreamItem | null> {
    if (this.queue.length === 0 && !this.failure && timeoutMs > 0) {
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
    const item = this.queue.shift();
    if (item) {
      if (item.kind === 'message') this.queueBytes -= item.bytes;
      if (this.paused && this.queueBytes <= this.opts.maxQueueBytes / 2) this.setPaused(false);
      return item;
    }
    if (this.failure) throw this.failure;
    return null;
  }

  get queuedItems(): number {
    return this.queue.length;
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
    const socket = this.socket();
    const ended = this.service.destroy().catch(() => undefined);
    const timer = new Promise<void>((r) => setTimeout(r, timeoutMs).unref());
    await Promise.race([ended, timer]);
    socket?.destroy?.(); // no-op after a clean end; unblocks a hung one
    await Promise.race([this.subscription ?? Promise.resolve(), timer]);
    this.queue.length = 0;
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

  // The library keeps the socket private; its own flowControl path pauses it the same way.
  private socket(): { pause(): void; resume(): void; destroy?(): void } | undefined {
    return (this.service as any)._connection?.stream;
  }

  private setPaused(p: boolean): void {
    const sock = this.socket();
    if (!sock) return;
    this.paused = p;
    if (p) {
      this.pauses++;
      sock.pause();
    } else {
      sock.resume();
    }
  }
}
