// Cutover write pause under live traffic, for `npm run bench -- --cutover`: per tenant size, one
// tenant seeded through the router is moved around the shards N times by the real workflow (soak
// 1 s, retire) while loadgen writes to it; each move's pause (moving → new active) is collected,
// and afterwards loadgen's log is verified against the owner: acknowledged writes that were lost
// or changed, and refused writes that appeared anyway, count as failed (must be 0).
import path from 'node:path';
import fs from 'node:fs';
import { Client, Connection } from '@temporalio/client';
import type { Config } from '../lib/config';
import { createDeps } from '../activities/deps';
import { startWorker } from '../worker';
import { prepareAllShards } from '../lib/shard/prepare';
import { ensureDirectory } from '../lib/directory/ensure';
import { createTenant } from '../lib/tenants';
import { Router } from '../lib/router';
import { seedTenant } from '../lib/seed';
import { readLog, startLoadgen, verifyLog, type BlobWrites } from '../lib/loadgen';
import { moveInputFor, startMove } from '../lib/moves/start';
import type * as M from '../workflows/messages';
import { log } from './measure';
import { Figure, absoluteFigure, quantile } from './figures';

export interface PauseSweepResult {
  rows: number;
  /** How the seed and loadgen wrote the tenant's objects (lib/loadgen blobWrites). */
  blobWrites: BlobWrites;
  /** Each move's cutover pause, ms (the attempt that switched). */
  pauses: number[];
  /** Pauses of attempts that froze the tenant and then aborted (unfroze and retried), ms: write pauses too. */
  abortedPauses: number[];
  /** Phases the moves ended in (all 'done' when healthy). */
  phases: string[];
  ackedWrites: number;
  failedAckedWrites: number;
  /** With a long writer (opts.longWriteMs): its transactions acknowledged, and what the cutovers waited for long writers. */
  longWrites?: { ms: number; acked: number; waitedMs: number[]; guarded: boolean };
}

/**
 * A writer of the tenant through the router that holds each of its transactions open `ms` (an
 * insert, then pg_sleep), then pauses `gapMs`: a write running long at the freeze, as the demo
 * schema's cascading delete is at 1M rows, but on every move. Returns how many it had acknowledged.
 */
