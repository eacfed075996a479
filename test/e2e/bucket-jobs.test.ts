// Jobs follow the bucket unit that owns them (issue 13): a dataset's jobs table holds each
// bucket's jobs; two job workers (one router hearing the directory's announcements, one with a
// stale snapshot that learns only from the shards' refusals) claim per bucket unit over every
// bucket while a bucket moves, with jobs enqueued before, during and after the move. The ledger
// (every enqueue the router acknowledged, every handler run) shows each job run exactly once
// (attempts 1, done on its unit's owner), across a move with retire and across a rollback; the
// retired source keeps none of the bucket's jobs, and the other buckets' jobs never moved.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { bucketDatasetNames, keysOfBucket as keysOfBucketOf, setUpBucketDataset, tearDownBucketDataset, type BucketDataset } from '../helpers/bucket-dataset';
import * as M from '../../workflows/messages';
import { Router } from '../../lib/router';
import { bucketOf } from '../../lib/buckets/hash';
import { bucketUnitName } from '../../lib/buckets/units';
import { moveInputFor } from '../../lib/moves/start';
import type { Config } from '../../lib/config';
import { allBuckets, datasetJobsTableSql, enqueueKeyJob, runJobWorker, type Job, type JobWorkerStats } from '../../lib/jobs/worker';

const B = 8;
const names = bucketDatasetNames({ prefix: 'bjm' });
const { schema, dataset } = names;
const jobsTable = `${schema}.jobs`;
let d: BucketDataset | undefined;
let config: Config;
let t: BucketDataset['t'];
let tq: string;
const grant = { tenants: [] as string[], datasets: [dataset] };
const unitOf = (bucket: number) => bucketUnitName(dataset, bucket, B);
const keysOfBucket = (bucket: number, count: number, prefix: string) => keysOfBucketOf(B, bucket, count, prefix);

beforeAll(async () => {
  d = await setUpBucketDataset({ prefix: 'bjm', buckets: B, jobs: datasetJobsTableSql }, names);
  ({ config, t, tq } = d);
}, 120_000);

afterAll(() => tearDownBucketDataset(names, d));

/** The ledger: every job the router acknowledged (id → bucket), and every handler run (id → count, when). */
class Ledger {
  readonly acked = new Map<string, number>();
  readonly runs = new Map<string, number>();
  readonly ranAt = new Map<string, number>();
  async enqueue(router: Router, key: string, i: number): Promise<void> {
    const id = await enqueueKeyJob(router, dataset, key, grant, 'e2e', { i });
    this.acked.set(id, bucketOf(key, B));
  }
  handler = async (job: Job) => {
    this.runs.set(job.id, (this.runs.get(job.id) ?? 0) + 1);
    await new Promise((r) => setTimeout(r, 40));
    this.ranAt.set(job.id, Date.now());
  };
  ofBucket(bucket: number): string[] {
    return [...this.acked].filter(([, b]) => b === bucket).map(([id]) => id);
  }
}

/** Two job workers over every bucket unit: one router with LISTEN, one whose snapshot only a shard's refusal refreshes. */
async function jobWorkers(ledger: Ledger) {
  const fresh = await Router.create(config);
  const stale = await Router.create(config, { listen: false, snapshotTtlMs: 600_000, fullReloadMs: 600_000 });
  const stop = new AbortController();
  const errors: unknown[] = [];
  const common = {
    grant,
    buckets: allBuckets(dataset, B),
    pollMs: 50,
    batch: 2,
    signal: stop.signal,
    call: { deadlineMs: 5000 },
    handler: ledger.handler,
    onError: (e: any) => {
      if (!['Frozen', 'StaleRoute', 'DirectoryUnavailable'].includes(e?.type)) errors.push(e);
    },
  };
  const runs = [runJobWorker({ ...common, router: fresh, workerId: 'bjm-fresh' }), runJobWorker({ ...common, router: stale, workerId: 'bjm-stale' })];
  return {
    stale,
    errors,
    async stop(): Promise<JobWorkerStats[]> {
      stop.abort();
      const stats = await Promise.all(runs);
      await fresh.close();
      await stale.close();
      return stats;
    },
  };
}

/** Enqueues jobs to random keys (every bucket) until stopped; counts the enqueues that failed (there must be none). */
function liveEnqueuer(router: Router, ledger: Ledger, prefix: string) {
  let stop = false;
  let failed = 0;
  let i = 0;
  const done = (async () => {
    while (!stop) {
      await ledger.enqueue(router, `${prefix}-${i}`, i).catch(() => failed++);
      i++;
      await new Promise((r) => setTimeout(r, 30));
    }
  })();
  return {
    async stop() {
      stop = true;
      await done;
      return failed;
    },
  };
}

async function jobsOn(shard: string, bucket?: number): Promise<{ id: string; bucket: number; state: string; attempts: number }[]> {
  const r = await shardPool(shard).query(`select id, bucket, state, attempts from ${jobsTable} where $1::int is null or bucket = $1`, [bucket ?? null]);
  return r.rows;
}

