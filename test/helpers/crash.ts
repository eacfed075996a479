// The crash suite's harness: real worker child processes (killed with SIGKILL at armed fault
// points), live loadgen on the moving tenant and a bystander, and the invariant checks of
// DESIGN.md §5 after each case. Each case returns a row of the suite's report table.
import { spawn, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect, beforeAll, afterAll, afterEach } from 'vitest';
import type { WorkflowHandle } from '@temporalio/client';
import { testConfig, uniq, shardPool, directoryPool, closePools } from './stack';
import { buildWorkflowBundle } from '../../worker';
import * as H from './move';
import { Router, type RouterOptions } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { startLoadgen, verifyLog, readLog, LoadgenHandle, snapshotUnit, unitLeftovers, UnitBaseline } from '../../lib/loadgen';
import type { BlobWrites, VerifyOptions, VerifyReport } from '../../lib/loadgen';
import { shardByName } from '../../lib/config';
import type { MoveStatus } from '../../workflows/messages';

const ROOT = path.join(__dirname, '..', '..');
export const ARTIFACTS = path.join(ROOT, 'test-results');
export const BUNDLE = path.join(ROOT, '.dev', 'workflow-bundle.js');

export interface ChildWorker {
  proc: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  ready: Promise<void>;
  log: string;
}

// Every child worker and every traffic run this process started and has not stopped, so a case
// that timed out (vitest cannot stop its body) leaves nothing running into the next case.
const liveWorkers = new Set<ChildWorker>();
const liveTraffic = new Set<Traffic>();

/** afterEach/afterAll: SIGKILL every child worker still alive (but `keep`) and stop every traffic run. */
export async function stopStragglers(keep: (ChildWorker | undefined)[] = []): Promise<string[]> {
  const stopped: string[] = [];
  for (const tr of [...liveTraffic]) {
    stopped.push(`traffic ${tr.logFile}`);
    await tr.stop();
  }
  for (const w of [...liveWorkers]) {
    if (keep.includes(w)) continue;
    liveWorkers.delete(w);
    if (w.proc.exitCode !== null || w.proc.signalCode !== null) continue;
    stopped.push(`worker pid ${w.proc.pid}`);
    w.proc.kill('SIGKILL');
    await w.exited;
  }
  return stopped;
}

