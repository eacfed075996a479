// applyChangesUntil: streams the move's slot and applies it to the target until a stop condition
// (watermark reached, caught up and idle, time budget, abort), then releases the slot.
// Resume contract: everything needed to resume is the target's move_progress row; the slot is
// acknowledged only up to that row's LSN, so a crash at any instant redelivers, never loses.
// Never hangs on a silent link: the stream has a receive deadline, and every statement of the
// control and apply sessions a client-side bound, each failing the round as 'Unavailable' (named
// by shard) so the activity retries; the loop's turns are its liveness (onAlive), not a timer.
import { setImmediate as yieldToIo, setTimeout as sleep } from 'node:timers/promises';
import { Client, Pool, PoolClient } from 'pg';
import { boundQueries, LINK, nameTimeout, sessionSettings } from '../pg';
import { ShardctlError } from '../errors';
import { installShardSchema } from '../shard/schema';
import { ApplyStats, ChangeApplier } from './applier';
import type { SubUnitStream } from './sub-unit-filter';
import { acquireApplyLock, releaseApplyLock, applyLockKey } from './apply-lock';
import { compareLsn, isLsn, maxLsn, normalizeLsn } from './lsn';
import { readAppliedLsn } from './progress';
import { currentWalLsn, releaseSlot, slotStatus, waitSlotInactive, walBytesSince } from './publication';
import { validateReplicationName } from './sql';
import { DEFAULT_RECEIVE_TIMEOUT_MS, ReplicationStream } from './stream';
import { FENCE_MARKER_PREFIX } from '../shard/fence';
import { copyProgress } from '../copy/checkpoint';
import { MAX_TRACKED_KEYS_PER_TRANSACTION } from './delta';

/**
 * Streams (move/stream) whose COPY of inserts met a key already on the target in this process:
 * they are applied by upserts from then on (InsertsByCopy). Lost with the process, which then
 * meets the key once more and lands here again: the round fails, nothing of it is kept.
 */
const upsertsOnly = new Set<string>();

export interface ApplyProgress {
  appliedLsn: string;
  transactionsApplied: number;
  rowsApplied: number;
  caughtUp: boolean;
  bytesReceived: number;
}

export interface ApplyChangesOptions {
  sourceDsn: string;
  /** The source shard's name, for error messages (the DSN never appears in one). */
  sourceName?: string;
  target: Pool;
  /** The target shard's name, for error messages. */
  targetName?: string;
  /**
   * The replication stream's receive deadline, which also bounds each statement of the control
   * session on the source (default DEFAULT_RECEIVE_TIMEOUT_MS). See ReplicationStreamOptions.
   */
  receiveTimeoutMs?: number;
  /** Each statement of the apply session on the target gives up after this, client and server side (default DEFAULT_APPLY_QUERY_TIMEOUT_MS). */
  applyQueryTimeoutMs?: number;
  slot: string;
  publication: string;
  moveId: string;
  /** Progress key in shardctl.move_progress, e.g. 'forward' or 'reverse'. */
  stream: string;
  /** A split tenant's sub-unit move: apply only its changes (lib/cdc/sub-unit-filter.ts). */
  subUnit?: SubUnitStream;
  /** Stop once the applied LSN is >= this (e.g. the source WAL position recorded after the fence). */
  untilLsn?: string;
  /** Stop at the source's WAL position when the round starts (asked on the round's own bounded session, so a silent source cannot hang the question). */
  untilSourceNow?: boolean;
  /** Also stop once the transaction carrying this fence marker (lib/shard/fence.ts) is applied: everything before it is. */
  untilMarker?: string;
  /**
   * Time budget. A source transaction in hand is finished first: for as long as it keeps arriving
   * (nothing new for STALLED_MS ends it) and at most `maxTransactionMs` in all, so a transaction
   * bigger than a round (a multi-million-row backfill) is applied once, not re-streamed forever.
   */
  maxDurationMs: number;
  /** The longest a round may run to finish one source transaction (default 30 minutes). */
  maxTransactionMs?: number;
  /**
   * Liveness: called at most every 500 ms as the round makes its way (each setup step, each turn of
   * the apply loop, including a long source transaction applied with nothing durable yet), never
   * from a timer, so a round stuck on a silent server stops calling it. The activity heartbeats here.
   */
  onAlive?: () => void;
  /** Stop after being caught up with the source, with no new changes, for this long. */
  idleStopMs?: number;
  /** Received-but-unapplied bytes held in memory before the socket is paused (backpressure). Transactions of any size stream through. */
  maxTxBytes?: number;
  /** Called (and awaited) after progress became durable, at most every 500 ms, and once at the end. */
  onProgress?: (p: ApplyProgress) => void | Promise<void>;
  signal?: AbortSignal;
  /** Throttle: apply at most this many rows per second on average (0 or unset = unlimited). The
   *  stream's bounded queue then pauses the socket, so the source keeps the backlog in its WAL. */
  rowsPerSecond?: number;
  /**
   * A deadline its owner may move while the round runs (instead of `maxDurationMs` from the start):
   * the cutover's final apply is opened before the freeze and given the fence budget once the fence
   * is raised (lib/cutover/final-apply.ts).
   */
  deadline?: RoundDeadline;
  /** Called once, the first time the round is caught up with the source. */
  onCaughtUp?: () => void;
  /**
   * Called once the loop has stopped with everything it applied committed, before the sessions'
   * tear-down (a walsender's exit, the apply lock, the goodbyes: several round trips a caller
   * waiting inside the frozen window need not wait for).
   */
  onStopped?: (r: RoundStop) => void;
}

