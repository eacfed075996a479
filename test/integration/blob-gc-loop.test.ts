// The blob collector runs without an operator (issue 15): every worker runs a pass per interval
// (lib/blobs/gc-loop.ts), one at a time across the fleet, with all of `blobs gc`'s checks: it
// deletes a tenant's superseded, deleted and never-committed versions on its owner once they are
// older than the grace period, never an object an index row names nor one that is not a version,
// and skips a tenant a move holds a reservation for. Real shards, directory, S3 (moto), Temporal
// (the second case starts a real worker with a short interval).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { setTimeout as sleep } from 'node:timers/promises';
import { directoryPool, shardPool, testConfig, uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import * as B from '../helpers/blobs';
import type { Activities } from '../../activities';
import type { Router } from '../../lib/router';
import { tenantBlobPrefix } from '../../lib/blobs';
import { collectorPass, COLLECTOR_ACTOR } from '../../lib/blobs/gc-loop';
import type { GcDeps } from '../../lib/blobs/gc';
import { readAudit } from '../../lib/directory/audit';
import { releaseReservation } from '../../lib/directory/reservations';
import { shardByName } from '../../lib/config';
import { startWorker } from '../../worker';

const SHARD = 'shard-a';
let act: Activities;
let router: Router;
let env: H.InProcess | undefined;
const refs: B.MoveRef[] = [];
let gcDeps: GcDeps;

beforeAll(async () => {
  env = await H.inProcessActivities({ router: true, refs });
  ({ act, router } = env);
  const deps = env.deps;
  // The activities' own pools, as the worker's collector uses them: the collector asks for a pool
  // once per tenant, and test/helpers' directoryPool() and shardPool() open a new one per call.
  gcDeps = {
    tenantColumn: testConfig().tenant.column,
    directoryPool: () => deps.directoryPool(),
    shardPool: (s) => deps.shardPool(s),
    bucketOf: (s) => ({ shard: s, s3: deps.s3For(s), bucket: shardByName(testConfig(), s).bucket }),
  };
});
afterAll(() => env?.close());

const keysOn = (tenant: string) => B.keysOn((s) => env!.deps.s3For(s), SHARD, tenant);
async function referenced(tenant: string): Promise<string[]> {
  const r = await shardPool(SHARD).query('select object_key from shardctl.blob_index where tenant_id = $1 order by object_key', [tenant]);
  return r.rows.map((x) => x.object_key as string);
}
async function gcEntries(tenant: string) {
  return (await readAudit(directoryPool(), { unit: tenant, sinceMs: 3_600_000, limit: 100 })).entries.filter((e) => e.action === 'blobs.gc');
}

/** A tenant with doc/0 written three times, doc/1 written then deleted, and an object of its own (not a version): 3 garbage versions. */
async function tenantWithGarbage(prefix: string) {
  const tenant = await H.newTenant(SHARD, prefix);
  const grant = { tenants: [tenant] };
  for (const v of ['v1', 'v2', 'v3']) await router.putBlob(tenant, grant, 'doc/0', `doc 0 ${v}`);
  await router.putBlob(tenant, grant, 'doc/1', 'doc 1 v1');
  await router.deleteBlob(tenant, grant, 'doc/1');
  const own = `${tenantBlobPrefix(tenant)}own/0`;
  await env!.deps
    .s3For(SHARD)
    .send(new PutObjectCommand({ Bucket: shardByName(testConfig(), SHARD).bucket, Key: own, Body: 'the application keeps this key itself' }));
  expect(await keysOn(tenant)).toHaveLength(5);
  return { tenant, own };
}

describe('the blob collector without an operator', () => {
  it('a pass keeps what is younger than the grace period, then deletes exactly the unreferenced versions; a tenant with a move in flight is skipped', async () => {
    const { tenant, own } = await tenantWithGarbage('gcl');
    const moving = await tenantWithGarbage('gcm');
    const ref = await B.plannedMove(act, refs, moving.tenant, SHARD, 'shard-b', false);
    expect(await act.reserveHeadroom({ ...ref, epoch: 1, workflowId: `test-${ref.moveId}`, actor: 'gc-loop-test' })).toMatchObject({ ok: true });
    const movingKeys = await keysOn(moving.tenant);
    try {
      // Within the grace period: nothing deleted, the three versions counted young.
      // Passes over this case's two tenants: a whole pass takes as long as the shared stack's fleet
      // is big (thousands of tenants late in a CI run: it once outran the case's 120 s).
      const tenants = [tenant, moving.tenant];
      const young = await collectorPass(gcDeps, { graceMs: 3_600_000, units: tenants });
      expect(young.ran).toBe(true);
      expect(young.collected.find((r) => r.tenant === tenant)).toMatchObject({ young: 3, referenced: 1, notVersions: 1, collected: [] });
      expect(await keysOn(tenant)).toHaveLength(5);
      // Nothing deleted, nothing audited.
      expect(await gcEntries(tenant)).toEqual([]);

      const pass = await collectorPass(gcDeps, { graceMs: 0, units: tenants });
      expect(pass.collected.find((r) => r.tenant === tenant)?.collected).toHaveLength(3);
      expect(await keysOn(tenant)).toEqual([...(await referenced(tenant)), own].sort());
      expect(pass.skipped.find((s) => s.tenant === moving.tenant)?.reason).toMatch(/is in flight; run gc after it ends/);
      expect(await keysOn(moving.tenant)).toEqual(movingKeys);
      const entries = await gcEntries(tenant);
      expect(entries).toHaveLength(1);
      expect(entries[0]).toMatchObject({ actor: COLLECTOR_ACTOR, detail: { deleted: 3 } });
      // A pass with nothing left to delete records nothing.
      await collectorPass(gcDeps, { graceMs: 0, units: tenants });
      expect(await gcEntries(tenant)).toHaveLength(1);
    } finally {
      await releaseReservation(directoryPool(), ref.moveId, { actor: 'gc-loop-test', reason: 'test over' });
    }
  });

  it(
    'a worker collects by itself: its collector deletes the unreferenced versions once past the grace period and keeps every referenced object',
    // The worker's passes go over the whole fleet of the shared stack (thousands of tenants late in
    // a CI run, the case's tenant among them), so its deadline is the fleet's, not the case's.
    { timeout: 300_000 },
    async () => {
      const { tenant, own } = await tenantWithGarbage('gcw');
      const base = testConfig();
      const config = { ...base, limits: { ...base.limits, blobGcIntervalMs: 500, blobGcGraceMs: 1000 } };
      const worker = await startWorker(config, { taskQueue: uniq('gcw') });
      try {
        const want = [...(await referenced(tenant)), own].sort();
        const deadline = Date.now() + 240_000;
        let keys = await keysOn(tenant);
        while (keys.length !== want.length && Date.now() < deadline) {
          await sleep(250);
          keys = await keysOn(tenant);
        }
        expect(keys).toEqual(want);
        expect((await gcEntries(tenant))[0]).toMatchObject({ actor: COLLECTOR_ACTOR, detail: { deleted: 3, graceMs: 1000 } });
      } finally {
        await worker.shutdown();
      }
    },
  );
});
