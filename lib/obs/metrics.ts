// The worker's Prometheus metrics (prom-client), served as text over HTTP when an address is
// configured. Label policy (docs/production.md, "Metrics"): counters and histograms carry only
// bounded labels (shard, direction, activity, error type, abort reason); per-move gauges carry
// `unit` and `move_id` and exist only while the move is live on this worker: a series not
// updated for `staleAfterMs` is dropped, so a long-lived worker does not grow one per move ever run.
import http from 'node:http';
import { Registry, Counter, Gauge, Histogram, collectDefaultMetrics } from 'prom-client';

export const CUTOVER_ABORT_REASONS = ['fence-lock', 'budget', 'mismatch', 'lost-freeze', 'foreign', 'error', 'other'] as const;
export type CutoverAbortReason = (typeof CUTOVER_ABORT_REASONS)[number];

/** A bounded label for a cutover's abort reason (lib/cutover/steps.ts words its reasons). */
export function cutoverAbortReason(reason: string): CutoverAbortReason {
  if (/failed inside the frozen window/i.test(reason)) return 'error';
  // Left frozen (fail closed) outranks why the attempt was aborting.
  if (/lost the race|directory changed/i.test(reason)) return 'lost-freeze';
  if (/held the fence lock/i.test(reason)) return 'fence-lock';
  if (/budget/i.test(reason)) return 'budget';
  if (/differs|mismatch/i.test(reason)) return 'mismatch';
  if (/vanished|fence trigger/i.test(reason)) return 'foreign';
  return 'other';
}

type Labels = Record<string, string>;

/** A gauge whose series expire: each `set` stamps its label set; collection drops the stale ones. */
class ExpiringGauge {
  private readonly seen = new Map<string, { labels: Labels; at: number }>();
  constructor(
    readonly gauge: Gauge<string>,
    private readonly staleAfterMs: number,
  ) {}
  set(labels: Labels, value: number): void {
    this.gauge.set(labels, value);
    this.seen.set(JSON.stringify(labels), { labels, at: Date.now() });
  }
  /** Drops every series whose labels include `match` (a move that left the phase). */
  remove(match: Labels): void {
    for (const [k, v] of this.seen) {
      if (Object.entries(match).every(([mk, mv]) => v.labels[mk] === mv)) {
        this.gauge.remove(v.labels);
        this.seen.delete(k);
      }
    }
  }
  prune(now = Date.now()): void {
    for (const [k, v] of this.seen) {
      if (now - v.at > this.staleAfterMs) {
        this.gauge.remove(v.labels);
        this.seen.delete(k);
      }
    }
  }
}

export interface MetricsOptions {
  /** Per-move gauge series not updated for this long are dropped (default 10 minutes). */
  staleAfterMs?: number;
  /** Process metrics (CPU, memory, event loop lag) under `shardctl_worker_` (default true). */
  processMetrics?: boolean;
}