/** Waits until every acked job of `ids` is done on `shard`. */
async function drained(shard: string, ids: string[], timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const done = new Set((await jobsOn(shard)).filter((r) => r.state === 'done').map((r) => r.id));
    if (ids.every((id) => done.has(id))) return;
    if (Date.now() > deadline) throw new Error(`${ids.filter((id) => !done.has(id)).length} of ${ids.length} jobs not done on ${shard}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('jobs of a bucket unit across a move', () => {
  it(
    "a bucket moved under live enqueues and two job workers: every acked job runs exactly once on its owner, the stale worker's refused calls land on the new owner, retire leaves none of the bucket's jobs on the source",
    { timeout: 300_000 },
    async () => {
      const moved = 3;
      const ledger = new Ledger();
      const router = await Router.create(config);
      // Jobs due before the move: the moved bucket's (about 10 s of handler time for two workers) and the others'.
      for (const [i, key] of keysOfBucket(moved, 120, 'before').entries()) await ledger.enqueue(router, key, i);
      for (let i = 0; i < 40; i++) await ledger.enqueue(router, `other-${i}`, i);
      const workers = await jobWorkers(ledger);
      const enqueuer = liveEnqueuer(router, ledger, 'during');
      let stats: JobWorkerStats[] = [];
      try {
        const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: unitOf(moved), target: 'shard-b', requestedBy: 'test', soakSeconds: 4 }));
        await H.waitPhase(h, 'soak', 200_000);
        expect(await H.placement(unitOf(moved))).toMatchObject({ shard: 'shard-b', epoch: 2 });
        expect(await enqueuer.stop()).toBe(0);
        // Jobs enqueued after the switch land on the new owner.
        for (const [i, key] of keysOfBucket(moved, 10, 'after').entries()) await ledger.enqueue(router, key, i);
        expect((await jobsOn('shard-b', moved)).map((r) => r.id)).toEqual(expect.arrayContaining(ledger.ofBucket(moved)));
        const done = await H.waitPhase(h, 'done', 120_000);
        expect(done.phase).toBe('done');
        await drained('shard-b', ledger.ofBucket(moved));
        await drained(
          'shard-a',
          [...ledger.acked].filter(([, b]) => b !== moved).map(([id]) => id),
        );
      } finally {
        stats = await workers.stop();
        await enqueuer.stop();
        await router.close();
      }
      expect(workers.errors).toEqual([]);
      // Exactly once: every acked job ran once, nothing else ran, and no job was claimed twice.
      expect([...ledger.runs.keys()].sort()).toEqual([...ledger.acked.keys()].sort());
      expect([...ledger.runs].filter(([, n]) => n !== 1)).toEqual([]);
      expect(stats[0].completed + stats[1].completed).toBe(ledger.acked.size);
      const onB = await jobsOn('shard-b');
      expect(onB.every((r) => r.bucket === moved && r.state === 'done' && r.attempts === 1)).toBe(true);
      expect(onB.map((r) => r.id).sort()).toEqual(ledger.ofBucket(moved).sort());
      // Retire deleted the moved bucket's jobs on the source, and only them.
      expect(await jobsOn('shard-a', moved)).toEqual([]);
      const onA = await jobsOn('shard-a');
      expect(onA.map((r) => r.id).sort()).toEqual(
        [...ledger.acked]
          .filter(([, b]) => b !== moved)
          .map(([id]) => id)
          .sort(),
      );
      expect(onA.every((r) => r.state === 'done' && r.attempts === 1)).toBe(true);
      // The moved bucket's jobs ran on both sides of the switch, and the stale worker learned the new owner from refusals.
      const switchedAt = Date.parse((await H.placement(unitOf(moved)))!.updatedAt);
      const ranMoved = ledger.ofBucket(moved).map((id) => ledger.ranAt.get(id)!);
      expect(ranMoved.filter((x) => x < switchedAt).length).toBeGreaterThan(0);
      expect(ranMoved.filter((x) => x > switchedAt).length).toBeGreaterThan(0);
      expect(workers.stale.metrics().staleRetries).toBeGreaterThan(0);
    },
  );

  it(
    'a bucket rolled back during soak: jobs enqueued and run on the new owner come back done, each run once, and the rest run on the old owner',
    { timeout: 300_000 },
    async () => {
      const bucket = 5;
      const ledger = new Ledger();
      const router = await Router.create(config);
      for (const [i, key] of keysOfBucket(bucket, 60, 'rb-before').entries()) await ledger.enqueue(router, key, i);
      const workers = await jobWorkers(ledger);
      let stats: JobWorkerStats[] = [];
      try {
        const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: unitOf(bucket), target: 'shard-b', requestedBy: 'test', soakSeconds: 600 }));
        await H.waitPhase(h, 'soak', 200_000);
        const during = keysOfBucket(bucket, 20, 'rb-soak');
        for (const [i, key] of during.entries()) await ledger.enqueue(router, key, i);
        await drained('shard-b', ledger.ofBucket(bucket));
        await h.executeUpdate(M.rollbackUpdate, { args: [{ actor: 'sre-test', reason: 'test' }] });
        await H.waitPhase(h, 'rolled-back', 120_000);
        expect(await H.placement(unitOf(bucket))).toMatchObject({ shard: 'shard-a', epoch: 3, state: 'active' });
        // After the rollback: new jobs land on the old owner and run there.
        for (const [i, key] of keysOfBucket(bucket, 10, 'rb-after').entries()) await ledger.enqueue(router, key, i);
        await drained('shard-a', ledger.ofBucket(bucket));
      } finally {
        stats = await workers.stop();
        await router.close();
      }
      expect(workers.errors).toEqual([]);
      expect([...ledger.runs.keys()].sort()).toEqual([...ledger.acked.keys()].sort());
      expect([...ledger.runs].filter(([, n]) => n !== 1)).toEqual([]);
      expect(stats[0].completed + stats[1].completed).toBe(ledger.acked.size);
      const mine = (await jobsOn('shard-a', bucket)).filter((r) => ledger.acked.has(r.id));
      expect(mine.map((r) => r.id).sort()).toEqual([...ledger.acked.keys()].sort());
      expect(mine.every((r) => r.state === 'done' && r.attempts === 1)).toBe(true);
      // The new owner's copy is removed by the rollback's clean-up.
      expect(await jobsOn('shard-b', bucket)).toEqual([]);
    },
  );
});
