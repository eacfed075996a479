// The blob index follows the bucket unit that owns it (issue 13): a dataset's index
// (shardctl.blob_index_<dataset>) is one of its tables, so a bucket's move copies, streams,
// validates, retires and rolls back its index rows with its rows, and the syncs bring the objects
// the rows name. Writes, overwrites and unlinks through route.blobs under withKey run through the
// move (to the moved bucket and to the others); the ledger of acknowledged writes is then checked
// on the final owner (row, sha256, object bytes, or no row), the retired source keeps nothing of
// the bucket, and the collector, run per bucket unit on the new owner, deletes no object a live
// row names (it refuses while the move is in flight).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes, createHash } from 'node:crypto';
import { shardPool, directoryPool } from '../helpers/stack';
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
import { collectTenantBlobs, type GcDeps } from '../../lib/blobs/gc';
import type { S3Client } from '@aws-sdk/client-s3';

const B = 8;
const names = bucketDatasetNames({ prefix: 'bbm' });
const { dataset } = names;
const indexTable = `shardctl.blob_index_${dataset}`;
let d: BucketDataset | undefined;
let config: Config;
let t: BucketDataset['t'];
let tq: string;
const grant = { tenants: [] as string[], datasets: [dataset] };
const unitOf = (bucket: number) => bucketUnitName(dataset, bucket, B);
const keysOfBucket = (bucket: number, count: number, prefix: string) => keysOfBucketOf(B, bucket, count, prefix);
const s3s = new Map<string, S3Client>();
const s3Of = (shard: string) => s3s.get(shard) ?? s3s.set(shard, s3ClientFor(config, shard)).get(shard)!;
const bucketOfShard = (shard: string) => shardByName(config, shard).bucket;
const gcDeps = (): GcDeps => ({
  tenantColumn: config.tenant.column,
  datasets: config.datasets,
  directoryPool,
  shardPool,
  bucketOf: (s) => ({ shard: s, s3: s3Of(s), bucket: bucketOfShard(s) }),
});

beforeAll(async () => {
  d = await setUpBucketDataset({ prefix: 'bbm', buckets: B }, names);
  ({ config, t, tq } = d);
}, 120_000);

afterAll(async () => {
  for (const c of s3s.values()) c.destroy();
  await tearDownBucketDataset(names, d);
});

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** The acknowledged state of every (key, name): the sha256 of its last acked write, or null after an acked unlink. */
class BlobLedger {
  readonly state = new Map<string, { key: string; name: string; sha256: string | null }>();
  async write(router: Router, key: string, name: string): Promise<string> {
    const body = randomBytes(50 + Math.floor(Math.random() * 400));
    const r = await router.withKey(dataset, key, grant, 'write', async (_tx, route) => ({ v: await route.blobs.write(name, body), shard: route.shard }));
    this.state.set(`${key}/${name}`, { key, name, sha256: sha(body) });
    expect(r.v.sha256).toBe(sha(body));
    return r.shard;
  }
  async unlink(router: Router, key: string, name: string): Promise<void> {
    await router.withKey(dataset, key, grant, 'write', (_tx, route) => route.blobs.unlink(name));
    this.state.set(`${key}/${name}`, { key, name, sha256: null });
  }
  ofBucket(bucket: number) {
    return [...this.state.values()].filter((e) => bucketOf(e.key, B) === bucket);
  }
}

