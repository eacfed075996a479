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
}

export async function measureCutoverPauses(config: Config, opts: { rows: number; moves: number; blobWrites: BlobWrites }): Promise<PauseSweepResult> {
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
    try {
      const order = ['shard-b', 'shard-c', 'shard-a'];
      for (let i = 0; i < opts.moves; i++) {
        const target = order[i % order.length];
        const input = moveInputFor(config, { tenant, target, soakSeconds: 1, requestedBy: 'bench', rowsPerSecond: 0 });
        const h = await startMove(client, taskQueue, input);
        const s: M.MoveStatus = await h.result();
        pauses.push(s.cutoverPauseMs ?? NaN);
        abortedPauses.push(...(s.cutoverAbortedPausesMs ?? []));
        phases.push(s.phase);
        log(
          `cutover sweep ${opts.rows} rows: move ${i + 1} -> ${target} ${s.phase}, pause ${s.cutoverPauseMs} ms, steps ${JSON.stringify(s.cutoverSteps ?? {})}, blob delta ${JSON.stringify(s.cutoverBlobSync ?? null)}` +
            (s.cutoverAbortedPausesMs?.length ? `, aborted attempts' pauses ${s.cutoverAbortedPausesMs.join(', ')} ms` : '') +
            (s.cutoverWritersWaitedMs ? `, waited ${s.cutoverWritersWaitedMs} ms for long writers before freezing` : ''),
        );
      }
    } finally {
      lg.stop();
      await lg.done;
    }
    const v = await verifyLog({ logFile, config, directory: deps.directoryPool(), shardPool: deps.shardPool, s3For: deps.s3For });
    const failed =
      v.missing.length + v.wrongValue.length + v.presentButRefused.length + v.presentButDeleted.length + v.blobMissing.length + v.blobPresentButDeleted.length;
    const acked = readLog(logFile).filter((r) => r.status === 'ack').length;
    if (v.blobMissing.length) log(`cutover sweep ${opts.rows} rows: blobs missing or wrong after the moves: ${JSON.stringify(v.blobMissing.slice(0, 5))}`);
    return { rows: opts.rows, blobWrites: opts.blobWrites, pauses, abortedPauses, phases, ackedWrites: acked, failedAckedWrites: failed };
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
  const size = `${r.rows} rows, blobs ${r.blobWrites === 'index' ? 'via index' : 'direct'}`;
  return [
    absoluteFigure(`cutover pause p99, ${size}`, 'ms', quantile(all, 0.99), { op: '<', value: 300 }, label),
    absoluteFigure(`cutover pause max, ${size}`, 'ms', Math.max(...all), { op: '<', value: 1000 }, label),
    absoluteFigure(`failed acked writes, ${size}`, 'writes', r.failedAckedWrites, { op: '<=', value: 0 }, `${r.ackedWrites} acked`),
  ];
}
