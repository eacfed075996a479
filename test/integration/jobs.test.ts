// The fenced job worker against the real stack: jobs are enqueued, claimed and completed
// through the router; a frozen unit's jobs stay queued; two workers never claim the same job.
import { describe, it, expect, beforeAll, afterAll, afterEach, vi } from 'vitest';
import { Pool } from 'pg';
import { testConfig, uniq, shardPool, directoryPool, closePools } from '../helpers/stack';
import { migrateDirectory } from '../../lib/directory/schema';
import { setUnitFence } from '../../lib/shard/fence';
import { Router } from '../../lib/router';
import { prepareShard } from '../../lib/shard/prepare';
import { spawn } from 'node:child_process';
import { enqueueJob, claimJobs, completeJob, releaseJob, runJobWorker, Job } from '../../lib/jobs/worker';

let dir: Pool;
let shardA: Pool;
const routers: Router[] = [];

/** Schema `shardctl`, the demo tables and the fence trigger on them (serialized with `shards prepare`). */
async function prepareShardForTest(pool: Pool) {
  // The real `shards prepare` path: schema shardctl, the demo tables and the fence on them.
  await prepareShard(pool, testConfig(), { demoSchema: true });
}

beforeAll(async () => {
  dir = directoryPool();
  await migrateDirectory(dir);
  await dir.query(`insert into shardctl.shards(name) values ('shard-a') on conflict (name) do nothing`);
  shardA = shardPool('shard-a');
  await prepareShardForTest(shardA);
});

afterEach(async () => {
  await Promise.all(routers.splice(0).map((r) => r.close()));
});

afterAll(closePools);

async function newRouter(): Promise<Router> {
  const r = await Router.create(testConfig(), { snapshotTtlMs: 60_000 });
  routers.push(r);
  return r;
}

async function newTenant(prefix: string): Promise<string> {
  const t = uniq(prefix);
  await dir.query(`insert into shardctl.units(unit, kind, shard, epoch, state) values ($1, 'tenant', 'shard-a', 1, 'active')`, [t]);
  await setUnitFence(shardA, { unit: t, epoch: 1, owned: true, frozen: false });
  return t;
}

const freeze = (t: string, frozen: boolean) => setUnitFence(shardA, { unit: t, epoch: 1, owned: true, frozen });

async function jobRows(t: string) {
  return (await shardA.query('select id, state, attempts, locked_by, last_error from public.jobs where tenant_id = $1 order by id', [t])).rows;
}

/** Runs test/helpers/job-crasher.ts: a worker process that SIGKILLs itself inside its first job; resolves with how it ended. */
function crashingWorker(
  t: string,
  workerId: string,
  leaseMs: number,
  maxAttempts: number,
): Promise<{ signal: string | null; code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, ['-r', 'tsx/cjs', 'test/helpers/job-crasher.ts', t, workerId, String(leaseMs), String(maxAttempts)], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), 90_000);
    p.on('error', reject);
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out });
    });
  });
}

async function enqueueMany(router: Router, t: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) ids.push(await enqueueJob(router, t, { tenants: [t] }, 'demo', { i }));
  return ids;
}

