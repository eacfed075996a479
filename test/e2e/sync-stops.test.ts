// Syncs that stop when told (issue 15): cancel, rollback and retire-now end while a blob sync of
// the move is stuck mid-request. The real move workflow runs on an in-process worker whose S3
// clients hold the copyBlobs activity's reads and server-side copies of the tenant's objects
// (test/helpers/held-sync.ts) until the test releases them, after the move has ended. Each case
// asserts ordering, never durations: the move ended while the request was still held; then,
// once Temporal's cancellation reached the stuck activity, the released sync wrote nothing.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { Writable } from 'node:stream';
import { testConfig, uniq, closePools, shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import * as B from '../helpers/blobs';
import * as M from '../../workflows/messages';
import { isTerminal, type Phase } from '../../workflows/phases';
import { startWorker, type StartedWorker } from '../../worker';
import { createDeps, type Deps } from '../../activities/deps';
import { createLogger } from '../../lib/obs/log';
import { Router } from '../../lib/router';
import { holdBlobSync, type HeldSync } from '../helpers/held-sync';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
const op = { actor: 'sre-sync-test' };

let deps: Deps;
let worker: StartedWorker;
let tq: string;
let t: Awaited<ReturnType<typeof H.temporal>>;
let router: Router;
/** The hold the worker's S3 clients go through now (one per case), and every hold made. */
let hold: HeldSync | undefined;
const holds: HeldSync[] = [];
function holdNow(tenant: string): HeldSync {
  hold = holdBlobSync(tenant, [SOURCE, TARGET]);
  holds.push(hold);
  return hold;
}
/** The worker's log lines (warn and up): how the test sees a stale activity end. */
const lines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  await H.prepareStack();
  tq = uniq('syncstop');
  deps = createDeps(testConfig());
  const heldDeps: Deps = { ...deps, s3For: (s) => hold?.clientFor(s) ?? deps.s3For(s) };
  const destination = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l.trim()) lines.push(JSON.parse(l));
      done();
    },
  });
  const log = createLogger(testConfig(), { level: 'warn', destination: destination as any, base: { taskQueue: tq } });
  worker = await startWorker(testConfig(), { taskQueue: tq, deps: heldDeps, log });
  t = await H.temporal();
  router = await Router.create(testConfig());
});
afterAll(async () => {
  // A request still held would keep the worker's shutdown waiting for its activity.
  for (const h of holds) h.release();
  await t?.close();
  await worker?.shutdown();
  for (const h of holds) h.destroy();
  await router?.close();
  await closePools();
});

/** Waits for the move to end in `phase`; another end fails at once. */
function ended(h: Parameters<typeof H.waitFor>[0], phase: Phase) {
  return H.waitFor(
    h,
    (s) => {
      if (s.phase === phase) return true;
      if (isTerminal(s.phase)) throw new Error(`move ended ${s.phase}, not ${phase}: ${s.lastError}`);
      return false;
    },
    150_000,
  );
}

