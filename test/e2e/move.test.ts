import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import path from 'node:path';
import fs from 'node:fs';
import { testConfig, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';
import { Router } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { startLoadgen } from '../../lib/loadgen';
import { runJobWorker, enqueueJob } from '../../lib/jobs/worker';
import { shardPool } from '../helpers/stack';

let env: Awaited<ReturnType<typeof H.moveEnv>>;
let tq: string;
let t: Awaited<ReturnType<typeof H.temporal>>;

beforeAll(async () => {
  env = await H.moveEnv('e2e');
  ({ tq, t } = env);
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

describe('tenant move, end to end', () => {
  it('moves a seeded tenant under live traffic, loses no acknowledged write, and retires the source', { timeout: 300_000 }, async () => {
    const config = testConfig();
    const tenant = await H.newTenant('shard-a', 'mv');
    const bystander = await H.newTenant('shard-a', 'by');
    const bystanderOnTarget = await H.newTenant('shard-b', 'bt');
    await H.seed(tenant, 400, 6);
    await H.seed(bystander, 100, 2);
    await H.seed(bystanderOnTarget, 100, 2);
    const baselines = await Promise.all([tenant, bystander, bystanderOnTarget].map((x) => C.baselineOf(x)));

    const router = await Router.create(config);
    const deps = createDeps(config);
    const logFile = path.join('test-results', `${tenant}.jsonl`);
    fs.mkdirSync('test-results', { recursive: true });
    const lg = startLoadgen({
      config,
      router,
      s3For: (s) => deps.s3For(s),
      tenants: [tenant, bystander, bystanderOnTarget],
      rate: 60,
      durationMs: 120_000,
      logFile,
      concurrency: 4,
    });
    try {
      await new Promise((r) => setTimeout(r, 1500));
      const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 3 }));
      const soak = await H.waitPhase(h, 'soak', 200_000);
      expect(soak.cutoverPauseMs).not.toBeNull();
      expect(soak.epoch).toBe(2);
      await new Promise((r) => setTimeout(r, 1000)); // writes land on the target during soak
      const done = await H.waitPhase(h, 'done', 120_000);
      expect(done.phase).toBe('done');
      lg.stop();
      const stats = await lg.done;
      expect(stats.writes.ack).toBeGreaterThan(20);
      // Reads through the router saw every acked write, before, during and after the switch.
      expect(stats.reads.ok).toBeGreaterThan(10);
      expect({ mismatches: stats.readMismatches, failed: stats.reads.failed, unknown: stats.writes.unknown }).toEqual({ mismatches: 0, failed: 0, unknown: 0 });
    } finally {
      lg.stop();
      await lg.done.catch(() => {});
      await router.close();
      await deps.close();
    }
    // The whole of each unit: every seeded and written row and object on its owner, nothing else.
    const report = await C.expectLogVerified({ logFile, config, baselines });

    const p = await H.placement(tenant);
    expect(p).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active', moveId: null });
    // The old owner refuses writes under every older epoch; the new owner refuses epoch 1 too.
    expect(await H.tryWrite('shard-a', tenant, 1)).toBe('SC421');
    expect(await H.tryWrite('shard-a', tenant, 2)).toBe('SC421');
    expect(await H.tryWrite('shard-b', tenant, 1)).toBe('SC421');
    expect(await H.tryWrite('shard-b', tenant, 2)).toBe('ok');
    // Retired: no source rows, objects, manifest or progress rows; no slot or publication left anywhere.
    expect(await C.leftoversOn('shard-a', tenant, [`${tenant}.e1`])).toEqual([]);
    expect(await H.replicationLeftovers(`${tenant}.e1`)).toEqual([]);
    // The owner holds the seeded rows plus loadgen's surviving keys, counted per table.
    const seeded = baselines[0].tables.reduce((n, t) => n + t.rows, 0);
    const owned = Object.values(report.ownerRows[tenant]).reduce((n, x) => n + x, 0);
    expect(owned).toBe(await H.rowCount('shard-b', tenant));
    expect(owned).toBeGreaterThanOrEqual(seeded);
    // Bystanders on both shards: their baselines held above (report.unit), and none of their writes failed.
    const { readLog } = await import('../../lib/loadgen');
    for (const b of [bystander, bystanderOnTarget]) {
      const by = readLog(logFile).filter((r) => r.tenant === b);
      expect(by.length, b).toBeGreaterThan(0);
      expect(by.filter((r) => r.status !== 'ack')).toEqual([]);
    }
  });

  it('queued jobs move with the tenant: a job worker running through the move completes every job exactly once', { timeout: 300_000 }, async () => {
    const config = testConfig();
    const tenant = await H.newTenant('shard-a', 'jb');
    await H.seed(tenant, 400, 0); // 15% jobs, queued
    const queued = await shardPool('shard-a').query(`select id from public.jobs where tenant_id = $1`, [tenant]);
    expect(queued.rowCount).toBeGreaterThan(30);
    // Slow handlers keep the worker busy across the cutover: some jobs are claimed on the source
    // and completed on the target.
    const router = await Router.create(config);
    // 80 more jobs due now: about 8 s of work for the worker below, longer than the move.
    for (let i = 0; i < 80; i++) await enqueueJob(router, tenant, { tenants: [tenant] }, 'e2e', { i });
    const handled = new Map<string, number>();
    const finishedAt: number[] = [];
    const stop = new AbortController();
    const worker = runJobWorker({
      router,
      tenants: [tenant],
      grant: { tenants: [tenant] },
      workerId: 'e2e-jobs',
      pollMs: 50,
      batch: 3,
      signal: stop.signal,
      call: { deadlineMs: 3000 },
      handler: async (job) => {
        handled.set(job.id, (handled.get(job.id) ?? 0) + 1);
        await new Promise((r) => setTimeout(r, 100));
        finishedAt.push(Date.now());
      },
    });
    try {
      const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 2 }));
      await H.waitPhase(h, 'done', 200_000);
      // Let the worker drain what is due on the new owner.
      const deadline = Date.now() + 60_000;
      for (;;) {
        const left = await shardPool('shard-b').query(
          `select count(*)::int as n from public.jobs where tenant_id = $1 and state <> 'done' and run_at <= now()`,
          [tenant],
        );
        if (left.rows[0].n === 0 || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 250));
      }
    } finally {
      stop.abort();
      await worker;
      await router.close();
    }
    const due = await shardPool('shard-b').query(`select id, state, attempts from public.jobs where tenant_id = $1 and run_at <= now()`, [tenant]);
    expect(due.rows.filter((r) => r.state !== 'done')).toEqual([]);
    // Every due job ran exactly once: a completion held back by the fence waits (router backoff)
    // and lands on the new owner, where the claimed row arrived with the move.
    for (const r of due.rows) expect(handled.get(r.id), r.id).toBe(1);
    const switchedAt = Date.parse((await H.placement(tenant))!.updatedAt);
    expect(finishedAt.filter((x) => x < switchedAt).length).toBeGreaterThan(0);
    expect(finishedAt.filter((x) => x > switchedAt).length).toBeGreaterThan(0);
    expect(await H.rowCount('shard-a', tenant)).toBe(0);
  });
});
