// The blob index moves with the rows (issue 15): shardctl.blob_index is a tenant table, so the real
// move workflow copies, streams and validates it like any other, and the prefix copy brings the
// objects it names. The application's PUT (a new name), overwrite (a new version of an existing
// name) and DELETE through putBlob / deleteBlob are each acknowledged inside copy, inside
// catch-up, across the frozen window and inside soak, and every name ends, after the switch and
// retire, as its last acknowledged write left it on the target: index row, sha256, object bytes,
// or (deleted) no row and nothing for getBlob. The collector then runs on the new owner only.
//
// How each window is hit: the copy is throttled and a bulk of rows written during it gives the
// throttled catch-up seconds of work; the freeze is held open by the worker's fault hook at
// after-fence-raised, where three writes start. Those cannot be acknowledged inside the freeze
// (the old owner refuses them as frozen and the router waits): what the test shows is that they
// started while the directory said moving, were refused as frozen, and were acknowledged after the
// switch on the new owner. A second case runs loadgen through the index over a whole move and
// checks its log and the whole unit (crash suite's assertInvariants) on the new owner.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { testConfig, closePools, shardPool, directoryPool, uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import * as M from '../../workflows/messages';
import { Router } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { startWorker, type StartedWorker } from '../../worker';
import { hashObject, listBlobs, tenantBlobPrefix } from '../../lib/blobs';
import { collectTenantBlobs } from '../../lib/blobs/gc';
import { shardByName } from '../../lib/config';
import { BlobLedger, BLOB_OPS, sha256, type BlobOp } from '../helpers/phased-blobs';
import * as C from '../helpers/crash';
import { readLog } from '../../lib/loadgen';

let worker: StartedWorker;
let tq: string;
let t: Awaited<ReturnType<typeof H.temporal>>;
/** Run by the worker's fault hook while the forward freeze is up (the fence raised, not switched). */
let whileFrozen: (() => Promise<void>) | undefined;

beforeAll(async () => {
  await H.prepareStack();
  tq = uniq('bim');
  const deps = createDeps(testConfig(), {
    faultPoint: async (name) => {
      if (name !== 'after-fence-raised' || !whileFrozen) return;
      const hold = whileFrozen;
      whileFrozen = undefined;
      await hold();
    },
  });
  worker = await startWorker(testConfig(), { taskQueue: tq, deps });
  t = await H.temporal();
});
afterAll(async () => {
  await t?.close();
  await worker?.shutdown();
  await closePools();
});

async function indexOn(shard: string, tenant: string): Promise<Record<string, { key: string; sha256: string; size: number }>> {
  const r = await shardPool(shard).query(`select name, object_key, sha256, size::int as size from shardctl.blob_index where tenant_id = $1`, [tenant]);
  return Object.fromEntries(r.rows.map((x) => [x.name, { key: x.object_key, sha256: x.sha256, size: x.size }]));
}

/** Rows written in small transactions during the copy: the throttled catch-up needs seconds to apply them. */
async function bulkEvents(router: Router, tenant: string, grant: { tenants: string[] }, transactions: number, rows: number) {
  for (let i = 0; i < transactions; i++) {
    await router.withTenant(tenant, grant, 'write', (tx) =>
      tx.query(`insert into public.events (tenant_id, kind, payload) select $1, 'bim.bulk', '{}'::jsonb from generate_series(1, $2::int)`, [tenant, rows]),
    );
  }
}

const WINDOWS = ['copy', 'catchup', 'freeze', 'soak'] as const;

