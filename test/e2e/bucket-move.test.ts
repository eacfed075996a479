// A bucket of a bucket-routed dataset moves exactly like a tenant (issue 13, "Routing units"):
// a table of its own routed by `bucket_of(key, B)`, its B buckets placed on shard-a by
// `dataset init`, rows written through the router by key, then one bucket moved to shard-b under
// live router writes (copy, catch-up, validate, fence, switch, soak, retire), and another moved
// and rolled back during soak. Asserts DESIGN.md §5 for the bucket: only its rows moved, the other
// buckets untouched, the old owner refuses the old epoch, router writes land on the new owner, no
// acknowledged write lost, retire deletes only that bucket's rows. A third bucket moves with its
// objects (datasets/<dataset>/<n>/, written through the router's route.blobs during the move):
// all on the target with their bytes, no other bucket's object touched, retire deleting only
// that bucket's source objects, and only after soak; and one with objects rolled back during soak
// brings those written on the new owner back, and leaves no copy there.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { bucketDatasetNames, keysOfBucket as keysOfBucketOf, setUpBucketDataset, tearDownBucketDataset, type BucketDataset } from '../helpers/bucket-dataset';
import * as M from '../../workflows/messages';
import { Router } from '../../lib/router';
import { bucketOf } from '../../lib/buckets/hash';
import { bucketUnitName } from '../../lib/buckets/units';
import { moveInputFor } from '../../lib/moves/start';
import { shardByName, type Config } from '../../lib/config';
import { s3ClientFor } from '../../lib/s3';
import { hashObject, listBlobs, unitBlobPrefix } from '../../lib/blobs';
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';

const B = 8;
const names = bucketDatasetNames({ prefix: 'bk', datasetPrefix: 'ev' });
const { schema, dataset } = names;
let d: BucketDataset | undefined;
let config: Config;
let t: BucketDataset['t'];
let tq: string;
const grant = { tenants: [] as string[], datasets: [dataset] };
const unitOf = (bucket: number) => bucketUnitName(dataset, bucket, B);
const keysOfBucket = (bucket: number, count: number, prefix: string) => keysOfBucketOf(B, bucket, count, prefix);

beforeAll(async () => {
  d = await setUpBucketDataset({ prefix: 'bk', buckets: B, eventsColumns: 'payload text' }, names);
  ({ config, t, tq } = d);
  expect(d.init).toMatchObject({ buckets: B, created: B, present: 0, elsewhere: [] });
}, 120_000);

afterAll(async () => {
  for (const c of s3s.values()) c.destroy();
  await tearDownBucketDataset(names, d);
});

const s3s = new Map<string, S3Client>();
const s3Of = (shard: string) => s3s.get(shard) ?? s3s.set(shard, s3ClientFor(config, shard)).get(shard)!;
const bucketOfShard = (shard: string) => shardByName(config, shard).bucket;

/** Acknowledged writes: key → the n of every row the router committed. */
type Acked = Map<string, number[]>;

async function write(router: Router, key: string, n: number, acked: Acked): Promise<string> {
  const shard = await router.withKey(dataset, key, grant, 'write', async (tx, route) => {
    await tx.query(`insert into ${schema}.events(bucket, key, n, payload) values ($1, $2, $3, $4)`, [route.bucket, key, n, `p${n}`]);
    return route.shard;
  });
  acked.set(key, [...(acked.get(key) ?? []), n]);
  return shard;
}