/** Random writes, overwrites and unlinks on `keys` until stopped; counts the ones that failed (there must be none). */
function liveBlobWriter(router: Router, ledger: BlobLedger, keys: string[]) {
  let stop = false;
  let failed = 0;
  const done = (async () => {
    for (let i = 0; !stop; i++) {
      const key = keys[Math.floor(Math.random() * keys.length)];
      const name = `n${i % 5}`;
      const op = i % 7 === 6 ? ledger.unlink(router, key, name) : ledger.write(router, key, name);
      await op.catch(() => failed++);
      await new Promise((r) => setTimeout(r, 20));
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

async function indexRows(shard: string, bucket: number) {
  const r = await shardPool(shard).query(`select key, name, object_key, sha256 from ${indexTable} where bucket = $1`, [bucket]);
  return new Map(r.rows.map((x) => [`${x.key}/${x.name}`, { objectKey: x.object_key as string, sha256: x.sha256 as string }]));
}

/** Every acked (key, name) of `bucket` as it must be on `shard`: a row with the acked sha256 and its object's bytes, or no row. */
async function expectAcked(router: Router, ledger: BlobLedger, bucket: number, shard: string) {
  const rows = await indexRows(shard, bucket);
  const live = ledger.ofBucket(bucket).filter((e) => e.sha256 !== null);
  expect(live.length).toBeGreaterThan(3);
  expect([...rows.keys()].sort()).toEqual(live.map((e) => `${e.key}/${e.name}`).sort());
  for (const e of ledger.ofBucket(bucket)) {
    const row = rows.get(`${e.key}/${e.name}`);
    if (e.sha256 === null) {
      expect(row, `${e.key}/${e.name} was unlinked`).toBeUndefined();
      continue;
    }
    expect(row?.sha256, `${e.key}/${e.name}`).toBe(e.sha256);
    expect((await hashObject(s3Of(shard), bucketOfShard(shard), row!.objectKey)).sha256).toBe(e.sha256);
    const read = await router.withKey(dataset, e.key, grant, 'read', (_tx, route) => route.blobs.read(e.name));
    expect(sha(read!)).toBe(e.sha256);
  }
}

describe('the blob index of a bucket unit across a move', () => {
  it(
    'a bucket moved under live index writes, overwrites and unlinks: every acked name on the new owner with its bytes, retire leaves none of its rows or objects on the source, the collector per bucket unit keeps every live object',
    { timeout: 300_000 },
    async () => {
      const moved = 2;
      const router = await Router.create(config);
      const ledger = new BlobLedger();
      const mine = keysOfBucket(moved, 6, 'bi');
      const others = keysOfBucket(4, 3, 'bo');
      try {
        for (const key of [...mine, ...others]) for (const name of ['n0', 'n1']) expect(await ledger.write(router, key, name)).toBe('shard-a');
        const writer = liveBlobWriter(router, ledger, [...mine, ...others]);
        const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: unitOf(moved), target: 'shard-b', requestedBy: 'test', soakSeconds: 6 }));
        await H.waitPhase(h, 'soak', 200_000);
        expect(await H.placement(unitOf(moved))).toMatchObject({ shard: 'shard-b', epoch: 2 });
        expect(await ledger.write(router, mine[0], 'after')).toBe('shard-b');
        expect(await writer.stop()).toBe(0);
        // While the move is in flight the collector refuses the unit, on either shard.
        await expect(collectTenantBlobs(gcDeps(), { tenant: unitOf(moved), graceMs: 0, operator: { actor: 'test' } })).rejects.toMatchObject({
          type: 'PreconditionFailed',
        });
        expect((await H.waitPhase(h, 'done', 120_000)).phase).toBe('done');

        await expectAcked(router, ledger, moved, 'shard-b');
        await expectAcked(router, ledger, 4, 'shard-a');
        // Retire deleted the bucket's index rows and objects on the source, and nothing of the other bucket's.
        expect((await indexRows('shard-a', moved)).size).toBe(0);
        expect(await listBlobs(s3Of('shard-a'), bucketOfShard('shard-a'), unitBlobPrefix(unitOf(moved)))).toEqual([]);
        expect((await indexRows('shard-b', 4)).size).toBe(0);

        // The collector on the new owner, per bucket unit: only version objects no live row names go
        // (at least the version of 'after' superseded here).
        const superseded = (await router.withKey(dataset, mine[0], grant, 'read', (_tx, route) => route.blobs.stat('after')))!.key;
        await ledger.write(router, mine[0], 'after');
        const before = await listBlobs(s3Of('shard-b'), bucketOfShard('shard-b'), unitBlobPrefix(unitOf(moved)));
        const referenced = new Set([...(await indexRows('shard-b', moved)).values()].map((r) => r.objectKey));
        const r = await collectTenantBlobs(gcDeps(), { tenant: unitOf(moved), graceMs: 0, operator: { actor: 'test' } });
        expect(r.shard).toBe('shard-b');
        expect(r.collected.filter((k) => referenced.has(k))).toEqual([]);
        expect(r.collected.sort()).toEqual(
          before
            .map((e) => e.key)
            .filter((k) => !referenced.has(k))
            .sort(),
        );
        expect(r.collected).toContain(superseded);
        await expectAcked(router, ledger, moved, 'shard-b');
      } finally {
        await router.close();
      }
    },
  );

  it(
    'a bucket with index writes rolled back during soak: the names written on the new owner come back with their bytes, and the new owner keeps none',
    { timeout: 300_000 },
    async () => {
      const bucket = 6;
      const router = await Router.create(config);
      const ledger = new BlobLedger();
      const keys = keysOfBucket(bucket, 5, 'rb');
      try {
        for (const key of keys) expect(await ledger.write(router, key, 'n0')).toBe('shard-a');
        const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: unitOf(bucket), target: 'shard-c', requestedBy: 'test', soakSeconds: 600 }));
        await H.waitPhase(h, 'soak', 200_000);
        for (const key of keys) expect(await ledger.write(router, key, 'n1')).toBe('shard-c');
        await ledger.write(router, keys[0], 'n0'); // an overwrite on the new owner
        await ledger.unlink(router, keys[1], 'n0'); // and an unlink
        await h.executeUpdate(M.rollbackUpdate, { args: [{ actor: 'sre-test', reason: 'test' }] });
        await H.waitPhase(h, 'rolled-back', 120_000);
        expect(await H.placement(unitOf(bucket))).toMatchObject({ shard: 'shard-a', state: 'active' });
        await expectAcked(router, ledger, bucket, 'shard-a');
        expect((await indexRows('shard-c', bucket)).size).toBe(0);
        expect(await listBlobs(s3Of('shard-c'), bucketOfShard('shard-c'), unitBlobPrefix(unitOf(bucket)))).toEqual([]);
      } finally {
        await router.close();
      }
    },
  );
});