/** Where a round stood when its loop stopped (see ApplyChangesOptions.onStopped). */
export interface RoundStop {
  appliedLsn: string;
  caughtUp: boolean;
  stopReason: StopReason;
}

/**
 * A round's soft deadline (a source transaction in hand is finished past it, up to the hard one),
 * and a stop position its owner may give it while it runs (`untilLsn`, once set, is never unset).
 */
export class RoundDeadline {
  softAt: number;
  hardAt: number;
  untilLsn?: string;
  constructor(ms: number, now = Date.now()) {
    this.softAt = now + ms;
    this.hardAt = this.softAt + ms;
  }
  /** From now: `ms` more, and as much again to finish a transaction in hand. */
  restart(ms: number, now = Date.now()): void {
    this.softAt = now + ms;
    this.hardAt = this.softAt + ms;
  }
}

export type StopReason = 'until' | 'idle' | 'deadline' | 'aborted';

export interface ApplyResult extends ApplyStats {
  appliedLsn: string;
  /** untilLsn was reached, or everything the source had written when last asked is applied and nothing arrived since. */
  caughtUp: boolean;
  /** pg_current_wal_lsn() - appliedLsn on the source, at return. */
  lagBytes: number;
  stopReason: StopReason;
  bytesReceived: number;
  /** Times the socket was paused because applying fell behind receiving (memory bound). */
  backpressurePauses: number;
  /**
   * From the stream's first delivery (a change or a keepalive) to the end of the apply loop: the
   * time the round spent receiving and applying, without its sessions' set-up and tear-down (about
   * fifteen round trips, seconds on a slow link, that a lag measured by the round's duration counts
   * as replication lag). 0 when the round had nothing to stream.
   */
  streamingMs: number;
}

const DEFAULT_QUEUE_BYTES = 64 * 1024 * 1024;
/** How often, when idle, we ask the walsender where it is (caught-up detection and untilLsn). */
const PING_INTERVAL_MS = 200;
/** How often a keepalive-vouched position is written to the target while idle. */
const RECORD_INTERVAL_MS = 1000;
const PROGRESS_INTERVAL_MS = 500;
/**
 * Group commit bounds: source transactions and rows per target transaction, and how long one stays
 * open. A commit that waits stalls the pipeline (the last COPY, the progress row and the commit's
 * flush with nothing else in flight; a full group with more queued is now pipelined instead,
 * ChangeApplier.commitPipelined), so a backlog goes in big groups: at 200 ms / 200
 * transactions a 100-row-statement backlog committed every ~10k rows and spent a third of its time
 * there. The row bound keeps one group's keys under the delta's per-transaction bound (an insert
 * touches one key), so a tracked catch-up does not overflow into a whole-unit comparison.
 */
