// The final whole-prefix blob sync of a unit not written only through the blob index starts right
// after the fence (lib/cutover/live.ts startFinalBlobSync), beside the final catch-up: `compare`
// waits for it, and an attempt that unfreezes instead stops it and waits for it to end, so no sync
// of an abandoned attempt keeps running. The steps are the live ones, on the real directory and
// shards; the sync itself is a stand-in that records what it was asked and told.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { closePools, shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { liveCutoverSteps } from '../../lib/cutover/live';
import type { CutoverPlan } from '../../lib/cutover/steps';
import { getUnitFence } from '../../lib/shard/fence';

const OWNER = 'shard-a';
const NEXT = 'shard-b';

beforeAll(async () => {
  await H.prepareStack();
});
afterAll(async () => {
  await closePools();
});

async function until(ok: () => boolean, boundMs: number): Promise<void> {
  const t0 = Date.now();
  while (!ok()) {
    if (Date.now() - t0 > boundMs) throw new Error(`not true within ${boundMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const planFor = (tenant: string): CutoverPlan =>
  H.forwardCutoverPlan(tenant, { owner: OWNER, next: NEXT, fenceBudgetMs: 2000, lease: { leaseMs: 5000, switchWithinMs: 4000 }, actor: 'early-blob-test' });

/** A blob sync that runs until released or aborted, recording its calls. */
function heldSync() {
  const calls: { signal?: AbortSignal; startedWhileFenced: boolean }[] = [];
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let ended = false;
  let stoppedAt: number | undefined;
  let tenant = '';
  const syncBlobs = async (signal?: AbortSignal) => {
    const f = await getUnitFence(shardPool(OWNER), tenant);
    calls.push({ signal, startedWhileFenced: !!f?.frozen });
    await new Promise<void>((resolve, reject) => {
      // A real sync takes a moment to wind down (an upload in flight is aborted, its ledger row stays).
      const windDown = () => {
        stoppedAt = Date.now();
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', () => setTimeout(windDown, 200), { once: true });
      void released.then(resolve);
    });
    ended = true;
    return { sourceObjects: 3, unversioned: 3 };
  };
  return { calls, syncBlobs, release, ended: () => ended, stoppedAt: () => stoppedAt, setTenant: (t: string) => (tenant = t) };
}

/** A unit frozen and fenced by the live steps, its final whole-prefix sync (a held one) started. */
async function fencedWithEarlySync(prefix: string) {
  const tenant = await H.newTenant(OWNER, prefix);
  const sync = heldSync();
  sync.setTenant(tenant);
  const s = liveCutoverSteps(planFor(tenant), { ...H.bareCutoverEnv(OWNER, NEXT), syncBlobs: sync.syncBlobs });
  expect(await s.freeze(await s.standing())).toEqual({ ok: true });
  expect(await s.raiseFence(1000)).toEqual({ ok: true });
  s.startFinalBlobSync();
  await until(() => sync.calls.length === 1, 5000);
  return { tenant, s, sync };
}

describe('the early final blob sync', () => {
  it('starts right after the fence for a unit with objects outside the index, and compare waits for it', async () => {
    const { s, sync } = await fencedWithEarlySync('eb');
    expect(sync.calls[0].startedWhileFenced).toBe(true);
    const parts: string[] = [];
    const compared = s.compare((p) => parts.push(p));
    await new Promise((r) => setTimeout(r, 300));
    expect(parts).not.toContain('blobs');
    sync.release();
    expect(await compared).toEqual([]);
    expect(parts).toContain('blobs');
    // compare used the early sync: no second one.
    expect(sync.calls).toHaveLength(1);
    expect(await s.unfreeze('test over')).toBe('unfrozen');
  });

  it('an attempt that unfreezes stops its running sync and waits for it to end', async () => {
    const { tenant, s, sync } = await fencedWithEarlySync('ea');
    expect(await s.unfreeze('the apply did not reach the fence point')).toBe('unfrozen');
    const returnedAt = Date.now();
    expect(sync.calls[0].signal?.aborted).toBe(true);
    expect(sync.stoppedAt()).toBeDefined();
    expect(sync.stoppedAt()!).toBeLessThanOrEqual(returnedAt);
    expect(sync.ended()).toBe(false);
    expect(await getUnitFence(shardPool(OWNER), tenant)).toMatchObject({ frozen: false });
  });

  it('is not started for a unit whose objects the copy before the freeze found all to be index versions', async () => {
    const tenant = await H.newTenant(OWNER, 'ei');
    let synced = 0;
    const s = liveCutoverSteps(planFor(tenant), {
      ...H.bareCutoverEnv(OWNER, NEXT),
      syncBlobs: async () => {
        synced++;
        return { sourceObjects: 5, unversioned: 0 };
      },
      syncChangedBlobs: async () => ({ referenced: 0, present: 0, copied: 0, bytes: 0, requests: 0, outOfBand: [] }),
    });
    await s.preSyncBlobs();
    expect(synced).toBe(1);
    expect(await s.freeze(await s.standing())).toEqual({ ok: true });
    expect(await s.raiseFence(1000)).toEqual({ ok: true });
    s.startFinalBlobSync();
    await new Promise((r) => setTimeout(r, 200));
    expect(synced).toBe(1);
    expect(await s.unfreeze('test over')).toBe('unfrozen');
  });
});