describe('job worker', () => {
  it('enqueues, claims and completes jobs through the router', async () => {
    const t = await newTenant('jb-basic');
    const router = await newRouter();
    const grant = { tenants: [t] };
    const ids = await enqueueMany(router, t, 5);
    const claimed = await claimJobs(router, t, grant, { workerId: 'w1', limit: 3 });
    expect(claimed).toHaveLength(3);
    for (const j of claimed) expect(j).toMatchObject({ tenantId: t, state: 'running', attempts: 1, lockedBy: 'w1', kind: 'demo' });
    expect(ids).toEqual(expect.arrayContaining(claimed.map((j) => j.id)));

    expect(await completeJob(router, t, grant, { id: claimed[0].id, workerId: 'w1' })).toBe(true);
    expect(await completeJob(router, t, grant, { id: claimed[1].id, workerId: 'w2' })).toBe(false); // not held by w2
    expect(await releaseJob(router, t, grant, { id: claimed[1].id, workerId: 'w1' })).toBe(true);

    const byId = new Map((await jobRows(t)).map((r) => [r.id, r]));
    expect(byId.get(claimed[0].id)).toMatchObject({ state: 'done', locked_by: null });
    expect(byId.get(claimed[1].id)).toMatchObject({ state: 'queued', locked_by: null, attempts: 1 });
    expect(byId.get(claimed[2].id)).toMatchObject({ state: 'running', locked_by: 'w1' });
    expect([...byId.values()].filter((r) => r.state === 'queued')).toHaveLength(3);
  });

  it('a claim on a frozen unit is refused and every job stays queued', async () => {
    const t = await newTenant('jb-frozen');
    const router = await newRouter();
    await enqueueMany(router, t, 3);
    await freeze(t, true);
    await expect(claimJobs(router, t, { tenants: [t] }, { workerId: 'w1', limit: 10, deadlineMs: 200 })).rejects.toMatchObject({
      type: 'Frozen',
      retriable: true,
    });
    for (const r of await jobRows(t)) expect(r).toMatchObject({ state: 'queued', attempts: 0, locked_by: null });
  });

  it('two workers claiming concurrently never claim the same job', async () => {
    const t = await newTenant('jb-race');
    const router = await newRouter();
    const other = await newRouter(); // a second worker process has its own router and pool
    const grant = { tenants: [t] };
    const ids = await enqueueMany(router, t, 40);
    const claimedBy = new Map<string, string[]>();
    const claimer = async (r: Router, workerId: string) => {
      for (;;) {
        const got = await claimJobs(r, t, grant, { workerId, limit: 3 });
        if (got.length === 0) return;
        for (const j of got) claimedBy.set(j.id, [...(claimedBy.get(j.id) ?? []), workerId]);
      }
    };
    await Promise.all([claimer(router, 'w1'), claimer(other, 'w2'), claimer(router, 'w1b'), claimer(other, 'w2b')]);
    expect([...claimedBy.keys()].sort()).toEqual([...ids].sort());
    for (const [, by] of claimedBy) expect(by).toHaveLength(1);
    for (const r of await jobRows(t)) expect(r).toMatchObject({ state: 'running', attempts: 1 });
  });

  it('runJobWorker waits out a frozen unit, then two workers complete every job exactly once', async () => {
    const t = await newTenant('jb-loop');
    const router = await newRouter();
    const grant = { tenants: [t] };
    const ids = await enqueueMany(router, t, 12);
    await freeze(t, true);
    const handled: string[] = [];
    const refusals: unknown[] = [];
    const ac = new AbortController();
    const handler = async (job: Job) => {
      handled.push(job.id);
    };
    const common = {
      router,
      tenants: [t],
      grant,
      pollMs: 20,
      handler,
      signal: ac.signal,
      batch: 2,
      // Long enough that a loaded machine's slow claim is not an error (at 100 ms, a CI run at load
      // 17 counted one), short enough that the frozen unit's refusals come within the wait below.
      call: { deadlineMs: 1000 },
      onError: (e: unknown) => refusals.push(e),
    };
    const workers = [runJobWorker({ ...common, workerId: 'loop-1' }), runJobWorker({ ...common, workerId: 'loop-2' })];
    try {
      await vi.waitFor(() => expect(refusals.length).toBeGreaterThanOrEqual(2), { timeout: 5000 });
      expect(handled).toHaveLength(0);
      for (const r of await jobRows(t)) expect(r).toMatchObject({ state: 'queued', attempts: 0 });
      await freeze(t, false);
      await vi.waitFor(async () => expect((await jobRows(t)).every((r) => r.state === 'done')).toBe(true), { timeout: 10_000, interval: 50 });
    } finally {
      ac.abort();
    }
    const stats = await Promise.all(workers);
    expect([...handled].sort()).toEqual([...ids].sort()); // each job handled exactly once
    expect(stats[0].completed + stats[1].completed).toBe(12);
    expect(stats[0].refusals + stats[1].refusals).toBeGreaterThanOrEqual(2);
    expect(stats[0].errors + stats[1].errors).toBe(0);
    expect(refusals.every((e: any) => e.type === 'Frozen')).toBe(true);
  });

  it(
    'a job whose worker process is killed inside it, maxAttempts times, goes to dead-letter with its last error; no worker runs it again',
    { timeout: 240_000 },
    async () => {
      const t = await newTenant('jb-dead');
      const router = await newRouter();
      const [id] = await enqueueMany(router, t, 1);
      const LEASE_MS = 300;
      const MAX = 3;
      for (let i = 1; i <= MAX; i++) {
        // Each process re-queues the previous one's expired claim (a process starts in more than the lease), claims the job and dies in it.
        const r = await crashingWorker(t, `crasher-${i}`, LEASE_MS, MAX);
        expect(r, r.out).toMatchObject({ signal: 'SIGKILL' });
        expect(r.out).toContain('crashing');
        expect(await jobRows(t)).toMatchObject([{ id, state: 'running', attempts: i, locked_by: `crasher-${i}` }]);
      }
      await new Promise((r) => setTimeout(r, LEASE_MS + 100));
      // A healthy worker finds the third expired claim: dead-letter, never handled.
      const handled: string[] = [];
      const ac = new AbortController();
      const worker = runJobWorker({
        router,
        tenants: [t],
        grant: { tenants: [t] },
        workerId: 'healthy',
        pollMs: 20,
        leaseMs: LEASE_MS,
        maxAttempts: MAX,
        signal: ac.signal,
        handler: async (j) => void handled.push(j.id),
      });
      try {
        await vi.waitFor(async () => expect((await jobRows(t))[0].state).toBe('dead'), { timeout: 10_000, interval: 50 });
        await new Promise((r) => setTimeout(r, 3 * LEASE_MS)); // rounds go on: nothing claims a dead job
      } finally {
        ac.abort();
      }
      const stats = await worker;
      expect(handled).toEqual([]);
      expect(stats).toMatchObject({ dead: 1, claimed: 0 });
      const [row] = await jobRows(t);
      expect(row).toMatchObject({ state: 'dead', attempts: MAX, locked_by: null });
      expect(row.last_error).toMatch(/lease expired: worker crasher-3 stopped without finishing attempt 3 of 3 \(dead-letter\)/);
    },
  );

  it('a completion refused because the unit froze (a cutover) is retried until it lands: the job ends done, run once, never left running', async () => {
    const t = await newTenant('jb-complete-frozen');
    const router = await newRouter();
    const [id] = await enqueueMany(router, t, 1);
    const handled: string[] = [];
    const refusals: string[] = [];
    const ac = new AbortController();
    let unfreeze: Promise<unknown> | undefined;
    const worker = runJobWorker({
      router,
      tenants: [t],
      grant: { tenants: [t] },
      workerId: 'w-frozen',
      pollMs: 50,
      leaseMs: 30_000,
      signal: ac.signal,
      call: { deadlineMs: 200 },
      onError: (e: any) => refusals.push(e?.type),
      handler: async (j) => {
        handled.push(j.id);
        // The cutover freezes the unit while the job finishes, and lifts it 1.5 s later.
        await freeze(t, true);
        unfreeze = new Promise((r) => setTimeout(r, 1500)).then(() => freeze(t, false));
      },
    });
    try {
      await vi.waitFor(() => expect(refusals).toContain('Frozen'), { timeout: 10_000, interval: 20 });
      expect(await jobRows(t)).toMatchObject([{ id, state: 'running', locked_by: 'w-frozen' }]);
      await vi.waitFor(async () => expect((await jobRows(t))[0].state).toBe('done'), { timeout: 15_000, interval: 50 });
    } finally {
      ac.abort();
      await unfreeze;
    }
    const stats = await worker;
    expect(handled).toEqual([id]);
    expect(stats).toMatchObject({ completed: 1, leasesLost: 0 });
    expect(await jobRows(t)).toMatchObject([{ id, state: 'done', attempts: 1, locked_by: null }]);
  });

  it('a handler running longer than its lease keeps the job: the lease is renewed, no other worker re-queues or runs it', async () => {
    const t = await newTenant('jb-renew');
    const router = await newRouter();
    const [id] = await enqueueMany(router, t, 1);
    const runs: string[] = [];
    const ac = new AbortController();
    const common = { router, tenants: [t], grant: { tenants: [t] }, pollMs: 30, leaseMs: 400, signal: ac.signal };
    const slow = runJobWorker({
      ...common,
      workerId: 'slow',
      handler: async (j, { signal }) => {
        runs.push(`slow:${j.id}`);
        await new Promise((r) => setTimeout(r, 2000)); // five leases long
        expect(signal.aborted).toBe(false);
      },
    });
    await vi.waitFor(() => expect(runs).toHaveLength(1), { timeout: 10_000, interval: 20 });
    // A second worker polls (and re-queues expired claims) all through the slow job.
    const other = runJobWorker({ ...common, workerId: 'other', handler: async (j) => void runs.push(`other:${j.id}`) });
    try {
      await vi.waitFor(async () => expect((await jobRows(t))[0].state).toBe('done'), { timeout: 15_000, interval: 50 });
    } finally {
      ac.abort();
    }
    const [s1, s2] = await Promise.all([slow, other]);
    expect(runs).toEqual([`slow:${id}`]);
    expect(s1).toMatchObject({ completed: 1, leasesLost: 0 });
    expect(s2).toMatchObject({ requeued: 0, claimed: 0 });
    expect(await jobRows(t)).toMatchObject([{ id, state: 'done', attempts: 1 }]);
  });

  it('refuses a worker whose grant does not cover the tenant, touching nothing', async () => {
    const t = await newTenant('jb-grant');
    const router = await newRouter();
    await enqueueMany(router, t, 2);
    await expect(claimJobs(router, t, { tenants: ['someone-else'] }, { workerId: 'w1', limit: 5 })).rejects.toMatchObject({ type: 'Forbidden' });
    await expect(enqueueJob(router, t, { tenants: [] }, 'demo', {})).rejects.toMatchObject({ type: 'Forbidden' });
    for (const r of await jobRows(t)) expect(r).toMatchObject({ state: 'queued', attempts: 0 });
    expect(await jobRows(t)).toHaveLength(2);
  });
});
