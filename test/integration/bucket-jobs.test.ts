// Jobs of a bucket unit on a real shard (issue 13, "jobs follow the unit that owns them"): a
// dataset's jobs are rows of its jobs table, enqueued by key through the router and claimed per
// bucket unit at the unit's epoch, so a claim touches only its bucket, a frozen bucket's jobs
// wait while the others run, a stale epoch is refused, two workers never run one job, and prepare
// names a jobs table a bucket move would leave behind.
import { describe, it, expect, beforeAll, afterAll, afterEach, vi } from 'vitest';
import { randomBytes } from 'node:crypto';
import { testConfig, closePools, shardPool, directoryPool } from '../helpers/stack';
import { prepareStack } from '../helpers/move';
import * as H from '../helpers/move';
import { prepareShard } from '../../lib/shard/prepare';
import { initDataset } from '../../lib/datasets';
import { bucketOf } from '../../lib/buckets/hash';
import { bucketUnitName } from '../../lib/buckets/units';
import { setUnitFence } from '../../lib/shard/fence';
import type { Config } from '../../lib/config';
import { Router } from '../../lib/router';
import { allBuckets, claimBucketJobs, datasetJobsTableSql, enqueueKeyJob, runJobWorker, type Job } from '../../lib/jobs/worker';
import { bucketJobQueue } from '../../lib/jobs/queue';

const SHARD = 'shard-c';
const B = 8;
const schema = `bj_${randomBytes(4).toString('hex')}`;
const dataset = `bj_${randomBytes(4).toString('hex')}`;
const jobsTable = `${schema}.jobs`;
let config: Config;
let prepared: Awaited<ReturnType<typeof prepareShard>>;
const grant = { tenants: [] as string[], datasets: [dataset] };
const unitOf = (n: number) => bucketUnitName(dataset, n, B);
const routers: Router[] = [];

function keysIn(bucket: number, count: number, prefix: string): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < count; i++) if (bucketOf(`${prefix}${i}`, B) === bucket) out.push(`${prefix}${i}`);
  return out;
}

beforeAll(async () => {
  await prepareStack();
  const base = testConfig();
  const ds = { name: dataset, column: 'key', buckets: B, bucketColumn: 'bucket', tables: [`${schema}.events`, jobsTable] };
  config = { ...base, tenant: { ...base.tenant, schemas: [...base.tenant.schemas, schema] }, datasets: [{ ...ds, jobsTable }] };
  await shardPool(SHARD).query(`create schema ${schema};
    create table ${schema}.events (bucket int not null, key text not null, v int, primary key (bucket, key), check (bucket = shardctl.bucket_of(key, ${B})));
    ${datasetJobsTableSql(jobsTable, ds)}`);
  prepared = await prepareShard(shardPool(SHARD), config);
  await initDataset({ directory: directoryPool(), shardPool, config }, { dataset, shard: SHARD, actor: 'test' });
}, 60_000);

afterEach(async () => {
  await Promise.all(routers.splice(0).map((r) => r.close()));
});

afterAll(async () => {
  await shardPool(SHARD)
    .query(`drop schema if exists ${schema} cascade; drop table if exists shardctl.blob_index_${dataset}`)
    .catch(() => {});
  await closePools();
});

async function newRouter(): Promise<Router> {
  const r = await Router.create(config, { snapshotTtlMs: 60_000 });
  routers.push(r);
  return r;
}

async function jobRows(bucket?: number) {
  const r = await shardPool(SHARD).query(
    `select bucket, key, id, state, attempts, locked_by from ${jobsTable} where $1::int is null or bucket = $1 order by id`,
    [bucket ?? null],
  );
  return r.rows;
}

