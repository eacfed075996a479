import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import path from 'node:path';
import fs from 'node:fs';
import { testConfig, uniq, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { startWorker, StartedWorker } from '../../worker';
import { Router } from '../../lib/router';
import { createDeps } from '../../worker/deps';
import { startLoadgen, verifyLog } from '../../lib/loadgen';
import * as M from '../../workflows/messages';

let worker: StartedWorker;
let tq: string;
let t: Awaited<ReturnType<typeof H.temporal>>;

beforeAll(async () => {
  await H.prepareStack();
  tq = uniq('e2e');
  worker = await startWorker(testConfig(), { taskQueue: tq });
  t = await H.temporal();
});
afterAll(async () => {
  await t?.close();
  await worker?.shutdown();
  await closePools();
});

describe('tenant move, end to end', () => {
  it('moves a seeded tenant under live traffic, loses no acknowledged write, and retires the source', { timeout: 300_000 }, async () => {
    const config = testConfig();
    const tenant = await H.newTenant('shard-a', 'mv');
    const bystander = await H.newTenant('shard-a', 'by');
    await H.seed(tenant, 400, 6);
    await H.seed(bystander, 100, 2);
    const byBefore = await H.fingerprint('shard-a', bystander);

    const router = await Router.create(config);
    const deps = createDeps(config);
    const logFile = path.join('test-results', `${tenant}.jsonl`);
    fs.mkdirSync('test-results', { recursive: true });
    const lg = startLoadgen({ config, router, s3For: (s) => deps.s3For(s), tenants: [tenant, bystander], rate: 60, durationMs: 120_000, logFile, concurrency: 4 });
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
    } finally {
      lg.stop();
      await lg.done.catch(() => {});
      await router.close();
      await deps.close();
    }
    const report = await verifyLog({ logFile, config });
    expect({ missing: report.missing, wrong: report.wrongValue, refused: report.presentButRefused, blobs: report.blobMissing }).toEqual({ missing: [], wrong: [], refused: [], blobs: [] });
    expect(report.ok).toBe(true);

    const p = await H.placement(tenant);
    expect(p).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active', moveId: null });
    // The old owner refuses writes under every older epoch; the new owner refuses epoch 1 too.
    expect(await H.tryWrite('shard-a', tenant, 1)).toBe('SC421');
    expect(await H.tryWrite('shard-a', tenant, 2)).toBe('SC421');
    expect(await H.tryWrite('shard-b', tenant, 1)).toBe('SC421');
    expect(await H.tryWrite('shard-b', tenant, 2)).toBe('ok');
    // Retired: no source rows or blobs; no slot or publication left anywhere.
    expect(await H.rowCount('shard-a', tenant)).toBe(0);
    expect(await H.blobCount('shard-a', tenant)).toBe(0);
    expect(await H.rowCount('shard-b', tenant)).toBeGreaterThan(400);
    expect(await H.replicationLeftovers(`${tenant}.e1`)).toEqual([]);
    // The bystander on the same shard kept every row it had (loadgen may have added more).
    const byAfter = await H.fingerprint('shard-a', bystander);
    for (const t0 of byBefore) expect(byAfter.find((x) => x.table === t0.table)!.rows).toBeGreaterThanOrEqual(t0.rows);
  });
});