const MAX_GROUP_TRANSACTIONS = 1000;
const MAX_GROUP_ROWS = Math.floor(MAX_TRACKED_KEYS_PER_TRANSACTION * 0.8);
const MAX_GROUP_MS = 1000;
/**
 * A group also stays open at least this many times as long as the last group commit took, so
 * commits cost at most about a fifth of the apply's time. On a slow target link a commit (flush,
 * progress, COMMIT: several round trips) outlasts a fixed bound, and one made every source
 * transaction its own commit: 200 ms of latency held the apply to 1-3 transactions a second.
 */
const GROUP_COMMIT_COST_FACTOR = 4;

/** Whether the open group is full: by transactions, rows, or time open against what a commit costs (see above). */
export function groupFull(g: { pendingTransactions: number; pendingRows: number; pendingSinceMs: number }, lastCommitMs: number): boolean {
  return (
    g.pendingTransactions >= MAX_GROUP_TRANSACTIONS ||
    g.pendingRows >= MAX_GROUP_ROWS ||
    g.pendingSinceMs >= Math.max(MAX_GROUP_MS, GROUP_COMMIT_COST_FACTOR * lastCommitMs)
  );
}
/** A source transaction in hand that sends nothing for this long is abandoned at the deadline (rolled back, redelivered later). */
const STALLED_MS = 10_000;
const DEFAULT_MAX_TRANSACTION_MS = 30 * 60_000;
/**
 * The loop lets the event loop run I/O at least every this many stream items. With a backlog
 * queued, s.next() resolves at once and every await in the loop is a microtask, so without it no
 * socket is serviced until the loop waits on the target: a COPY just started would not get its
 * CopyInResponse read nor its data written while the next batch is built, only once the applier
 * waits for it (settle), so the target and this process took turns instead of overlapping.
 */
const YIELD_EVERY_ITEMS = 256;
/** An apply statement (an upsert batch, a commit) normally takes milliseconds; this bound is for a target that stopped answering. */
export const DEFAULT_APPLY_QUERY_TIMEOUT_MS = 30_000;