describe('the blob index moves with the tenant', () => {
  it(
    'a PUT, an overwrite and a DELETE through the router in copy, catch-up, the freeze and soak each end as acknowledged on the final owner',
    { timeout: 400_000 },
    async () => {
      const config = testConfig();
      const tenant = await H.newTenant('shard-a', 'bim');
      await H.seed(tenant, 2000, 0);
      const grant = { tenants: [tenant] };
      const router = await Router.create(config);
      // Each of the freeze's writes goes through a router of its own, so its frozen-wait count is that write's.
      const frozenRouters = {
        put: await Router.create(config),
        overwrite: await Router.create(config),
        delete: await Router.create(config),
      };
      const deps = createDeps(config);
      const ledger = new BlobLedger(router, tenant, grant);
      const frozenLedger = new BlobLedger(router, tenant, grant);
      const gcDeps = {
        tenantColumn: config.tenant.column,
        directoryPool,
        shardPool,
        bucketOf: (s: string) => ({ shard: s, s3: deps.s3For(s), bucket: shardByName(config, s).bucket }),
      };
      try {
        for (let i = 0; i < 3; i++) await ledger.write('put', 'live/');
        await frozenLedger.write('put', 'freeze/', 'freeze/overwritten');
        await frozenLedger.write('put', 'freeze/', 'freeze/deleted');

        // Held open for 1.5 s: the three writes start now, and finish whenever the router gets through.
        let frozenWrites: Promise<void> | undefined;
        let frozenAtStart: unknown;
        whileFrozen = async () => {
          frozenAtStart = (await H.placement(tenant))?.state;
          const targets: Array<[BlobOp, string]> = [
            ['put', 'freeze/new'],
            ['overwrite', 'freeze/overwritten'],
            ['delete', 'freeze/deleted'],
          ];
          frozenWrites = Promise.all(
            targets.map(async ([op, name]) => {
              const w = await frozenLedger.write(op, 'freeze/', name, frozenRouters[op]);
              const p = await H.placement(tenant);
              const after = p?.shard === 'shard-b' && p.epoch === 2 && p.state === 'active';
              frozenLedger.acked.push({ ...w, window: frozenAtStart === 'moving' && after ? 'freeze' : undefined });
            }),
          ).then(() => {});
          await sleep(1500);
        };

        const h = await H.startMove(
          t.client,
          tq,
          H.moveInput(tenant, 'shard-b', { soakSeconds: 10, rowsPerSecond: 250, fenceBudgetMs: 10_000, lagThresholdMs: 1000 }),
        );
        const phaseOf = () =>
          h.query(M.statusQuery).then(
            (s) => s.phase as string,
            () => undefined,
          );
        await H.waitPhase(h, 'copy', 60_000);
        const bulk = bulkEvents(router, tenant, grant, 20, 150);
        const soakDone = () => BLOB_OPS.every((op) => ledger.acked.some((a) => a.window === 'soak' && a.op === op));
        for (let i = 0; !soakDone(); i++) {
          const phase = await phaseOf();
          if (phase === 'retire' || phase === 'done') break;
          await ledger.writeInPhase(BLOB_OPS[i % 3], 'live/', phaseOf);
          await sleep(40);
        }
        await bulk;
        await frozenWrites;
        // While the move can still roll back, the collector leaves the tenant alone (its reservation is open).
        await expect(collectTenantBlobs(gcDeps, { tenant, graceMs: 0, operator: { actor: 'test' } })).rejects.toMatchObject({
          type: 'PreconditionFailed',
          message: expect.stringMatching(/is in flight; run gc after it ends/),
        });
        const done = await H.waitPhase(h, 'done', 200_000);
        expect(done.phase).toBe('done');
        // Written only through the index: the window's blob delta was the changed index rows, not a listing.
        expect(done.cutoverBlobSync, JSON.stringify(done.cutoverSteps)).toMatchObject({ via: 'index' });
        expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active' });

        const acked = { ...ledger.opsByWindow(WINDOWS), freeze: frozenLedger.opsByWindow(['freeze']).freeze };
        expect(acked, 'kinds of blob write acknowledged in each window').toEqual(Object.fromEntries(WINDOWS.map((w) => [w, [...BLOB_OPS]])));
        // The freeze's writes were refused as frozen by the old owner before the router got them through.
        expect(frozenAtStart).toBe('moving');
        for (const op of BLOB_OPS) expect(frozenRouters[op].metrics().frozenWaits, `${op} refused as frozen, then retried`).toBeGreaterThan(0);

        const expected = new Map([...ledger.expected, ...frozenLedger.expected]);
        const live = [...expected].filter((e): e is [string, string] => e[1] !== undefined);
        const deleted = [...expected].filter(([, v]) => v === undefined).map(([n]) => n);
        expect(deleted.length).toBeGreaterThan(3);
        const index = await indexOn('shard-b', tenant);
        expect(Object.keys(index).sort()).toEqual(live.map(([n]) => n).sort());
        const bucket = shardByName(config, 'shard-b').bucket;
        for (const [name, body] of live) {
          expect(index[name], name).toMatchObject({ sha256: sha256(body), size: Buffer.byteLength(body) });
          // The object the row names is on the target, and its bytes are the recorded sha256.
          expect((await hashObject(deps.s3For('shard-b'), bucket, index[name].key)).sha256, name).toBe(sha256(body));
          expect(await router.getBlob(tenant, grant, name), name).toEqual(Buffer.from(body));
        }
        // A name whose last acknowledged write deleted it stays deleted: no row, and getBlob finds nothing.
        for (const name of deleted) {
          expect(index[name], name).toBeUndefined();
          expect(await router.getBlob(tenant, grant, name), name).toBeUndefined();
        }
        // Retired: the old owner holds neither rows nor objects of the tenant.
        expect(await indexOn('shard-a', tenant)).toEqual({});
        expect(await listBlobs(deps.s3For('shard-a'), shardByName(config, 'shard-a').bucket, tenantBlobPrefix(tenant))).toEqual([]);

        // The collector runs on the new owner only, and keeps every referenced object.
        await expect(collectTenantBlobs(gcDeps, { tenant, graceMs: 0, shard: 'shard-a', operator: { actor: 'test' } })).rejects.toMatchObject({
          type: 'PreconditionFailed',
        });
        const r = await collectTenantBlobs(gcDeps, { tenant, graceMs: 0, operator: { actor: 'test' } });
        expect(r).toMatchObject({ shard: 'shard-b', referenced: live.length });
        expect(r.collected.length).toBeGreaterThan(0); // the superseded and deleted versions
        const left = (await listBlobs(deps.s3For('shard-b'), bucket, tenantBlobPrefix(tenant))).map((e) => e.key).sort();
        expect(left).toEqual(
          Object.values(index)
            .map((v) => v.key)
            .sort(),
        );
        for (const [name, body] of live) expect(await router.getBlob(tenant, grant, name), name).toEqual(Buffer.from(body));
      } finally {
        whileFrozen = undefined;
        await router.close();
        for (const r of Object.values(frozenRouters)) await r.close();
        await deps.close();
      }
    },
  );

  it(
    'loadgen through the blob index (puts, overwrites, deletes) during a whole move verifies clean on the new owner, the whole unit against its baseline',
    { timeout: 300_000 },
    async () => {
      const tenant = await H.newTenant('shard-a', 'bil');
      const bystander = await H.newTenant('shard-a', 'bilb');
      await H.seed(tenant, 600, 4, 'index');
      await H.seed(bystander, 40, 1, 'index');
      const baselines = [await C.baselineOf(tenant), await C.baselineOf(bystander)];
      const traffic = await C.startTraffic(`blob-index-${tenant}`, [tenant, bystander], 100, {}, testConfig(), { blobWrites: 'index' });
      try {
        const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 8, copyBatchRows: 40, rowsPerSecond: 150 }));
        const status = await H.waitPhase(h, 'done', 200_000);
        await traffic.stop();
        const counts = await C.assertInvariants({
          tenant,
          bystanders: [bystander],
          source: 'shard-a',
          target: 'shard-b',
          status,
          expectOwner: 'shard-b',
          expectEpoch: 2,
          traffic,
          baselines,
        });
        expect(counts.acked).toBeGreaterThan(20);
        // The log's blob ops on the moving tenant went through the index, and all three kinds were acknowledged.
        const blobOps = readLog(traffic.logFile).filter((r) => r.tenant === tenant && r.status === 'ack' && (r.op === 'blob_put' || r.op === 'blob_delete'));
        expect(blobOps.every((r) => r.indexed)).toBe(true);
        const kinds = new Set(blobOps.map((r) => (r.op === 'blob_delete' ? 'delete' : r.overwrites ? 'overwrite' : 'put')));
        expect([...kinds].sort()).toEqual(['delete', 'overwrite', 'put']);
      } finally {
        await traffic.stop().catch(() => {});
      }
    },
  );
});