/** Waits until the worker logged the end (a failure) of the move's copyBlobs in `direction`. */
async function staleSyncEnded(moveId: string, direction: 'forward' | 'reverse') {
  const deadline = Date.now() + 60_000;
  const mine = (l: Record<string, unknown>) => l.activity === 'copyBlobs' && l.moveId === moveId && l.direction === direction && l.msg === 'activity failed';
  while (!lines.some(mine)) {
    if (Date.now() > deadline) throw new Error(`copyBlobs ${direction} of ${moveId} did not end after its release`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const keysOn = (shard: string, tenant: string) => B.keysOn(deps.s3For, shard, tenant);
const ledgerRows = async (shard: string, tenant: string) =>
  (await shardPool(shard).query('select count(*)::int as n from shardctl.blob_ledger where unit = $1', [tenant])).rows[0].n as number;

/** Releases the held sync once Temporal's cancellation reached it, and waits for its activity to end. */
async function releaseStaleSync(h: HeldSync, moveId: string, direction: 'forward' | 'reverse') {
  await h.cancelled;
  h.release();
  await staleSyncEnded(moveId, direction);
  expect(h.passed()).toBe(h.held());
}

/**
 * A tenant moved to the target, in soak, with a row and an object acknowledged through the router
 * during soak: the soak's reverse blob sync has that object to bring back, and is held on it.
 */
async function soakWithHeldReverseSync(prefix: string) {
  const tenant = await H.newTenant(SOURCE, prefix);
  await H.seed(tenant, 40, 3);
  const h = await H.startMove(t.client, tq, H.moveInput(tenant, TARGET, { soakSeconds: 8 }));
  const soak = await H.waitPhase(h, 'soak', 150_000);
  // Armed in soak (the forward copy went through). The soak's first reverse catch-up round lasts
  // the soak: its blob sync starts after it, with these writes to bring back.
  const held = holdNow(tenant);
  const grant = { tenants: [tenant] };
  await router.withTenant(tenant, grant, 'write', (tx) => tx.query(`insert into public.events (tenant_id, kind) values ($1, 'soak-write')`, [tenant]));
  await router.putBlob(tenant, grant, 'docs/soak', 'written during soak');
  await held.reached;
  return { tenant, h, moveId: soak.moveId, grant, held };
}

describe('cancel, rollback and retire-now while a blob sync is stuck', () => {
  it(
    'a cancel during the forward blob copy ends the move cancelled, undone, while the copy is still held; released, it writes nothing',
    { timeout: 300_000 },
    async () => {
      const tenant = await H.newTenant(SOURCE, 'ss-cancel');
      await H.seed(tenant, 40, 10);
      const sourceKeys = await keysOn(SOURCE, tenant);
      const held = holdNow(tenant);
      const h = await H.startMove(t.client, tq, H.moveInput(tenant, TARGET));
      await held.reached;
      const { moveId } = await h.query(M.statusQuery);
      await h.executeUpdate(M.cancelUpdate, { args: [op] });
      await ended(h, 'cancelled');

      // Ended while the sync is still stuck: nothing it asked for has gone on.
      expect(held.held()).toBeGreaterThan(0);
      expect(held.passed()).toBe(0);
      expect(await H.replicationLeftovers(moveId)).toEqual([]);
      expect(await H.rowCount(TARGET, tenant)).toBe(0);
      expect(await keysOn(TARGET, tenant)).toEqual([]);
      expect(await H.placement(tenant)).toMatchObject({ shard: SOURCE, epoch: 1, state: 'active' });

      await releaseStaleSync(held, moveId, 'forward');
      expect(await keysOn(TARGET, tenant)).toEqual([]);
      expect(await ledgerRows(TARGET, tenant)).toBe(0);
      expect(await keysOn(SOURCE, tenant)).toEqual(sourceKeys);
    },
  );

  it(
    "a rollback during soak completes while the soak's reverse blob sync is held, losing no acknowledged write; released, it writes nothing",
    { timeout: 300_000 },
    async () => {
      const { tenant, h, moveId, grant, held } = await soakWithHeldReverseSync('ss-rollback');
      await h.executeUpdate(M.rollbackUpdate, { args: [op] });
      await ended(h, 'rolled-back');

      expect(held.held()).toBeGreaterThan(0);
      expect(held.passed()).toBe(0);
      expect(await H.placement(tenant)).toMatchObject({ shard: SOURCE, epoch: 3, state: 'active' });
      // The soak's acknowledged writes are on the owner again (the rollback's own delta brought the object).
      const soakRows = await shardPool(SOURCE).query(`select count(*)::int as n from public.events where tenant_id = $1 and kind = 'soak-write'`, [tenant]);
      expect(soakRows.rows[0].n).toBe(1);
      expect(String(await router.getBlob(tenant, grant, 'docs/soak'))).toBe('written during soak');
      expect(await H.replicationLeftovers(moveId)).toEqual([]);
      const ownerKeys = await keysOn(SOURCE, tenant);

      await releaseStaleSync(held, moveId, 'reverse');
      expect(await keysOn(SOURCE, tenant)).toEqual(ownerKeys);
      expect(await keysOn(TARGET, tenant)).toEqual([]);
    },
  );

  it(
    "retire-now during soak completes while the soak's reverse blob sync is held; released, it writes nothing into the retired source",
    { timeout: 300_000 },
    async () => {
      const { tenant, h, moveId, held } = await soakWithHeldReverseSync('ss-retire');
      await h.executeUpdate(M.retireNowUpdate, { args: [op] });
      await ended(h, 'done');

      expect(held.held()).toBeGreaterThan(0);
      expect(held.passed()).toBe(0);
      expect(await H.placement(tenant)).toMatchObject({ shard: TARGET, epoch: 2, state: 'active' });
      expect(await H.rowCount(SOURCE, tenant)).toBe(0);
      expect(await keysOn(SOURCE, tenant)).toEqual([]);
      expect(await H.replicationLeftovers(moveId)).toEqual([]);

      await releaseStaleSync(held, moveId, 'reverse');
      expect(await keysOn(SOURCE, tenant)).toEqual([]);
      expect(await ledgerRows(SOURCE, tenant)).toBe(0);
    },
  );
});