function startLongWriter(router: Router, tenant: string, ms: number, gapMs = 200): { stop(): Promise<number> } {
  let stopped = false;
  let acked = 0;
  const run = (async () => {
    while (!stopped) {
      try {
        await router.withTenant(
          tenant,
          { tenants: [tenant] },
          'write',
          async (tx) => {
            await tx.query(`insert into public.events (tenant_id, kind) values ($1, 'bench-long-write')`, [tenant]);
            await tx.query('select pg_sleep($1)', [ms / 1000]);
          },
          { deadlineMs: ms + 30_000 },
        );
        acked++;
      } catch {
        // A refusal or timeout: not acknowledged, so nothing to find afterwards.
      }
      await new Promise((r) => setTimeout(r, gapMs));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await run;
      return acked;
    },
  };
}

export async function measureCutoverPauses(
  config: Config,
  opts: { rows: number; moves: number; blobWrites: BlobWrites; longWriteMs?: number },
): Promise<PauseSweepResult> {
  // Guarded: the cutover waits for long writers and bounds the raise's wait (the defaults);
  // unguarded (config limits fenceLockWaitMs 0, longWriteMs 0): one raise with the whole budget.
  const guarded = config.limits.fenceLockWaitMs > 0 || config.limits.longWriteMs > 0;
  const deps = createDeps(config);
  await prepareAllShards(config, deps.shardPool, { demoSchema: true });
  await ensureDirectory(deps.directoryPool(), config);
  const tenant = `bench-pause-${opts.rows}-${Date.now().toString(36)}`;
  await createTenant({ directory: deps.directoryPool(), shardPool: deps.shardPool, config }, { tenant, shard: 'shard-a', actor: 'bench' });
  const router = await Router.create(config);
  const taskQueue = `bench-${tenant}`;
  const w = await startWorker(config, { taskQueue });
  const connection = await Connection.connect({ address: config.temporal.address });
  const client = new Client({ connection, namespace: config.temporal.namespace });
  const logFile = path.join('tmp', `${tenant}.jsonl`);
  fs.mkdirSync('tmp', { recursive: true });
  const pauses: number[] = [];
  const abortedPauses: number[] = [];
  const phases: string[] = [];
  const waitedMs: number[] = [];
  let longAcked = 0;
  try {
    log(`cutover sweep: seeding ${opts.rows} rows for ${tenant}, blobs written ${opts.blobWrites === 'index' ? 'through the blob index' : 'directly'}`);
    await seedTenant({ router, s3For: deps.s3For, config, tenant, rows: opts.rows, blobs: 20, batchRows: 1000, blobWrites: opts.blobWrites });
    const lg = startLoadgen({
      config,
      router,
      s3For: deps.s3For,
      tenants: [tenant],
      rate: 50,
      durationMs: 3_600_000,
      logFile,
      concurrency: 4,
      blobWrites: opts.blobWrites,
    });
    const long = opts.longWriteMs ? startLongWriter(router, tenant, opts.longWriteMs) : undefined;
    try {
      const order = ['shard-b', 'shard-c', 'shard-a'];
      for (let i = 0; i < opts.moves; i++) {
        const target = order[i % order.length];
        const input = moveInputFor(config, { tenant, target, soakSeconds: 1, requestedBy: 'bench', rowsPerSecond: 0 });
        const h = await startMove(client, taskQueue, input);
        const s: M.MoveStatus = await h.result();
        pauses.push(s.cutoverPauseMs ?? NaN);
        abortedPauses.push(...(s.cutoverAbortedPausesMs ?? []));
        waitedMs.push(s.cutoverWritersWaitedMs ?? 0);
        phases.push(s.phase);
        log(
          `cutover sweep ${opts.rows} rows: move ${i + 1} -> ${target} ${s.phase}, pause ${s.cutoverPauseMs} ms, steps ${JSON.stringify(s.cutoverSteps ?? {})}, blob delta ${JSON.stringify(s.cutoverBlobSync ?? null)}` +
            (s.cutoverAbortedPausesMs?.length ? `, aborted attempts' pauses ${s.cutoverAbortedPausesMs.join(', ')} ms` : '') +
            (s.cutoverWritersWaitedMs ? `, waited ${s.cutoverWritersWaitedMs} ms for long writers before freezing` : ''),
        );
      }
    } finally {
      if (long) longAcked = await long.stop();
      lg.stop();
      await lg.done;
    }
    const v = await verifyLog({ logFile, config, directory: deps.directoryPool(), shardPool: deps.shardPool, s3For: deps.s3For });
    const failed =
      v.missing.length + v.wrongValue.length + v.presentButRefused.length + v.presentButDeleted.length + v.blobMissing.length + v.blobPresentButDeleted.length;
    const acked = readLog(logFile).filter((r) => r.status === 'ack').length;
    if (v.blobMissing.length) log(`cutover sweep ${opts.rows} rows: blobs missing or wrong after the moves: ${JSON.stringify(v.blobMissing.slice(0, 5))}`);
    let longFailed = 0;
    if (long) {
      // Every acknowledged long write is on the tenant's owner now (a refused one may not be).
      const owner = (await deps.directoryPool().query('select shard from shardctl.units where unit = $1', [tenant])).rows[0].shard as string;
      const n = (await deps.shardPool(owner).query(`select count(*)::int as n from public.events where tenant_id = $1 and kind = 'bench-long-write'`, [tenant]))
        .rows[0].n;
      longFailed = Math.max(0, longAcked - n);
      log(
        `cutover sweep ${opts.rows} rows, long writes of ${opts.longWriteMs} ms (${guarded ? 'guarded' : 'unguarded'}): ${longAcked} acknowledged, ${n} on ${owner}`,
      );
    }
    return {
      rows: opts.rows,
      blobWrites: opts.blobWrites,
      pauses,
      abortedPauses,
      phases,
      ackedWrites: acked + longAcked,
      failedAckedWrites: failed + longFailed,
      ...(opts.longWriteMs ? { longWrites: { ms: opts.longWriteMs, acked: longAcked, waitedMs, guarded } } : {}),
    };
  } finally {
    await router.close();
    await w.shutdown();
    await connection.close();
    await deps.close();
  }
}

/**
 * The goals for one tenant size: p99 < 300 ms, max < 1 s, no failed acknowledged write.
 * Every pause the tenant felt counts: an aborted attempt froze its writes as long as it held.
 */
export function pauseFigures(r: PauseSweepResult): Figure[] {
  const all = [...r.pauses, ...r.abortedPauses];
  const label = `${r.pauses.length} moves under loadgen` + (r.abortedPauses.length ? `, ${r.abortedPauses.length} aborted attempt(s) counted` : '');
  const lw = r.longWrites;
  const size =
    `${r.rows} rows, blobs ${r.blobWrites === 'index' ? 'via index' : 'direct'}` + (lw ? `, ${lw.ms} ms writes${lw.guarded ? '' : ', unguarded'}` : '');
  // Unguarded (the cutover's long-write guard turned off) is the baseline the guard is judged by: no goal.
  const goal = (value: number) => (lw && !lw.guarded ? undefined : { op: '<' as const, value });
  const waited = lw ? `; waited for long writers ${lw.waitedMs.join(', ')} ms` : '';
  return [
    absoluteFigure(`cutover pause p99, ${size}`, 'ms', quantile(all, 0.99), goal(300), label + waited),
    absoluteFigure(`cutover pause max, ${size}`, 'ms', Math.max(...all), goal(1000), label),
    absoluteFigure(`failed acked writes, ${size}`, 'writes', r.failedAckedWrites, { op: '<=', value: 0 }, `${r.ackedWrites} acked`),
  ];
}