export function createMetrics(opts: MetricsOptions = {}) {
  const registry = new Registry();
  const staleAfterMs = opts.staleAfterMs ?? 10 * 60_000;
  if (opts.processMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'shardctl_worker_' });
  const registers = [registry];
  const expiring: ExpiringGauge[] = [];
  const perMove = (name: string, help: string, labelNames: string[]) => {
    const g = new ExpiringGauge(new Gauge({ name, help, labelNames, registers }), staleAfterMs);
    expiring.push(g);
    return g;
  };

  const counter = (name: string, help: string, labelNames: string[]) => new Counter({ name, help, labelNames, registers });

  const m = {
    registry,
    activityFailures: counter(
      'shardctl_activity_failures_total',
      'Activity executions that failed, by activity and error type (retried ones count each time)',
      ['activity', 'type'],
    ),
    activityDuration: new Histogram({
      name: 'shardctl_activity_duration_seconds',
      help: 'Activity execution time, by activity and outcome',
      labelNames: ['activity', 'outcome'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800],
      registers,
    }),
    rowsCopied: counter('shardctl_rows_copied_total', 'Rows the copy phase committed on this worker, by source and target shard', ['source', 'target']),
    bytesCopied: counter('shardctl_copy_bytes_total', 'COPY stream bytes of the rows the copy phase committed on this worker, by source and target shard', [
      'source',
      'target',
    ]),
    rowsApplied: counter('shardctl_rows_applied_total', 'Row changes applied from the replication stream on this worker, by direction', ['direction']),
    cutoverAttempts: counter('shardctl_cutover_attempts_total', 'Cutover attempts (one freeze each), by direction', ['direction']),
    cutoverAborts: counter('shardctl_cutover_aborts_total', 'Cutover attempts that unfroze without switching, by direction and reason', [
      'direction',
      'reason',
    ]),
    cutoverPause: new Histogram({
      name: 'shardctl_cutover_pause_ms',
      help: "The tenant's write pause of a cutover attempt in milliseconds (freeze to switch, or to unfreeze when aborted)",
      labelNames: ['direction', 'outcome'],
      buckets: [10, 25, 50, 100, 250, 500, 1000, 2000, 5000, 10000],
      registers,
    }),
    tableRowsCopied: perMove('shardctl_move_table_rows_copied', 'Rows of one table copied so far by a live move', ['unit', 'move_id', 'table']),
    lagBytes: perMove('shardctl_move_lag_bytes', 'WAL bytes the sender wrote that the receiving shard has not applied yet, per live move', [
      'unit',
      'move_id',
      'direction',
    ]),
    lagSeconds: perMove('shardctl_move_lag_seconds', 'Time the last catch-up round took to stream and apply what the source had when it began', [
      'unit',
      'move_id',
      'direction',
    ]),
    validationMismatches: perMove('shardctl_move_validation_mismatches', 'Differences the last validation of a live move reported (0 = passed)', [
      'unit',
      'move_id',
    ]),
    /** Read at scrape time from every shard (worker/slots-gauge.ts), not by the activities. */
    slotRetainedBytes: perMove(
      'shardctl_slot_retained_wal_bytes',
      'WAL a shardctl replication slot holds back on its shard (pg_current_wal_lsn() - restart_lsn), read at scrape time (the same on every worker: aggregate with max)',
      ['shard', 'slot'],
    ),
    /** Read with slotRetainedBytes: the limit its alert compares against (absent for a shard without one). */
    slotWalKeepLimitBytes: perMove(
      'shardctl_slot_wal_keep_limit_bytes',
      "A shard's max_slot_wal_keep_size in bytes: past it a slot is invalidated and its move must start over (absent: the shard sets no limit)",
      ['shard'],
    ),
    movesByPhase: new Gauge({
      name: 'shardctl_moves',
      help: 'Running move workflows by phase, from Temporal visibility (the same on every worker: aggregate with max)',
      labelNames: ['phase'],
      registers,
    }),
    movesBlocked: new Gauge({
      name: 'shardctl_moves_blocked',
      help: 'Running move workflows with a blocked reason (ShardctlBlockedReason is set)',
      registers,
    }),
    visibilityUp: new Gauge({
      name: 'shardctl_moves_visibility_up',
      help: '1 when the last count of moves from Temporal visibility succeeded, else 0',
      registers,
    }),
    /** Drops the per-move series of `unit` for gauges in `which` (the move left that phase). */
    forgetMove(unit: string, which: ExpiringGauge[]) {
      for (const g of which) g.remove({ unit });
    },
    prune() {
      for (const g of expiring) g.prune();
    },
  };
  return m;
}
export type Metrics = ReturnType<typeof createMetrics>;

/** Parses `:9464`, `9464`, `0.0.0.0:9464` or `[::1]:9464`; the host defaults to every interface. */
export function parseListenAddr(addr: string): { host: string | undefined; port: number } {
  const a = addr.trim();
  const m = /^(\d{1,5})$/.exec(a) ?? /^(?:\[([^\]]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(a);
  const port = m ? Number(m[m.length - 1]) : NaN;
  if (!m || !(port >= 0 && port <= 65535)) throw new Error(`invalid metrics address ${JSON.stringify(addr)}: use [host]:port, e.g. :9464 or 127.0.0.1:9464`);
  const host = m.length === 2 ? undefined : (m[1] ?? (m[2] || undefined));
  return { host, port };
}

export interface MetricsServer {
  /** The bound port (useful with port 0). */
  port: number;
  url: string;
  close(): Promise<void>;
}

/**
 * Serves `GET /metrics` (Prometheus text format) and `GET /healthz`. `beforeScrape` refreshes
 * what is computed at scrape time (e.g. the moves counted from Temporal visibility); its failure
 * never fails the scrape.
 */
export async function serveMetrics(
  addr: string,
  metrics: Metrics,
  beforeScrape?: () => Promise<void>,
  /** More exposition text appended to each scrape (the Temporal SDK's own exporter's page). */
  more?: () => Promise<string>,
): Promise<MetricsServer> {
  const { host, port } = parseListenAddr(addr);
  const server = http.createServer((req, res) => {
    void (async () => {
      const path = (req.url ?? '/').split('?')[0];
      if (req.method !== 'GET' || (path !== '/metrics' && path !== '/healthz')) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics\n');
        return;
      }
      if (path === '/healthz') {
        res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
        return;
      }
      try {
        await beforeScrape?.().catch(() => {});
        metrics.prune();
        const own = await metrics.registry.metrics();
        const extra = more ? await more() : '';
        const body = extra ? `${own.endsWith('\n') ? own : `${own}\n`}${extra}` : own;
        res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(body);
      } catch (e) {
        res.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics failed: ${(e as Error).message}\n`);
      }
    })();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const bound = (server.address() as { port: number }).port;
  const shownHost = host && host.includes(':') ? `[${host}]` : (host ?? '127.0.0.1');
  return {
    port: bound,
    url: `http://${shownHost}:${bound}/metrics`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