export async function applyChangesUntil(opts: ApplyChangesOptions): Promise<ApplyResult> {
  validateReplicationName('slot', opts.slot);
  validateReplicationName('publication', opts.publication);
  if (!opts.moveId || !opts.stream) throw new ShardctlError('InvalidInput', 'moveId and stream are required');
  if (!(opts.maxDurationMs > 0)) throw new ShardctlError('InvalidInput', 'maxDurationMs must be positive');
  if (opts.untilLsn !== undefined && !isLsn(opts.untilLsn)) throw new ShardctlError('InvalidInput', `untilLsn ${JSON.stringify(opts.untilLsn)} is not an LSN`);
  if (opts.untilLsn !== undefined && opts.untilSourceNow) throw new ShardctlError('InvalidInput', 'untilLsn and untilSourceNow exclude each other');
  const startedAt = Date.now();
  const sourceName = opts.sourceName ?? 'the source shard';
  const targetName = opts.targetName ?? 'the target shard';
  const receiveTimeoutMs = opts.receiveTimeoutMs ?? DEFAULT_RECEIVE_TIMEOUT_MS;
  const applyQueryTimeoutMs = opts.applyQueryTimeoutMs ?? DEFAULT_APPLY_QUERY_TIMEOUT_MS;
  let lastAliveAt = 0;
  const alive = () => {
    if (Date.now() - lastAliveAt < PROGRESS_INTERVAL_MS) return;
    lastAliveAt = Date.now();
    opts.onAlive?.();
  };

  const sourceClient = new Client(sessionSettings(opts.sourceDsn, { applicationName: 'shardctl-cdc-control' }));
  sourceClient.on('error', () => {}); // surfaces on the next query instead of crashing the worker
  await sourceClient.connect().catch((e) => {
    throw nameTimeout(e, `source shard ${sourceName}`, LINK.connectTimeoutMs);
  });
  const source = boundQueries(sourceClient, receiveTimeoutMs, `source shard ${sourceName}`);
  let untilLsn = opts.untilLsn;
  alive();
  let targetClient: PoolClient | undefined;
  let target: (PoolClient & { timedOut: boolean }) | undefined;
  let targetBroken = false;
  let locked = false;
  let stream: ReplicationStream | undefined;
  let applier: ChangeApplier | undefined;
  const lockKey = applyLockKey(opts.moveId, opts.stream);
  const onTargetError = () => {
    targetBroken = true;
  };
  try {
    if (opts.untilSourceNow) untilLsn = await currentWalLsn(source);
    targetClient = await opts.target.connect().catch((e) => {
      throw nameTimeout(e, `target shard ${targetName}`, opts.target.options.connectionTimeoutMillis ?? 0);
    });
    // A checked-out client with no 'error' listener turns a dropped connection (e.g. a takeover by a
    // newer session) into an uncaught exception; the failure surfaces on our next query instead.
    targetClient.on('error', onTargetError);
    target = boundQueries(targetClient, applyQueryTimeoutMs, `target shard ${targetName}`);
    alive();
    // Install only when missing: concurrent CREATE OR REPLACE FUNCTION can fail ("tuple concurrently updated").
    if ((await target.query<{ missing: boolean }>("select to_regprocedure('shardctl.enter_data_plane()') is null as missing")).rows[0].missing) {
      await installShardSchema(target);
    }
    // One apply per (move, stream), taken before reading the row: the skip decision relies on nobody
    // else advancing it. A previous session is ended here, so its last commit is visible below.
    await acquireApplyLock(target, lockKey);
    locked = true;
    const stored = await readAppliedLsn(target, opts.moveId, opts.stream);
    const slot = await slotStatus(source, opts.slot);
    alive();
    if (!slot) {
      throw new ShardctlError(
        'PreconditionFailed',
        `replication slot ${opts.slot} does not exist on the source: create it (ensurePublicationAndSlot) before copying`,
        { slot: opts.slot },
      );
    }
    // We hold the apply lock, so a walsender on our slot belongs to a dead apply session (a zombie).
    if (slot.activePid !== null) await releaseSlot(source, opts.slot);
    // The copy's done positions, only for the stream the copy feeds (the reverse stream's target never held a copy of this move).
    const streamKey = `${opts.moveId}/${opts.stream}`;
    const safeAfter = new Map<string, string>();
    if (opts.stream === 'forward' && !upsertsOnly.has(streamKey)) {
      for (const t of await copyProgress(target, opts.moveId)) if (t.done && t.doneAtLsn) safeAfter.set(t.table, t.doneAtLsn);
    }
    applier = new ChangeApplier(
      target,
      opts.moveId,
      opts.stream,
      stored ? normalizeLsn(stored) : null,
      applyQueryTimeoutMs,
      {
        safeAfter,
        client: targetClient,
        timeoutMs: applyQueryTimeoutMs,
        refuse: () => upsertsOnly.add(streamKey),
      },
      opts.subUnit,
    );
    const a = applier;
    // The slot delivers nothing before its confirmed position, so we stand at least there (nothing
    // stored yet, or a stale row older than the slot). Never acknowledging below it matters: moving
    // confirmed_flush_lsn back could make the server decode transactions it only partly retains.
    const floor = slot.confirmedFlushLsn;
    const position = () => (a.applied !== null && compareLsn(a.applied, floor) > 0 ? a.applied : floor);

    let stopReason: StopReason;
    let firstDeliveryAt: number | null = null;
    let loopEndedAt: number | null = null;
    let caughtUpSince: number | null = null;
    let everCaughtUp = false;
    let lastProgressAt = 0;
    const report = async (force = false) => {
      if (!opts.onProgress || (!force && Date.now() - lastProgressAt < PROGRESS_INTERVAL_MS)) return;
      lastProgressAt = Date.now();
      await opts.onProgress({
        appliedLsn: position(),
        transactionsApplied: a.stats.transactionsApplied,
        rowsApplied: a.stats.rowsApplied,
        caughtUp: caughtUpSince !== null,
        bytesReceived: stream?.bytesReceived ?? 0,
      });
    };

    if (untilLsn && a.applied && compareLsn(a.applied, untilLsn) >= 0) {
      stopReason = 'until';
    } else {
      const s = new ReplicationStream({
        dsn: opts.sourceDsn,
        slot: opts.slot,
        publication: opts.publication,
        startLsn: a.applied ?? '0/0',
        maxQueueBytes: opts.maxTxBytes ?? DEFAULT_QUEUE_BYTES,
        applicationName: `shardctl-apply`,
        receiveTimeoutMs,
        durableLsn: position(),
        sourceName,
      });
      stream = s;
      s.start();
      const deadline = opts.deadline ?? new RoundDeadline(opts.maxDurationMs, startedAt);
      const transactionDeadline = startedAt + Math.max(opts.maxTransactionMs ?? DEFAULT_MAX_TRANSACTION_MS, 2 * opts.maxDurationMs);
      let lastItemAt = Date.now();
      // The fence marker was in the source transaction in hand / in one applied (or already covered) since.
      let markerInTx = false;
      let markerReached = false;
      // A keepalive received with no transaction open vouches that every commit before its position
      // was delivered (and, being processed in order, applied): it may be recorded as applied.
      let vouched: string | null = null;
      let pingTarget: string | null = null;
      let lastPingAt = 0;
      let lastRecordAt = 0;
      const recordVouched = async () => {
        if (vouched && (await a.recordPosition(vouched))) {
          await s.acknowledge(a.applied!);
          await report();
        }
        vouched = null;
        lastRecordAt = Date.now();
      };

      let lastCommitMs = 0;
      const commitPending = async () => {
        const t0 = Date.now();
        if (await a.commitPending()) {
          lastCommitMs = Date.now() - t0;
          await s.acknowledge(a.applied!); // durable now: the slot may release it
          await report();
        }
      };

      // A full group with more already waiting: sent without waiting for the target (see
      // ChangeApplier.commitPipelined); the previous one is acknowledged once its outcome is read.
      const commitPipelined = async () => {
        const t0 = Date.now();
        const before = a.applied;
        if (await a.commitPipelined()) lastCommitMs = Date.now() - t0;
        if (a.applied !== null && a.applied !== before) {
          await s.acknowledge(a.applied);
          await report();
        }
      };

      let sinceYield = 0;
      for (;;) {
        if (++sinceYield >= YIELD_EVERY_ITEMS) {
          sinceYield = 0;
          await yieldToIo();
        }
        const now = Date.now();
        alive();
        if (opts.deadline?.untilLsn !== undefined) untilLsn ??= opts.deadline.untilLsn;
        if (opts.signal?.aborted) {
          if (a.inTransaction) await a.rollback();
          else await commitPending();
          stopReason = 'aborted';
          break;
        }
        // Between source transactions only (the loop turns once per message).
        const throttled = !a.inTransaction && !!opts.rowsPerSecond && opts.rowsPerSecond > 0;
        if (throttled && !(untilLsn && compareLsn(a.pendingEnd ?? position(), untilLsn) >= 0)) {
          const aheadMs = ((a.stats.rowsApplied + a.inFlightRows + a.pendingRows) / opts.rowsPerSecond!) * 1000 - (now - startedAt);
          if (aheadMs > 0) {
            await commitPending();
            // Throttled past the budget: stop here; the rest waits in the slot for the next round.
            if (now + aheadMs >= deadline.softAt) {
              stopReason = 'deadline';
              break;
            }
            await sleep(Math.min(aheadMs, PING_INTERVAL_MS));
            continue;
          }
        }
        if (!a.inTransaction) {
          const reachedUntil = markerReached || (!!untilLsn && compareLsn(a.pendingEnd ?? position(), untilLsn) >= 0);
          const idle = opts.idleStopMs !== undefined && caughtUpSince !== null && now - caughtUpSince >= opts.idleStopMs;
          const late = now >= deadline.softAt;
          // Group commit: the target transaction stays open only while more is already waiting.
          if (a.pendingTransactions > 0 || a.commitInFlight) {
            if (reachedUntil || idle || late || s.queuedItems === 0) await commitPending();
            else if (a.pendingTransactions > 0 && groupFull(a, lastCommitMs)) await commitPipelined();
          }
          if (reachedUntil || idle || late) {
            stopReason = reachedUntil ? 'until' : idle ? 'idle' : 'deadline';
            break;
          }
          if (s.queuedItems === 0 && now - lastPingAt >= PING_INTERVAL_MS) {
            // Where the source is now; the walsender's answer to the ping says whether we got there.
            pingTarget = await currentWalLsn(source);
            lastPingAt = now;
            await s.acknowledge(position(), true);
          }
        } else if (now >= deadline.hardAt && (now - lastItemAt >= STALLED_MS || now >= transactionDeadline)) {
          await a.rollback();
          stopReason = 'deadline';
          break;
        }

        const item = s.takeNow() ?? (await s.next(Math.max(1, Math.min(PING_INTERVAL_MS, deadline.softAt - now))));
        if (!item) continue;
        lastItemAt = Date.now();
        firstDeliveryAt ??= lastItemAt;
        if (item.kind === 'keepalive') {
          if (!a.inTransaction) {
            await commitPending(); // a position is vouched for only with everything before it durable
            if (compareLsn(item.walEnd, position()) > 0) vouched = vouched ? maxLsn(vouched, item.walEnd) : item.walEnd;
            if (pingTarget && compareLsn(item.walEnd, pingTarget) >= 0 && caughtUpSince === null) {
              caughtUpSince = Date.now();
              if (!everCaughtUp) {
                everCaughtUp = true;
                opts.onCaughtUp?.();
              }
            }
            const reachesUntil = !!(vouched && untilLsn && compareLsn(vouched, untilLsn) >= 0);
            if (vouched && (item.replyRequested || reachesUntil || Date.now() - lastRecordAt >= RECORD_INTERVAL_MS)) {
              await recordVouched();
              continue;
            }
          }
          if (item.replyRequested) await s.acknowledge(position());
          continue;
        }
        const msg = item.msg;
        switch (msg.tag) {
          case 'begin':
            caughtUpSince = null;
            pingTarget = null;
            markerInTx = false;
            await a.begin(msg.finalLsn);
            break;
          case 'commit':
            await a.commit(msg.endLsn);
            if (markerInTx) markerReached = true;
            markerInTx = false;
            break;
          case 'message':
            if (opts.untilMarker !== undefined && msg.prefix === FENCE_MARKER_PREFIX && msg.content === opts.untilMarker) {
              // Transactional: reached once its transaction commits (then applied with it).
              if (msg.transactional) markerInTx = true;
              else markerReached = true;
            }
            break;
          case 'relation':
            await a.relationChanged(msg.relation);
            break;
          case 'insert':
            if (!a.applyInsertNow(msg)) await a.apply(msg);
            break;
          case 'update':
          case 'delete':
          case 'truncate':
            await a.apply(msg);
            break;
          default:
            break; // origin, type, logical messages: nothing to apply
        }
      }
      if (!a.inTransaction) {
        await commitPending();
        if (vouched) await recordVouched();
      }
      loopEndedAt = Date.now();
    }

    const appliedLsn = position();
    opts.onStopped?.({ appliedLsn, caughtUp: stopReason === 'until' || caughtUpSince !== null, stopReason });
    const lagBytes = await walBytesSince(source, appliedLsn);
    await report(true);
    return {
      ...a.stats,
      appliedLsn,
      caughtUp: stopReason === 'until' || caughtUpSince !== null,
      lagBytes,
      stopReason,
      bytesReceived: stream?.bytesReceived ?? 0,
      backpressurePauses: stream?.pauses ?? 0,
      streamingMs: firstDeliveryAt !== null && loopEndedAt !== null ? loopEndedAt - firstDeliveryAt : 0,
    };
  } catch (e) {
    // Nothing uncommitted may go back to the pool; what was not committed is redelivered next time.
    if (applier?.targetTransactionOpen || applier?.inTransaction) await applier.rollback().catch(() => (targetBroken = true));
    throw e;
  } finally {
    // A source that stopped answering (the stream's deadline, a control statement's bound) is not
    // asked anything more: each question would wait out its own bound.
    const sourceGone = !!stream?.failed || source.timedOut;
    if (stream) {
      await stream.stop();
      // The walsender exits asynchronously after we hang up; the caller may drop or reuse the slot next.
      if (!sourceGone) await waitSlotInactive(source, opts.slot, 5000).catch(() => false);
    }
    if (targetClient) {
      if (locked && !target?.timedOut) await releaseApplyLock(target!, lockKey).catch(() => (targetBroken = true));
      targetClient.off('error', onTargetError);
      targetClient.release(targetBroken || !!target?.timedOut || !!applier?.broken);
    }
    await endSession(sourceClient, sourceGone ? 0 : 2000);
  }
}

/** Ends a dedicated session; a server that does not see the goodbye within `ms` gets its socket destroyed instead. */
async function endSession(c: Client, ms: number): Promise<void> {
  const ended = c.end().then(
    () => true,
    () => true,
  );
  if (ms > 0 && (await Promise.race([ended, sleep(ms, false, { ref: false })]))) return;
  (c as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
}