/** Writes to random keys until stopped; counts the refusals it could not retry (there must be none). */
function liveWriter(router: Router, keys: string[], acked: Acked) {
  let stop = false;
  let failed = 0;
  let n = 1000;
  const done = (async () => {
    while (!stop) {
      const key = keys[Math.floor(Math.random() * keys.length)];
      await write(router, key, n++, acked).catch(() => failed++);
      await new Promise((r) => setTimeout(r, 15));
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

async function rowsOn(shard: string, bucket?: number): Promise<Map<string, number[]>> {
  const r = await shardPool(shard).query(`select key, array_agg(n order by n) as ns from ${schema}.events where $1::int is null or bucket = $1 group by key`, [
    bucket ?? null,
  ]);
  return new Map(r.rows.map((x) => [x.key, x.ns]));
}

const sorted = (m: Acked, pred: (key: string) => boolean) =>
  new Map(
    [...m]
      .filter(([k]) => pred(k))
      .map(([k, v]) => [k, [...v].sort((a, b) => a - b)] as const)
      .sort(([a], [b]) => (a < b ? -1 : 1)),
  );
const asSorted = (m: Map<string, number[]>) => new Map([...m].sort(([a], [b]) => (a < b ? -1 : 1)));

/** An open write transaction on `shard` for the unit at `epoch`, as an outdated router would send it: 'ok' or the SQLSTATE. */
async function tryOldEpochWrite(shard: string, bucket: number, epoch: number): Promise<string> {
  const key = keysOfBucket(bucket, 1, 'stale')[0];
  return H.inUnitTx(shard, unitOf(bucket), epoch, `insert into ${schema}.events(bucket, key, n, payload) values ($1, $2, 1, 'stale')`, [bucket, key]);
}

describe('bucket move, end to end', () => {
  it(
    'moves one bucket under live router writes: only its rows move, the old epoch is refused, no acked write is lost, retire deletes only that bucket',
    { timeout: 300_000 },
    async () => {
      const router = await Router.create(config);
      const acked: Acked = new Map();
      const keys = Array.from({ length: 160 }, (_, i) => `k-${i}`);
      try {
        for (const [i, key] of keys.entries()) expect(await write(router, key, i, acked)).toBe('shard-a');
        const moved = 3;
        const inMoved = (k: string) => bucketOf(k, B) === moved;
        expect(keys.filter(inMoved).length).toBeGreaterThan(5);
        // A write that names another bucket's unit is refused by the fence trigger (a row of another unit).
        const other = keys.find((k) => !inMoved(k))!;
        await expect(
          router.withKey(dataset, keysOfBucket(moved, 1, 'x')[0], grant, 'write', (tx) =>
            tx.query(`insert into ${schema}.events(bucket, key, n) values ($1, $2, 1)`, [bucketOf(other, B), other]),
          ),
        ).rejects.toMatchObject({ code: 'SC403' });

        const before = await rowsOn('shard-a');
        const writer = liveWriter(router, keys, acked);
        const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: unitOf(moved), target: 'shard-b', requestedBy: 'test', soakSeconds: 4 }));
        expect(h.workflowId).toBe(`move-${unitOf(moved)}`);
        const soak = await H.waitPhase(h, 'soak', 200_000);
        expect(soak.epoch).toBe(2);
        expect(await H.placement(unitOf(moved))).toMatchObject({ shard: 'shard-b', epoch: 2, kind: 'bucket' });
        // Router writes to the moved bucket land on the new owner; the other buckets stay on shard-a.
        const movedKey = keys.find(inMoved)!;
        expect(await write(router, movedKey, 5000, acked)).toBe('shard-b');
        expect(await write(router, other, 5000, acked)).toBe('shard-a');
        // The old owner refuses the moved bucket under its old epoch; other buckets' epochs still pass there.
        expect(await tryOldEpochWrite('shard-a', moved, 1)).toBe('SC421');
        expect(await tryOldEpochWrite('shard-b', moved, 2)).toBe('ok');
        expect(await tryOldEpochWrite('shard-a', bucketOf(other, B), 1)).toBe('ok');
        const failed = await writer.stop();
        expect(failed).toBe(0);

        const done = await H.waitPhase(h, 'done', 120_000);
        expect(done.phase).toBe('done');
        // Every acked write of the moved bucket is on shard-b, and shard-b holds nothing else.
        expect(asSorted(await rowsOn('shard-b'))).toEqual(sorted(acked, inMoved));
        // Retire deleted the moved bucket's rows on shard-a and nothing else: every other bucket's acked rows are there.
        expect((await rowsOn('shard-a', moved)).size).toBe(0);
        expect(asSorted(await rowsOn('shard-a'))).toEqual(sorted(acked, (k) => !inMoved(k)));
        // The other buckets were never touched: their rows from before the move are all still there.
        for (const [k, ns] of before) if (!inMoved(k)) expect((await rowsOn('shard-a')).get(k)).toEqual(expect.arrayContaining(ns));
        expect(await H.replicationLeftovers(`${unitOf(moved)}.e1`)).toEqual([]);
      } finally {
        await router.close();
      }
    },
  );

  it('a bucket rolled back during soak loses no write made on the new owner', { timeout: 300_000 }, async () => {
    const router = await Router.create(config);
    const acked: Acked = new Map();
    const bucket = 5;
    const keys = keysOfBucket(bucket, 12, 'rb');
    try {
      for (const [i, key] of keys.entries()) await write(router, key, i, acked);
      const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: unitOf(bucket), target: 'shard-b', requestedBy: 'test', soakSeconds: 600 }));
      await H.waitPhase(h, 'soak', 200_000);
      for (const [i, key] of keys.entries()) expect(await write(router, key, 100 + i, acked)).toBe('shard-b');
      await h.executeUpdate(M.rollbackUpdate, { args: [{ actor: 'sre-test', reason: 'test' }] });
      await H.waitPhase(h, 'rolled-back', 120_000);
      expect(await H.placement(unitOf(bucket))).toMatchObject({ shard: 'shard-a', epoch: 3, state: 'active' });
      // Every write, before the move and on the new owner during soak, is back on shard-a; shard-b keeps no copy.
      const mine = new Map([...(await rowsOn('shard-a', bucket))].filter(([k]) => k.startsWith('rb-')));
      expect(asSorted(mine)).toEqual(sorted(acked, () => true));
      expect((await rowsOn('shard-b', bucket)).size).toBe(0);
      expect(await write(router, keys[0], 999, acked)).toBe('shard-a');
      expect(await tryOldEpochWrite('shard-b', bucket, 2)).toBe('SC421');
    } finally {
      await router.close();
    }
  });

  it(
    "moves a bucket with its objects under live object writes: every acked object on the target with its bytes, no other bucket's touched, retire deletes only its source objects after soak",
    { timeout: 300_000 },
    async () => {
      const router = await Router.create(config);
      const moved = 6;
      const prefix = unitBlobPrefix(unitOf(moved));
      expect(prefix).toBe(`datasets/${dataset}/6/`);
      /** Acknowledged objects: key → sha256 and the bucket of the row that names it. */
      const objects = new Map<string, { sha256: string; bucket: number }>();
      const writeObject = async (key: string, n: number) => {
        const body = randomBytes(64 + (n % 7) * 300);
        const r = await router.withKey(dataset, key, grant, 'write', async (tx, route) => {
          const put = await route.blobs.put(`docs/${key}/${n}`, body);
          await tx.query(`insert into ${schema}.events(bucket, key, n, payload) values ($1, $2, $3, $4)`, [route.bucket, key, n, put.key]);
          return { shard: route.shard, key: put.key, bucket: route.bucket };
        });
        objects.set(r.key, { sha256: createHash('sha256').update(body).digest('hex'), bucket: r.bucket });
        return r.shard;
      };
      const mine = keysOfBucket(moved, 16, 'ob');
      const others = Array.from({ length: 40 }, (_, i) => `oo-${i}`).filter((k) => ![moved, 3].includes(bucketOf(k, B))); // bucket 3 is on shard-b after the first case
      const all = [...mine, ...others];
      let stop = false;
      let failed = 0;
      try {
        for (const [i, key] of all.entries()) expect(await writeObject(key, i)).toBe('shard-a');
        // Objects of every bucket are on shard-a, each under its own bucket's prefix.
        const sourceBefore = await listBlobs(s3Of('shard-a'), bucketOfShard('shard-a'), `datasets/${dataset}/`);
        for (const [k, o] of objects) expect(k.startsWith(unitBlobPrefix(unitOf(o.bucket))), k).toBe(true);
        expect(sourceBefore.filter((e) => e.key.startsWith(prefix)).length).toBe(mine.length);

        // Objects written through the router while the move runs, to this bucket and to the others.
        let n = 10_000;
        const writer = (async () => {
          while (!stop) {
            const key = all[Math.floor(Math.random() * all.length)];
            await writeObject(key, n++).catch(() => failed++);
            await new Promise((r) => setTimeout(r, 20));
          }
        })();
        const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: unitOf(moved), target: 'shard-c', requestedBy: 'test', soakSeconds: 8 }));
        await H.waitPhase(h, 'soak', 200_000);
        expect(await H.placement(unitOf(moved))).toMatchObject({ shard: 'shard-c', epoch: 2 });
        // After the switch the bucket's objects are written to the new owner's S3 bucket.
        expect(await writeObject(mine[0], n++)).toBe('shard-c');
        expect(await writeObject(others[0], n++)).toBe('shard-a');
        stop = true;
        await writer;
        expect(failed).toBe(0);
        // During soak the source keeps the bucket's objects (the way back): retire has not run.
        const duringSoak = await listBlobs(s3Of('shard-a'), bucketOfShard('shard-a'), prefix);
        expect(duringSoak.length).toBeGreaterThanOrEqual(mine.length);

        const done = await H.waitPhase(h, 'done', 120_000);
        expect(done.phase).toBe('done');
        const ackedMoved = [...objects].filter(([, o]) => o.bucket === moved);
        const ackedOther = [...objects].filter(([, o]) => o.bucket !== moved);
        expect(ackedMoved.length).toBeGreaterThan(mine.length);
        // The target holds exactly the moved bucket's acked objects under datasets/<dataset>/, each with its bytes.
        const onTarget = await listBlobs(s3Of('shard-c'), bucketOfShard('shard-c'), `datasets/${dataset}/`);
        expect(onTarget.map((e) => e.key).sort()).toEqual(ackedMoved.map(([k]) => k).sort());
        for (const [k, o] of ackedMoved) expect((await hashObject(s3Of('shard-c'), bucketOfShard('shard-c'), k)).sha256, k).toBe(o.sha256);
        // Retire deleted the bucket's source objects, and only them: every other bucket's acked object is on shard-a with its bytes.
        expect(await listBlobs(s3Of('shard-a'), bucketOfShard('shard-a'), prefix)).toEqual([]);
        const onSource = await listBlobs(s3Of('shard-a'), bucketOfShard('shard-a'), `datasets/${dataset}/`);
        expect(onSource.map((e) => e.key).sort()).toEqual(ackedOther.map(([k]) => k).sort());
        for (const [k, o] of ackedOther) expect((await hashObject(s3Of('shard-a'), bucketOfShard('shard-a'), k)).sha256, k).toBe(o.sha256);
        // Every acked row naming an object of the moved bucket is on the target (the first case's rows of this bucket name none).
        const rows = await shardPool('shard-c').query(`select payload from ${schema}.events where bucket = $1 and payload like 'datasets/%'`, [moved]);
        expect(rows.rows.map((r) => r.payload).sort()).toEqual(ackedMoved.map(([k]) => k).sort());
      } finally {
        stop = true;
        await router.close();
      }
    },
  );

  it(
    "a bucket with objects rolled back during soak: every object, also those written on the new owner, is back on the old owner with its bytes, and the new owner's copy is removed",
    { timeout: 300_000 },
    async () => {
      const router = await Router.create(config);
      const bucket = 7;
      const prefix = unitBlobPrefix(unitOf(bucket));
      const objects = new Map<string, string>();
      const writeObject = async (key: string, n: number) => {
        const body = randomBytes(100 + n);
        const r = await router.withKey(dataset, key, grant, 'write', async (tx, route) => {
          const put = await route.blobs.put(`docs/${key}/${n}`, body);
          await tx.query(`insert into ${schema}.events(bucket, key, n, payload) values ($1, $2, $3, $4)`, [route.bucket, key, n, put.key]);
          return { shard: route.shard, key: put.key };
        });
        objects.set(r.key, createHash('sha256').update(body).digest('hex'));
        return r.shard;
      };
      const keys = keysOfBucket(bucket, 6, 'rbo');
      try {
        for (const [i, key] of keys.entries()) expect(await writeObject(key, i)).toBe('shard-a');
        const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: unitOf(bucket), target: 'shard-b', requestedBy: 'test', soakSeconds: 600 }));
        await H.waitPhase(h, 'soak', 200_000);
        for (const [i, key] of keys.entries()) expect(await writeObject(key, 100 + i)).toBe('shard-b');
        await h.executeUpdate(M.rollbackUpdate, { args: [{ actor: 'sre-test', reason: 'test' }] });
        await H.waitPhase(h, 'rolled-back', 120_000);
        expect(await H.placement(unitOf(bucket))).toMatchObject({ shard: 'shard-a', state: 'active' });
        // This case's objects (docs/rbo-…): the case before it leaves objects of its own under
        // every bucket's prefix on shard-a, bucket 7's too (they stay there, never moved).
        const onA = (await listBlobs(s3Of('shard-a'), bucketOfShard('shard-a'), prefix)).filter((e) => e.key.startsWith(`${prefix}docs/rbo-`));
        expect(onA.map((e) => e.key).sort()).toEqual([...objects.keys()].sort());
        for (const [k, sha] of objects) expect((await hashObject(s3Of('shard-a'), bucketOfShard('shard-a'), k)).sha256, k).toBe(sha);
        expect(await listBlobs(s3Of('shard-b'), bucketOfShard('shard-b'), prefix)).toEqual([]);
        expect(await writeObject(keys[0], 999)).toBe('shard-a');
      } finally {
        await router.close();
      }
    },
  );
});