/** `faultAction: 'stop'` makes the armed point SIGSTOP the worker instead of killing it (the pause nemesis). */
export function spawnWorker(
  taskQueue: string,
  opts: { faultPoint?: string; faultLog?: string; faultAction?: 'kill' | 'stop'; env?: NodeJS.ProcessEnv } = {},
): ChildWorker {
  const log = path.join(ARTIFACTS, 'crash', `worker-${taskQueue}-${Date.now()}.log`);
  fs.mkdirSync(path.dirname(log), { recursive: true });
  const out = fs.openSync(log, 'a');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    SHARDCTL_WORKFLOW_BUNDLE: BUNDLE,
    SHARDCTL_FAULT_POINT: opts.faultPoint ?? '',
    SHARDCTL_FAULT_LOG: opts.faultLog ?? '',
    SHARDCTL_FAULT_ACTION: opts.faultAction ?? 'kill',
    ...opts.env,
  };
  const proc = spawn(process.execPath, [path.join(ROOT, 'cli', 'shardctl.js'), 'worker', '--task-queue', taskQueue], {
    cwd: ROOT,
    env,
    stdio: ['ignore', out, out],
  });
  fs.closeSync(out);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const ready = (async () => {
    const deadline = Date.now() + 120_000; // a loaded 2-core machine: crash cases start workers side by side
    while (Date.now() < deadline) {
      if (fs.readFileSync(log, 'utf8').includes('worker: polling')) return;
      if (proc.exitCode !== null) throw new Error(`worker exited early: ${fs.readFileSync(log, 'utf8').slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('worker did not start within 120s');
  })();
  const w = { proc, exited, ready, log };
  liveWorkers.add(w);
  void exited.then(() => liveWorkers.delete(w));
  return w;
}

export async function stopWorker(w: ChildWorker | undefined) {
  if (!w || w.proc.exitCode !== null || w.proc.signalCode !== null) return;
  w.proc.kill('SIGTERM');
  const t = setTimeout(() => w.proc.kill('SIGKILL'), 15_000);
  await w.exited;
  clearTimeout(t);
}

export interface Traffic {
  lg: LoadgenHandle;
  router: Router;
  logFile: string;
  stop(): Promise<void>;
}

/** `routerOptions`: e.g. the router's own path to the directory (the network-fault suite). */
/** `config`: the router's and loadgen's (e.g. one reaching the shards through toxiproxy links). */
export async function startTraffic(
  name: string,
  tenants: string[],
  rate = 40,
  routerOptions: RouterOptions = {},
  config = testConfig(),
  o: { blobWrites?: BlobWrites } = {},
): Promise<Traffic> {
  const router = await Router.create(config, routerOptions);
  const deps = createDeps(config);
  const logFile = path.join(ARTIFACTS, 'crash', `${name}.jsonl`);
  fs.mkdirSync(path.dirname(logFile), { recursive: true });
  fs.rmSync(logFile, { force: true });
  const lg = startLoadgen({
    config,
    router,
    s3For: (s) => deps.s3For(s),
    tenants,
    rate,
    durationMs: 600_000,
    logFile,
    concurrency: 4,
    blobWrites: o.blobWrites,
  });
  let stopping: Promise<void> | undefined;
  const traffic: Traffic = {
    lg,
    router,
    logFile,
    stop() {
      liveTraffic.delete(traffic);
      return (stopping ??= (async () => {
        lg.stop();
        await lg.done.catch(() => {});
        await router.close();
        await deps.close();
      })());
    },
  };
  liveTraffic.add(traffic);
  return traffic;
}

/**
 * A report's pause cell: the switching attempt's write pause, then each aborted attempt's, which
 * froze the tenant's writes too (e.g. `187 (aborted 2104, 1980)`); '-' when nothing paused.
 */
export function pauseOf(s: Pick<MoveStatus, 'cutoverPauseMs' | 'cutoverAbortedPausesMs'>): string {
  const aborted = s.cutoverAbortedPausesMs ?? [];
  const last = s.cutoverPauseMs ?? '-';
  return aborted.length ? `${last} (aborted ${aborted.join(', ')})` : `${last}`;
}

export interface CaseRow {
  faultPoint: string;
  killed: boolean;
  outcome: string;
  /** The switching attempt's write pause, and each aborted attempt's (pauseOf). */
  pause: string;
  writesAcked: number;
  writesRefused: number;
  /** Writes with an unknown outcome (all tenants); reads "N ok, M failed" (every ok read consistent). */
  unknown: number | null;
  reads: string | null;
  verified: string;
  seconds: number;
}

/** The report row of a case that failed: its first line of error, and whether the first worker really died. */
export function failedRow(faultPoint: string, killed: boolean, e: unknown, t0: number): CaseRow {
  return {
    faultPoint,
    killed,
    outcome: `FAILED: ${String((e as Error)?.message ?? e)
      .split('\n')[0]
      .slice(0, 120)}`,
    pause: '-',
    writesAcked: 0,
    writesRefused: 0,
    unknown: null,
    reads: null,
    verified: '-',
    seconds: Math.round((Date.now() - t0) / 1000),
  };
}

/**
 * The hooks every crash-style suite shares: a prepared stack, the workflow bundle its child
 * workers load, a Temporal client; after each case the stragglers of a timed-out case are
 * stopped (except `keep()`); at the end `report()` runs, then everything is closed.
 */
export function crashSuite(
  o: {
    before?: () => Promise<void>;
    report?: () => void | Promise<void>;
    keep?: () => (ChildWorker | undefined)[];
    /**
     * The suite's cases run concurrently (describe.concurrent): no sweep after each case, which
     * would stop the workers and traffic of the cases still running; each case stops its own
     * (in its finally), and the sweep runs once at the end.
     */
    concurrent?: boolean;
  } = {},
) {
  let t: Awaited<ReturnType<typeof H.temporal>> | undefined;
  beforeAll(async () => {
    await H.prepareStack();
    await buildWorkflowBundle(BUNDLE);
    t = await H.temporal();
    await o.before?.();
  });
  // A case that timed out keeps running in the background: its workers and traffic must not.
  afterEach(async () => {
    if (o.concurrent) return;
    const stopped = await stopStragglers(o.keep?.() ?? []);
    if (stopped.length) process.stderr.write(`stopped after the case: ${stopped.join(', ')}\n`);
  });
  afterAll(async () => {
    await o.report?.();
    await stopStragglers();
    await t?.close();
    await closePools();
  });
  return {
    get client() {
      if (!t) throw new Error('the crash suite is not set up yet');
      return t.client;
    },
  };
}

/** The whole unit on its owner before traffic: every seeded row (count + hash) and object. */
export async function baselineOf(tenant: string): Promise<UnitBaseline> {
  const config = testConfig();
  const deps = createDeps(config);
  try {
    return await snapshotUnit({ config, tenant, directory: directoryPool(), shardPool, s3For: (s) => deps.s3For(s) });
  } finally {
    await deps.close();
  }
}

/** Rows, objects, manifest and progress rows of the unit left on a shard that does not own it. */
export async function leftoversOn(shard: string, tenant: string, moveIds: string[]): Promise<string[]> {
  const config = testConfig();
  const deps = createDeps(config);
  try {
    return await unitLeftovers({ config, tenant, pool: shardPool(shard), s3: deps.s3For(shard), bucket: shardByName(config, shard).bucket, moveIds });
  } finally {
    await deps.close();
  }
}

/**
 * What the traffic's own reads and outcomes prove: reads saw what the writer last acked
 * (loadgen compares each read with its slot's exact view), failed reads and unknown outcomes
 * stay under small bounds (a bug that turned writes "unknown" would otherwise pass verify).
 */
export function assertTraffic(traffic: Traffic, unknownOutcomes: number, o: { maxUnknown: number; maxFailedReads: number }) {
  const s = traffic.lg.stats;
  expect(s.reads.ok, 'reads that succeeded').toBeGreaterThan(0);
  expect({ readMismatches: s.readMismatches, samples: s.readMismatchSamples }).toEqual({ readMismatches: 0, samples: [] });
  expect(s.reads.failed, `failed reads (errors ${JSON.stringify(s.errorsByType)})`).toBeLessThanOrEqual(o.maxFailedReads);
  expect(unknownOutcomes, 'writes with an unknown outcome').toBeLessThanOrEqual(o.maxUnknown);
}

export const readsOf = (t: Traffic) => `${t.lg.stats.reads.ok} ok, ${t.lg.stats.reads.failed} failed`;

/** DESIGN.md §5 after a case: verify the whole unit, single owner, epochs, fences, leftovers, bystanders. */
/**
 * The whole of each unit checked against the traffic log: every seeded and acknowledged row and
 * object on its owner, no refused or deleted write present, nothing of another unit.
 */
export async function expectLogVerified(opts: VerifyOptions): Promise<VerifyReport> {
  const report = await verifyLog(opts);
  expect({
    missing: report.missing,
    wrong: report.wrongValue,
    refused: report.presentButRefused,
    deleted: report.presentButDeleted,
    blobs: report.blobMissing,
    deletedBlobs: report.blobPresentButDeleted,
    unit: report.unit,
  }).toEqual({ missing: [], wrong: [], refused: [], deleted: [], blobs: [], deletedBlobs: [], unit: [] });
  expect(report.ok).toBe(true);
  return report;
}

export async function assertInvariants(o: {
  tenant: string;
  /** Tenants beside the moving one, on the source and on the target: never disturbed. */
  bystanders: string[];
  source: string;
  target: string;
  status: MoveStatus;
  expectOwner: string;
  expectEpoch: number;
  traffic: Traffic;
  /** Baselines of the moving tenant and of every bystander, taken before the traffic. */
  baselines: UnitBaseline[];
  maxUnknown?: number;
  maxFailedReads?: number;
}): Promise<{ acked: number; refused: number; unknown: number; reads: string }> {
  const config = testConfig();
  const report = await expectLogVerified({ logFile: o.traffic.logFile, config, baselines: o.baselines });
  for (const t of [o.tenant, ...o.bystanders])
    expect(
      o.baselines.map((b) => b.tenant),
      `baseline of ${t}`,
    ).toContain(t);
  assertTraffic(o.traffic, report.unknownOutcomes, { maxUnknown: o.maxUnknown ?? 2, maxFailedReads: o.maxFailedReads ?? 0 });
  // Exactly one owner, epoch raised by exactly the number of switches.
  const p = await H.placement(o.tenant);
  expect(p).toMatchObject({ shard: o.expectOwner, epoch: o.expectEpoch, state: 'active', moveId: null });
  // The non-owner refuses writes under every epoch; the owner refuses every older one.
  const other = o.expectOwner === o.source ? o.target : o.source;
  for (let e = 1; e <= o.expectEpoch; e++) {
    expect(await H.tryWrite(other, o.tenant, e), `${other} epoch ${e}`).toBe('SC421');
    expect(await H.tryWrite(o.expectOwner, o.tenant, e), `${o.expectOwner} epoch ${e}`).toBe(e === o.expectEpoch ? 'ok' : 'SC421');
  }
  // Nothing of the move is left: slots, publications, progress rows.
  expect(await H.replicationLeftovers(o.status.moveId)).toEqual([]);
  const pr = await shardPool(o.expectOwner).query('select count(*)::int as n from shardctl.move_progress where move_id = $1', [o.status.moveId]);
  expect(pr.rows[0].n, `move_progress on ${o.expectOwner}`).toBe(0);
  // Nothing of the unit is left on the non-owner once the move is done, cancelled or rolled
  // back: no rows, no objects, no manifest or progress rows of the move.
  expect(await leftoversOn(other, o.tenant, [o.status.moveId])).toEqual([]);
  // Every bystander wrote throughout, and every one of its writes was acknowledged.
  const records = readLog(o.traffic.logFile);
  for (const b of o.bystanders) {
    const by = records.filter((r) => r.tenant === b && r.status !== 'pending');
    expect(by.length, `writes of bystander ${b}`).toBeGreaterThan(0);
    expect(by.filter((r) => r.status !== 'ack').map((r) => `${r.status} ${r.error ?? ''}`)).toEqual([]);
  }
  const mine = records.filter((r) => r.tenant === o.tenant);
  return {
    acked: mine.filter((r) => r.status === 'ack').length,
    refused: mine.filter((r) => r.status === 'refused').length,
    unknown: report.unknownOutcomes,
    reads: readsOf(o.traffic),
  };
}

export function writeReport(rows: CaseRow[], file = path.join(ARTIFACTS, 'crash-report.md')) {
  const head =
    '| fault point | worker killed | outcome | cutover pause ms | writes acked (moving tenant) | refused | unknown (all tenants) | reads (all consistent) | verify | seconds |\n|---|---|---|---|---|---|---|---|---|---|';
  const body = rows.map(
    (r) =>
      `| ${r.faultPoint} | ${r.killed ? 'SIGKILL' : 'no kill'} | ${r.outcome} | ${r.pause} | ${r.writesAcked} | ${r.writesRefused} | ${r.unknown ?? '-'} | ${r.reads ?? '-'} | ${r.verified} | ${r.seconds} |`,
  );
  const text = `${head}\n${body.join('\n')}\n`;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return text;
}

export async function waitKilled(w: ChildWorker, faultLog: string, point: string, timeoutMs = 120_000): Promise<void> {
  const t = new Promise<never>((_, rej) =>
    setTimeout(() => rej(new Error(`worker was not killed at ${point} within ${timeoutMs} ms; log ${w.log}`)), timeoutMs).unref(),
  );
  const r = await Promise.race([w.exited, t]);
  expect(r.signal).toBe('SIGKILL');
  const hits = fs
    .readFileSync(faultLog, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  expect(hits.map((h) => h.point)).toContain(point);
}

export type Handle = WorkflowHandle;
export { uniq };
