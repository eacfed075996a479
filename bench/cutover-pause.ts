// Cutover write pause under live traffic: moves one tenant around the shards N times (soak 1 s,
// retire), with loadgen writing to it, and prints each move's pause and where it went, then the
// median and max against a baseline measured in the same run — the p99 latency of an ordinary
// write outside the cutovers. Usage: npx tsx bench/cutover-pause.ts [moves=6] [rows=2000]
import path from 'node:path';
import fs from 'node:fs';
import { Client, Connection } from '@temporalio/client';
import { loadConfig } from '../lib/config';
import { createDeps } from '../activities/deps';
import { startWorker } from '../worker';
import { prepareAllShards } from '../lib/shard/prepare';
import { ensureDirectory } from '../lib/directory/ensure';
import { createTenant } from '../lib/tenants';
import { getPlacement } from '../lib/directory/placements';
import { Router } from '../lib/router';
import { seedTenant } from '../lib/seed';
import { startLoadgen, readLog } from '../lib/loadgen';
import { moveInputFor, startMove } from '../lib/moves/start';
import * as M from '../workflows/messages';

require('../lib/quiet-warnings.js');

async function main() {
  const moves = Number(process.argv[2] ?? 6);
  const rows = Number(process.argv[3] ?? 2000);
  const config = loadConfig();
  const deps = createDeps(config);
  await prepareAllShards(config, deps.shardPool, { demoSchema: true });
  await ensureDirectory(deps.directoryPool(), config);
  const tenant = `bench-${Date.now().toString(36)}`;
  await createTenant({ directory: deps.directoryPool(), shardPool: deps.shardPool, config }, { tenant, shard: 'shard-a', actor: 'bench' });
  const router = await Router.create(config);
  await seedTenant({ router, s3For: deps.s3For, config, tenant, rows, blobs: 20 });
  const taskQueue = `bench-${tenant}`;
  const w = await startWorker(config, { taskQueue });
  const connection = await Connection.connect({ address: config.temporal.address });
  const client = new Client({ connection, namespace: config.temporal.namespace });
  const logFile = path.join('tmp', `${tenant}.jsonl`);
  fs.mkdirSync('tmp', { recursive: true });
  const lg = startLoadgen({ config, router, s3For: deps.s3For, tenants: [tenant], rate: 50, durationMs: 3_600_000, logFile, concurrency: 4 });
  const windows: Array<[number, number]> = [];
  const pauses: number[] = [];
  try {
    const order = ['shard-b', 'shard-c', 'shard-a'];
    for (let i = 0; i < moves; i++) {
      const target = order[i % order.length];
      const input = moveInputFor(config, { tenant, target, soakSeconds: 1, requestedBy: 'bench', rowsPerSecond: 0 });
      const h = await startMove(client, taskQueue, input);
      const t0 = Date.now();
      const s: M.MoveStatus = await h.result();
      windows.push([t0, Date.now()]);
      pauses.push(s.cutoverPauseMs ?? NaN);
      const p = await getPlacement(deps.directoryPool(), tenant);
      await new Promise((r) => setTimeout(r, 4000)); // ordinary traffic between moves: the baseline
      console.log(`move ${i + 1}: -> ${target} (epoch ${p?.epoch}) ${s.phase}, pause ${s.cutoverPauseMs} ms, steps ${JSON.stringify(s.cutoverSteps ?? {})}`);
    }
  } finally {
    lg.stop();
    await lg.done;
  }
  // Baseline: acknowledged write latencies while no move was running.
  const acks = readLog(logFile).filter((r: any) => r.status === 'ack');
  const outside = acks
    .filter((r: any) => !windows.some(([a, b]) => Date.parse(r.ts) >= a && Date.parse(r.ts) <= b))
    .map((r: any) => r.latencyMs as number)
    .sort((a, b) => a - b);
  const q = (xs: number[], f: number) => xs[Math.min(xs.length - 1, Math.floor(f * xs.length))];
  const sorted = [...pauses].sort((a, b) => a - b);
  const p99 = q(outside, 0.99);
  console.log(
    `\ncutover pause over ${moves} moves: median ${q(sorted, 0.5)} ms, max ${sorted[sorted.length - 1]} ms (budget ${config.limits.fenceBudgetMs} ms)`,
  );
  console.log(`baseline (same run): p99 of ${outside.length} ordinary writes ${p99} ms, median ${q(outside, 0.5)} ms`);
  console.log(`ratio: median pause / baseline p99 write = ${(q(sorted, 0.5) / Math.max(1, p99)).toFixed(1)}x`);
  await router.close();
  await w.shutdown();
  await connection.close();
  await deps.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