describe('jobs of a bucket unit', () => {
  it('prepare accepts the jobs table shaped by datasetJobsTableSql and names one a bucket move would leave behind', async () => {
    expect(prepared.problems.filter((p) => p.includes(schema))).toEqual([]);
    // A config whose dataset tables leave the jobs table out (a move would not carry it): named, as a problem.
    const wrong = { ...config, datasets: [{ ...config.datasets[0], tables: [`${schema}.events`] }] };
    const again = await prepareShard(shardPool(SHARD), wrong);
    expect(again.problems.filter((p) => p.includes(`jobs table ${jobsTable}`))).toHaveLength(1);
    expect((await prepareShard(shardPool(SHARD), config)).problems.filter((p) => p.includes(schema))).toEqual([]);
  });

  it('a job enqueued by key lands in its bucket, and a claim of a bucket unit takes only that bucket', async () => {
    const router = await newRouter();
    const [k3a, k3b] = keysIn(3, 2, 'one-');
    const [k5] = keysIn(5, 1, 'one-');
    const ids3 = [await enqueueKeyJob(router, dataset, k3a, grant, 'demo', { k: k3a }), await enqueueKeyJob(router, dataset, k3b, grant, 'demo', {})];
    const id5 = await enqueueKeyJob(router, dataset, k5, grant, 'demo', {});
    const rows = new Map((await jobRows()).map((r) => [r.id, r]));
    expect(rows.get(ids3[0])).toMatchObject({ bucket: 3, key: k3a, state: 'queued' });
    expect(rows.get(id5)).toMatchObject({ bucket: 5, key: k5, state: 'queued' });
    const claimed = await claimBucketJobs(router, dataset, 3, grant, { workerId: 'w1', limit: 10 });
    expect(claimed.map((j) => j.id).sort()).toEqual([...ids3].sort());
    for (const j of claimed) expect(j).toMatchObject({ unit: unitOf(3), dataset, bucket: 3, state: 'running', attempts: 1, lockedBy: 'w1' });
    expect(claimed.find((j) => j.id === ids3[0])).toMatchObject({ key: k3a, payload: { k: k3a } });
    expect((await jobRows(5)).map((r) => r.state)).toEqual(['queued']);
    // A grant without the dataset claims nothing and touches nothing.
    await expect(claimBucketJobs(router, dataset, 5, { tenants: [] }, { workerId: 'w1', limit: 10 })).rejects.toMatchObject({ type: 'Forbidden' });
    expect((await jobRows(5)).map((r) => r.state)).toEqual(['queued']);
  });

  it('a frozen bucket unit refuses its claims while the other buckets run; a stale epoch is refused by the fence (SC421)', async () => {
    const router = await newRouter();
    const [k1] = keysIn(1, 1, 'fz-');
    const [k2] = keysIn(2, 1, 'fz-');
    const id1 = await enqueueKeyJob(router, dataset, k1, grant, 'demo', {});
    const id2 = await enqueueKeyJob(router, dataset, k2, grant, 'demo', {});
    await setUnitFence(shardPool(SHARD), { unit: unitOf(1), epoch: 1, owned: true, frozen: true });
    try {
      await expect(claimBucketJobs(router, dataset, 1, grant, { workerId: 'w1', limit: 10, deadlineMs: 300 })).rejects.toMatchObject({ type: 'Frozen' });
      expect((await claimBucketJobs(router, dataset, 2, grant, { workerId: 'w1', limit: 10 })).map((j) => j.id)).toContain(id2);
      expect((await jobRows(1)).find((r) => r.id === id1)).toMatchObject({ state: 'queued', attempts: 0 });
    } finally {
      await setUnitFence(shardPool(SHARD), { unit: unitOf(1), epoch: 1, owned: true, frozen: false });
    }
    // The claim statement itself, sent at an epoch the shard no longer accepts (a stale worker's): SC421, nothing claimed.
    const [k6] = keysIn(6, 1, 'fz-');
    const id6 = await enqueueKeyJob(router, dataset, k6, grant, 'demo', {});
    await setUnitFence(shardPool(SHARD), { unit: unitOf(6), epoch: 2, owned: true, frozen: false });
    await directoryPool().query(`update shardctl.units set epoch = 2 where unit = $1`, [unitOf(6)]);
    const claim = `update ${jobsTable} set state = 'running', locked_by = 'stale' where bucket = 6 and state = 'queued'`;
    expect(await H.inUnitTx(SHARD, unitOf(6), 1, claim)).toBe('SC421');
    // And a transaction opened for another bucket's unit cannot claim this bucket's jobs: a row of another unit (SC403).
    expect(await H.inUnitTx(SHARD, unitOf(2), 1, claim)).toBe('SC403');
    expect((await jobRows(6)).find((r) => r.id === id6)).toMatchObject({ state: 'queued', attempts: 0, locked_by: null });
  });

  it('two workers over every bucket unit run each job exactly once and complete it', async () => {
    const router = await newRouter();
    const other = await newRouter();
    const ids: string[] = [];
    for (let i = 0; i < 60; i++) ids.push(await enqueueKeyJob(router, dataset, `race-${i}`, grant, 'demo', { i }));
    const runs = new Map<string, number>();
    const ac = new AbortController();
    const common = {
      grant,
      buckets: allBuckets(dataset, B),
      pollMs: 20,
      batch: 3,
      signal: ac.signal,
      handler: async (j: Job) => {
        runs.set(j.id, (runs.get(j.id) ?? 0) + 1);
        await new Promise((r) => setTimeout(r, 5));
      },
    };
    const workers = [runJobWorker({ ...common, router, workerId: 'bw-1' }), runJobWorker({ ...common, router: other, workerId: 'bw-2' })];
    try {
      const mine = async () => (await jobRows()).filter((r) => ids.includes(r.id));
      await vi.waitFor(async () => expect((await mine()).every((r) => r.state === 'done')).toBe(true), { timeout: 20_000, interval: 100 });
    } finally {
      ac.abort();
    }
    const stats = await Promise.all(workers);
    // (The cases before leave queued jobs in other buckets: the workers run those too, once each.)
    expect([...runs.keys()]).toEqual(expect.arrayContaining(ids));
    expect([...runs.values()].every((n) => n === 1)).toBe(true);
    expect(stats[0].completed + stats[1].completed).toBe(runs.size);
    expect(stats[0].errors + stats[1].errors).toBe(0);
    const rows = (await jobRows()).filter((r) => ids.includes(r.id));
    expect(rows).toHaveLength(60);
    for (const r of rows) expect(r).toMatchObject({ state: 'done', attempts: 1, locked_by: null });
    expect(new Set(rows.map((r) => r.bucket)).size).toBe(B); // 60 keys reach every one of the 8 buckets
  });

  it('a bucket queue names its unit, table and bucket predicate', async () => {
    const router = await newRouter();
    const q = bucketJobQueue(router, dataset, 7, grant);
    expect(q).toMatchObject({ unit: unitOf(7), table: `"${schema}"."jobs"`, unitColumn: '"bucket"', unitValue: 7 });
  });
});
