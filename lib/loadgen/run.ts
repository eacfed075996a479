// The load generator: `concurrency` slots share a ticket clock paced at `rate` ops/s for
// `durationMs`, writing and reading through the router and logging every write's outcome.
// 'ack' is logged only after withTenant returned (COMMIT done); 'refused' only when the
// transaction certainly rolled back; anything else is 'unknown' (see classify.ts).
import { setTimeout as delay } from 'node:timers/promises';
import { performance } from 'node:perf_hooks';
import type { Config } from '../config';
import { validateTenantId } from '../ids';
import { invalidInput } from '../errors';
import { classifyFailure, errorMessage, errorTypeOf } from './classify';
import { LOAD_TABLES, LogWriter, blobWritesOf, type BlobWrites, type LoadTable } from './log';
import { LOAD_SCHEMA, applyWrite, diffRow, observedState, readRows, setDocumentBlob } from './model';
import { PlannedRead, PlannedWrite, SlotPlanner } from './plan';
import { S3For, blobsOfTransaction, shardOfTransaction, TenantGrant, TenantRouter } from './route';
import { blobNameOf } from '../blobs/fenced';
import { Router } from '../router';
import { ownedClients } from './clients';
import { LatencyRecorder, LoadgenStats, formatStats, zeroOutcomes } from './stats';

export interface LoadgenOptions {
  config: Config;
  /** Default: a router of its own, created from config and closed at the end. */
  router?: TenantRouter;
  /** Default: S3 clients of its own from config. */
  s3For?: S3For;
  tenants: string[];
  /** Target ops per second (reads and writes together). */
  rate: number;
  durationMs: number;
  logFile: string;
  concurrency?: number;
  /** Seeds the op mix (keys and contents are always fresh). */
  seed?: number;
  /** Stops starting new ops; in-flight ops finish and are logged. */
  signal?: AbortSignal;
  readFraction?: number;
  /** Size of the large (TOASTed) document bodies. */
  bodyBytes?: number;
  /** Writes a 'pending' record before each write, so a killed loadgen leaves its in-flight ops ambiguous rather than unlogged. */
  intents?: boolean;
  /** Per-op router deadline (defaults to the router's). */
  deadlineMs?: number;
  grant?: TenantGrant;
  /**
   * How blob ops write objects. 'direct' (default): a fresh object key per put, PUT fenced by the
   * transaction before the row names it, deleted in a second transaction after the row cleared it
   * (the application keeps the key). 'index': through the blob index (lib/blobs/fenced.ts
   * write/unlink): a new immutable version recorded in shardctl.blob_index by the row's own
   * transaction, and a delete that unlinks the name in that transaction (the object is the collector's).
   * An overwrite is then a new version of the document's name, not a new name.
   */
  blobWrites?: BlobWrites;
  /** The schema of loadgen's tables (accounts, documents, events); default `public` (the demo schema). */
  schema?: string;
  /** false: no blob ops (a split tenant's blob writes are refused: it may hold no blobs). Default true. */
  blobOps?: boolean;
}

/**
 * The loadgen tables whose rows carry their split key: those config.tenant.splitColumns gives a
 * split column, which must be `id` (the row's key, known before the write; the router names the
 * sub-unit from it, and verify finds the row's owner by it). Any other split column is refused.
 */
export function loadSplitTables(config: Pick<Config, 'tenant'>, schema = LOAD_SCHEMA): Set<LoadTable> {
  const out = new Set<LoadTable>();
  for (const table of LOAD_TABLES) {
    const col = config.tenant.splitColumns?.[`${schema}.${table}`];
    if (col === undefined) continue;
    if (col !== 'id') throw invalidInput(`loadgen writes ${schema}.${table} with its id as the split key, but config.tenant.splitColumns names ${col}`);
    out.add(table);
  }
  return out;
}

export interface LoadgenHandle {
  /** Live counters; latency summaries are filled in when the run ends. */
  stats: LoadgenStats;
  done: Promise<LoadgenStats>;
  stop(): void;
  /** Latency histograms (power-of-two ms buckets) for reports. */
  histograms(): { read: Array<[number, number]>; write: Array<[number, number]> };
}

/** Sleeps ms, or less if the signal aborts first (an abort ends the wait, it is not an error). */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return delay(Math.max(0, ms), undefined, { signal }).catch(() => {});
}

