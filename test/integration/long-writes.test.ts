// A write running long at a cutover's freeze (lib/shard/unit-writers.ts, lib/cutover/steps.ts
// CutoverPlan.fenceLock), against the real shards: the unit's lock holders are seen in pg_locks;
// the wait before a freeze returns only after a long writer committed, and gives up (bounded) on
// one that never ends; a raise that such a writer outlasts raises nothing, says who held it, and
// the writer's own write commits (nothing lost, nothing refused behind its back).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { closePools, directoryPool, shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { getUnitFence, unfreeze } from '../../lib/shard/fence';
import { liveCutoverSteps } from '../../lib/cutover/live';
import { awaitQuietWriters, unitWriters } from '../../lib/shard/unit-writers';
import { sleep } from '../../lib/dev/proc';

const OWNER = 'shard-a';
const NEXT = 'shard-b';

beforeAll(async () => {
  await H.prepareStack();
});
afterAll(async () => {
  await closePools();
});

const openWriter = (tenant: string) => H.openUnitWriter(OWNER, tenant);

async function longWrites(tenant: string): Promise<number> {
  const r = await shardPool(OWNER).query(`select count(*)::int as n from public.events where tenant_id = $1 and kind = 'long-write'`, [tenant]);
  return r.rows[0].n;
}

describe("a unit's long writers", () => {
  it("lists the sessions holding the unit's write lock, and only that unit's", async () => {
    const [a, b] = [await H.newTenant(OWNER, 'lw'), await H.newTenant(OWNER, 'lw')];
    expect(await unitWriters(shardPool(OWNER), a)).toEqual([]);
    const w = await openWriter(a);
    try {
      const seen = await unitWriters(shardPool(OWNER), a);
      expect(seen.map((x) => x.pid)).toEqual([w.pid]);
      expect(seen[0].state).toBe('idle in transaction');
      expect(seen[0].xactMs).toBeGreaterThanOrEqual(0);
      expect(await unitWriters(shardPool(OWNER), b)).toEqual([]);
    } finally {
      await w.commit();
    }
    expect(await unitWriters(shardPool(OWNER), a)).toEqual([]);
  });

  it('the wait before a freeze returns only once a long writer has committed, and names it', async () => {
    const tenant = await H.newTenant(OWNER, 'lq');
    const w = await openWriter(tenant);
    await sleep(120); // long by the wait's measure (50 ms)
    let committed = false;
    const done = sleep(600)
      .then(() => w.commit())
      .then(() => (committed = true));
    const q = await awaitQuietWriters(shardPool(OWNER), tenant, { longMs: 50, maxWaitMs: 10_000 });
    expect(committed, 'returned while the long writer still held the lock').toBe(true);
    expect(q.gaveUp).toBe(false);
    expect(q.longest?.pid).toBe(w.pid);
    await done;
    expect(await longWrites(tenant)).toBe(1);
  });

  it('gives up on a writer that does not end within the bound, saying so', async () => {
    const tenant = await H.newTenant(OWNER, 'lg');
    const w = await openWriter(tenant);
    await sleep(100); // long by the wait's measure (50 ms)
    try {
      const q = await awaitQuietWriters(shardPool(OWNER), tenant, { longMs: 50, maxWaitMs: 400 });
      expect(q).toMatchObject({ gaveUp: true, longest: { pid: w.pid } });
      expect(await unitWriters(shardPool(OWNER), tenant)).toHaveLength(1);
    } finally {
      await w.commit();
    }
  });

  it('a writer that is quick is not waited for', async () => {
    const tenant = await H.newTenant(OWNER, 'lk');
    const q = await awaitQuietWriters(shardPool(OWNER), tenant, { longMs: 50, maxWaitMs: 10_000 });
    expect(q).toMatchObject({ gaveUp: false });
    expect(q.longest).toBeUndefined();
  });
});

describe('an unfreeze that does not know its raise rolled back', () => {
  it('takes the lock, so it queues behind a raise that may still commit (and behind writers)', async () => {
    const tenant = await H.newTenant(OWNER, 'lu');
    const w = await openWriter(tenant);
    let committed = false;
    const ends = sleep(500)
      .then(() => w.commit())
      .then(() => (committed = true));
    const r = await unfreeze(shardPool(OWNER), tenant, 1, ['tok-none']);
    expect(committed, 'the locked unfreeze returned before the writer ended').toBe(true);
    expect(r.ok).toBe(true);
    await ends;
  });
});

describe('a fence raise that a long writer outlasts', () => {
  it('raises nothing, answers writersHeld naming the writer, and the writer commits its write', async () => {
    const tenant = await H.newTenant(OWNER, 'lr');
    const s = liveCutoverSteps(
      H.forwardCutoverPlan(tenant, { owner: OWNER, next: NEXT, fenceBudgetMs: 2000, lease: { leaseMs: 5000, switchWithinMs: 4000 }, actor: 'long-write-test' }),
      { ...H.bareCutoverEnv(OWNER, NEXT), longWrites: { longMs: 50, maxWaitMs: 200 } },
    );
    const w = await openWriter(tenant);
    // The writer ends by itself, later than any step below should take.
    let committed = false;
    const ends = sleep(4000)
      .then(() => w.commit())
      .then(() => (committed = true));
    expect(await s.freeze(await s.standing())).toEqual({ ok: true });
    const r = await s.raiseFence(150);
    expect(r).toMatchObject({ ok: false, writersHeld: true });
    expect(r.ok ? '' : r.reason).toMatch(
      new RegExp(`held the fence lock longer than the budget of 150 ms \\(pid ${w.pid} idle in transaction, open \\d+ ms\\)`),
    );
    // Nothing raised: the owner's fence is as it was, open at epoch 1.
    expect(await getUnitFence(shardPool(OWNER), tenant)).toMatchObject({ epoch: 1, owned: true, frozen: false });
    // The unfreeze does not wait for the writer (it would hold every new write behind it): it
    // returns while the writer is still open, and a new writer gets through at once.
    expect(await s.unfreeze('writers held the fence')).toBe('unfrozen');
    expect(committed, 'the unfreeze waited for the long writer').toBe(false);
    expect(await H.placement(tenant)).toMatchObject({ shard: OWNER, epoch: 1, state: 'active' });
    expect(await H.tryWrite(OWNER, tenant, 1, 'router')).toBe('ok');
    expect(committed, 'a new write waited for the long writer').toBe(false);
    await ends;
    expect(await longWrites(tenant)).toBe(1);
    // Quiet now: the next try's wait returns at once, and its raise goes through.
    expect(await s.awaitQuietWriters()).toBe(0);
    expect(await s.freeze(await s.standing())).toEqual({ ok: true });
    expect(await s.raiseFence(150)).toEqual({ ok: true });
    expect(await H.tryWrite(OWNER, tenant, 1, 'router')).toBe('SC423');
    expect(await s.unfreeze('test over')).toBe('unfrozen');
    // Each freeze had a token of its own; each unfreeze named its freeze's.
    const audit = async (action: string) =>
      (await directoryPool().query('select detail from shardctl.audit where unit = $1 and action = $2 order by id', [tenant, action])).rows.map(
        (r) => r.detail.freezeToken,
      );
    const tokens = await audit('freeze');
    expect(tokens).toHaveLength(2);
    expect(new Set(tokens).size).toBe(2);
    expect(await audit('unfreeze')).toEqual(tokens);
  });
});