export function startLoadgen(opts: LoadgenOptions): LoadgenHandle {
  if (!opts.tenants.length) throw invalidInput('loadgen needs at least one tenant');
  opts.tenants.forEach(validateTenantId);
  if (!(opts.rate > 0)) throw invalidInput(`rate must be > 0 ops/s (got ${opts.rate})`);
  if (!(opts.durationMs > 0)) throw invalidInput(`duration must be > 0 (got ${opts.durationMs} ms)`);
  const concurrency = Math.max(1, Math.floor(opts.concurrency ?? 4));
  const seed = opts.seed ?? Math.floor(Math.random() * 2 ** 31);
  const grant = opts.grant ?? { tenants: opts.tenants };
  const indexed = blobWritesOf(opts.blobWrites) === 'index';
  const log = new LogWriter(opts.logFile);
  const byOp = { insert: zeroOutcomes(), update: zeroOutcomes(), delete: zeroOutcomes(), blob_put: zeroOutcomes(), blob_delete: zeroOutcomes() };
  const stats: LoadgenStats = {
    run: log.run,
    logFile: opts.logFile,
    tenants: opts.tenants,
    rate: opts.rate,
    durationMs: opts.durationMs,
    elapsedMs: 0,
    ops: 0,
    reads: { ok: 0, failed: 0 },
    readMismatches: 0,
    readMismatchSamples: [],
    writes: zeroOutcomes(),
    byOp,
    errorsByType: {},
    latency: { read: new LatencyRecorder().summary(), write: new LatencyRecorder().summary() },
    stopped: 'duration',
  };
  const lat = { read: new LatencyRecorder(), write: new LatencyRecorder() };
  const stopper = new AbortController();
  const onAbort = () => {
    stats.stopped = 'aborted';
    stopper.abort();
  };
  if (opts.signal?.aborted) onAbort();
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  const countError = (e: unknown) => {
    const t = errorTypeOf(e);
    stats.errorsByType[t] = (stats.errorsByType[t] ?? 0) + 1;
    return t;
  };
  const routerOpts = opts.deadlineMs ? { deadlineMs: opts.deadlineMs } : undefined;
  const schema = opts.schema ?? LOAD_SCHEMA;
  const splitTables = loadSplitTables(opts.config, schema);
  // A row's split key is its id: the router opens the transaction for the row's sub-unit when its tenant is split (ignored otherwise).
  const callOpts = (table: LoadTable, key: string) => (splitTables.has(table) ? { ...routerOpts, splitKey: key } : routerOpts);
  const clients = ownedClients(opts.config, { s3For: opts.s3For });
  let ownRouter: Router | undefined;
  let router: TenantRouter = opts.router!;

  async function runWrite(slot: number, planner: SlotPlanner, w: PlannedWrite) {
    const base = {
      tenant: w.tenant,
      table: w.table,
      key: w.key,
      op: w.op,
      value: w.op === 'delete' || w.op === 'blob_delete' ? null : w.op === 'blob_put' ? w.blob!.sha256 : w.version!,
      ...(w.table === 'documents' && (w.op === 'insert' || w.op === 'update') ? { bodySha: w.after.bodySha ?? null } : {}),
      ...(w.blob
        ? { blobKey: w.blob.blobKey, ...(w.blob.replaces ? { replaces: w.blob.replaces } : {}), ...(w.blob.overwrites ? { overwrites: true as const } : {}) }
        : {}),
      ...(w.blobDelete ? { blobKey: w.blobDelete.blobKey } : {}),
      ...(indexed && (w.blob || w.blobDelete) ? { indexed: true as const } : {}),
      slot,
    };
    if (opts.intents) log.append({ ...base, status: 'pending' });
    let commitSent = false;
    let shard: string | undefined;
    let unit: string | undefined;
    const t0 = performance.now();
    try {
      await router.withTenant(
        w.tenant,
        grant,
        'write',
        async (tx, route) => {
          commitSent = false;
          shard = shardOfTransaction(opts.config, tx, route);
          const routed = (route as { unit?: unknown } | undefined)?.unit;
          unit = typeof routed === 'string' ? routed : undefined;
          if (w.blob) {
            // The object goes into the bucket of the shard this transaction runs on, fenced by it
            // and before the row naming it can commit there: an acked blob_key never points at a
            // missing object, and a cutover's fence waits for the upload.
            const blobs = blobsOfTransaction(opts.config, tx, route, w.tenant, clients.s3For);
            const name = blobNameOf(w.tenant, w.blob.blobKey);
            if (indexed) await blobs.write(name, w.blob.content);
            else await blobs.put(name, w.blob.content);
            await setDocumentBlob(tx, w.tenant, w.key, w.blob.blobKey, schema);
          } else if (w.blobDelete) {
            await setDocumentBlob(tx, w.tenant, w.key, null, schema);
            // Through the index the name goes with the row, atomically.
            if (indexed) await blobsOfTransaction(opts.config, tx, route, w.tenant, clients.s3For).unlink(blobNameOf(w.tenant, w.blobDelete.blobKey));
          } else {
            await applyWrite(
              tx,
              w.tenant,
              { table: w.table, op: w.op as 'insert' | 'update' | 'delete', key: w.key, version: w.version ?? 0, body: w.body },
              schema,
            );
          }
          commitSent = true;
        },
        callOpts(w.table, w.key),
      );
      const latencyMs = Math.round((performance.now() - t0) * 10) / 10;
      lat.write.add(latencyMs);
      // A blob delete counts once the row no longer names the object; the object itself goes
      // only then (a refused delete must leave it), in a fenced transaction of its own on the
      // tenant's owner now (the unit may have moved since the row committed).
      // Its outcome: true, false (refused: the object is untouched), or 'unknown' (the call failed
      // after it may have deleted it, e.g. a connection lost around its COMMIT).
      let objectDeleted: boolean | 'unknown' | undefined = w.blobDelete && indexed ? true : undefined;
      if (w.blobDelete && shard && !indexed) {
        const name = blobNameOf(w.tenant, w.blobDelete.blobKey);
        objectDeleted = await router
          .withTenant(
            w.tenant,
            grant,
            'write',
            (tx, route) => blobsOfTransaction(opts.config, tx, route, w.tenant, clients.s3For).delete(name),
            callOpts(w.table, w.key),
          )
          .then(
            () => true as const,
            (e) => (classifyFailure(e, true) === 'refused' ? false : ('unknown' as const)),
          );
      }
      log.append({ ...base, status: 'ack', latencyMs, shard, ...(unit ? { unit } : {}), ...(objectDeleted !== undefined ? { objectDeleted } : {}) });
      planner.settle(w, 'ack');
      stats.writes.ack++;
      byOp[w.op].ack++;
    } catch (e) {
      const latencyMs = Math.round((performance.now() - t0) * 10) / 10;
      lat.write.add(latencyMs);
      const status = classifyFailure(e, commitSent);
      const errorType = countError(e);
      log.append({ ...base, status, error: errorMessage(e), errorType, latencyMs, shard, ...(unit ? { unit } : {}) });
      // A write that found its row missing proves the slot's view is wrong: stop using the key.
      planner.settle(w, errorType === 'RowMissing' ? 'unknown' : status);
      stats.writes[status]++;
      byOp[w.op][status]++;
    }
  }

  async function runRead(r: PlannedRead) {
    const t0 = performance.now();
    try {
      const rows = await router.withTenant(r.tenant, grant, 'read', (tx) => readRows(tx, r.tenant, r.table, [r.key], schema), callOpts(r.table, r.key));
      lat.read.add(Math.round((performance.now() - t0) * 10) / 10);
      stats.reads.ok++;
      const got = rows.get(r.key);
      if (!got || diffRow(r.table, r.expected, got).length) {
        stats.readMismatches++;
        if (stats.readMismatchSamples.length < 20) {
          stats.readMismatchSamples.push({
            tenant: r.tenant,
            table: r.table,
            key: r.key,
            expected: r.expected,
            actual: got ? observedState(r.table, got) : 'absent',
          });
        }
      }
    } catch (e) {
      lat.read.add(Math.round((performance.now() - t0) * 10) / 10);
      stats.reads.failed++;
      countError(e);
    }
  }

  let started = Date.now();
  let end = started + opts.durationMs;
  const intervalMs = 1000 / opts.rate;
  let ticket = 0;
  async function slotLoop(slot: number) {
    const planner = new SlotPlanner(slot, opts.tenants, seed, {
      readFraction: opts.readFraction ?? 0.3,
      bodyBytes: opts.bodyBytes ?? 24_000,
      maxLiveKeys: 40,
      overwriteInPlace: indexed,
      blobOps: opts.blobOps !== false,
    });
    for (;;) {
      const due = started + ticket++ * intervalMs;
      if (due >= end || stopper.signal.aborted) return;
      await sleep(due - Date.now(), stopper.signal);
      if (stopper.signal.aborted) return;
      stats.ops++;
      const op = planner.next();
      if (op.kind === 'read') await runRead(op);
      else await runWrite(slot, planner, op);
    }
  }

  const done = (async () => {
    try {
      if (!opts.router) {
        // Its pools sized to the slots: a slot never waits for a connection behind another slot.
        router = ownRouter = await Router.create(opts.config, { poolMax: concurrency });
        started = Date.now();
        end = started + opts.durationMs;
      }
      await Promise.all(Array.from({ length: concurrency }, (_, i) => slotLoop(i)));
    } finally {
      log.close();
      opts.signal?.removeEventListener('abort', onAbort);
      await ownRouter?.close();
      await clients.close();
    }
    stats.elapsedMs = Date.now() - started;
    stats.latency = { read: lat.read.summary(), write: lat.write.summary() };
    return stats;
  })();
  return {
    stats,
    done,
    stop: () => onAbort(),
    histograms: () => ({ read: lat.read.histogram(), write: lat.write.histogram() }),
  };
}

/** Runs to the end (duration or abort) and returns the summary. */
export async function runLoadgen(opts: LoadgenOptions): Promise<LoadgenStats> {
  return startLoadgen(opts).done;
}

export { formatStats };
