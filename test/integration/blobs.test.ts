// Tenant blob movement against the real S3 server (moto) and the target shard's Postgres.
import { describe, it, expect, beforeAll, afterAll, vi } from 'vitest';
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { testConfig, uniq, shardPool, closePools } from '../helpers/stack';
import { createDeps, Deps } from '../../activities/deps';
import {
  compareBlobManifests,
  copyBlobPrefix,
  deleteBlobPrefix,
  ensureManifestTable,
  listBlobs,
  loadManifest,
  manifestOf,
  recordManifest,
  tenantBlobPrefix,
  deleteManifest,
  ManifestEntry,
  BlobCopyProgress,
  ShardBucket,
  ensureBucketMarker,
} from '../../lib/blobs';
import { copySourceOf } from '../../lib/blobs/transfer';

const MIB = 1024 * 1024;
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const md5 = (b: Buffer) => createHash('md5').update(b).digest('hex');

let deps: Deps;
let s3a: S3Client;
let s3b: S3Client;
let bucketA: string;
let bucketB: string;
let A: ShardBucket;
let B: ShardBucket;
const cleanupPrefixes: string[] = [];
const cleanupMoves: string[] = [];

/** Every byte value, CRLFs and text that looks like aws-chunked framing, then random bytes. */
function binaryBody(n: number): Buffer {
  const head = Buffer.concat([Buffer.from([...Array(256).keys()]), Buffer.from('\r\n0;chunk-signature=abc\r\n\r\nx-amz-checksum-crc32:AAAAAA==\r\n')]);
  return Buffer.concat([head, randomBytes(Math.max(0, n - head.length))]).subarray(0, n);
}

async function put(s3: S3Client, bucket: string, key: string, body: Buffer, headers: { ContentType?: string; Metadata?: Record<string, string> } = {}) {
  await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ...headers }));
}
const TYPED = { ContentType: 'image/x-test', Metadata: { origin: 'tenant-upload' } };
async function get(s3: S3Client, bucket: string, key: string): Promise<Buffer> {
  const r = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return Buffer.from(await r.Body!.transformToByteArray());
}
async function exists(s3: S3Client, bucket: string, key: string): Promise<boolean> {
  try {
    await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    return true;
  } catch (e: any) {
    if (e.$metadata?.httpStatusCode === 404) return false;
    throw e;
  }
}

/** A fresh tenant id whose prefix is deleted from every bucket after the suite. */
function newTenant(label: string): { id: string; prefix: string } {
  const id = uniq(label);
  const prefix = tenantBlobPrefix(id);
  cleanupPrefixes.push(prefix);
  return { id, prefix };
}

/** Seeds the tenant's source prefix: `small` small objects, an empty one, tricky keys, one 9 MB object. */
async function seedTenant(prefix: string, small: number): Promise<Map<string, Buffer>> {
  const objects = new Map<string, Buffer>();
  for (let i = 0; i < small; i++) objects.set(`${prefix}small/${String(i).padStart(4, '0')}.bin`, binaryBody(300 + ((i * 37) % 2000)));
  objects.set(`${prefix}empty`, Buffer.alloc(0));
  objects.set(`${prefix}dir with space/ü+plus&amp=%41?x#frag.txt`, Buffer.from('tricky key 🙂'));
  objects.set(`${prefix}big/nine-megabytes.bin`, binaryBody(9 * MIB));
  const entries = [...objects];
  for (let i = 0; i < entries.length; i += 16) {
    await Promise.all(entries.slice(i, i + 16).map(([k, b]) => put(s3a, bucketA, k, b, k.endsWith('.bin') ? TYPED : {})));
  }
  return objects;
}

/** The neighbours a tenant's copy and delete must never touch: another tenant, and `<id>x`. */
async function seedNeighbours(id: string): Promise<string[]> {
  const other = newTenant('other');
  const tricky = `tenants/${id}x/`;
  cleanupPrefixes.push(tricky);
  const keys = [`${other.prefix}keep.bin`, `${tricky}keep.bin`, `tenants/${id}x/nested/keep.bin`];
  for (const k of keys) {
    await put(s3a, bucketA, k, Buffer.from(`src ${k}`));
    await put(s3b, bucketB, k, Buffer.from(`dst ${k}`));
  }
  return keys;
}

async function expectNeighboursUntouched(keys: string[]) {
  for (const k of keys) {
    expect((await get(s3a, bucketA, k)).toString()).toBe(`src ${k}`);
    expect((await get(s3b, bucketB, k)).toString()).toBe(`dst ${k}`);
  }
}

async function expectDestinationEquals(prefix: string, objects: Map<string, Buffer>, manifest: ManifestEntry[]) {
  const listed = await listBlobs(s3b, bucketB, prefix);
  expect(listed.map((e) => e.key).sort()).toEqual([...objects.keys()].sort());
  for (const [k, body] of objects) expect((await get(s3b, bucketB, k)).equals(body), k).toBe(true);
  const expected = [...objects].map(([key, b]) => ({ key, size: b.length, sha256: sha256(b) }));
  expect(compareBlobManifests(expected, manifest)).toEqual({ missing: [], extra: [], different: [] });
  expect(compareBlobManifests(manifest, await manifestOf(s3b, bucketB, prefix))).toEqual({ missing: [], extra: [], different: [] });
}

beforeAll(async () => {
  const config = testConfig();
  deps = createDeps(config);
  s3a = deps.s3For('shard-a');
  s3b = deps.s3For('shard-b');
  bucketA = config.shards[0].bucket;
  bucketB = config.shards[1].bucket;
  A = { shard: 'shard-a', s3: s3a, bucket: bucketA };
  B = { shard: 'shard-b', s3: s3b, bucket: bucketB };
  // What `shards prepare` writes: copies and deletes refuse a bucket without its shard's marker.
  for (const side of [A, B]) await ensureBucketMarker(side);
});

afterAll(async () => {
  for (const p of cleanupPrefixes) {
    for (const side of [A, B]) {
      // Tricky neighbour prefixes are valid tenant prefixes too (`<id>x`), so the guard allows them.
      await deleteBlobPrefix(side, p).catch(() => {});
    }
  }
  const pool = shardPool('shard-b');
  for (const m of cleanupMoves) await deleteManifest(pool, m).catch(() => {});
  await closePools();
  await deps.close();
});

describe('S3 client settings of activities/deps.ts against the S3 server', () => {
  it('round-trips bytes exactly through PutObject, GetObject, HeadObject, CopyObject, multipart and DeleteObjects', async () => {
    const t = newTenant('rt');
    const body = binaryBody(256 * 1024 + 7);

    await put(s3a, bucketA, `${t.prefix}put`, body);
    expect((await get(s3a, bucketA, `${t.prefix}put`)).equals(body)).toBe(true);
    const head = await s3a.send(new HeadObjectCommand({ Bucket: bucketA, Key: `${t.prefix}put` }));
    expect(head.ContentLength).toBe(body.length);
    expect(head.ETag?.replace(/"/g, '')).toBe(md5(body)); // the server hashed exactly our bytes: no aws-chunked framing

    // A stream body with a known length (how the blob copier uploads).
    await s3a.send(
      new PutObjectCommand({
        Bucket: bucketA,
        Key: `${t.prefix}stream`,
        Body: Readable.from([body.subarray(0, 1000), body.subarray(1000)]),
        ContentLength: body.length,
      }),
    );
    expect((await get(s3a, bucketA, `${t.prefix}stream`)).equals(body)).toBe(true);

    await put(s3a, bucketA, `${t.prefix}empty`, Buffer.alloc(0));
    expect((await get(s3a, bucketA, `${t.prefix}empty`)).length).toBe(0);

    // Server-side copy across buckets, with a key that needs URL-encoding in x-amz-copy-source.
    const odd = `${t.prefix}dir with space/ü+plus&amp=%41?x#frag`;
    await put(s3a, bucketA, odd, body);
    await s3b.send(new CopyObjectCommand({ Bucket: bucketB, Key: odd, CopySource: copySourceOf(bucketA, odd) }));
    expect((await get(s3b, bucketB, odd)).equals(body)).toBe(true);

    // Multipart: 5 MiB + a short last part.
    const big = binaryBody(5 * MIB + 12345);
    const key = `${t.prefix}multipart`;
    const { UploadId } = await s3a.send(new CreateMultipartUploadCommand({ Bucket: bucketA, Key: key }));
    const p1 = await s3a.send(new UploadPartCommand({ Bucket: bucketA, Key: key, UploadId, PartNumber: 1, Body: big.subarray(0, 5 * MIB) }));
    const p2 = await s3a.send(new UploadPartCommand({ Bucket: bucketA, Key: key, UploadId, PartNumber: 2, Body: big.subarray(5 * MIB) }));
    const done = await s3a.send(
      new CompleteMultipartUploadCommand({
        Bucket: bucketA,
        Key: key,
        UploadId,
        MultipartUpload: {
          Parts: [
            { ETag: p1.ETag, PartNumber: 1 },
            { ETag: p2.ETag, PartNumber: 2 },
          ],
        },
      }),
    );
    expect(done.ETag).toMatch(/-2"?$/);
    expect((await get(s3a, bucketA, key)).equals(big)).toBe(true);

    const keys = [`${t.prefix}put`, `${t.prefix}stream`, `${t.prefix}empty`, odd, key];
    const del = await s3a.send(new DeleteObjectsCommand({ Bucket: bucketA, Delete: { Objects: keys.map((Key) => ({ Key })) } }));
    expect(del.Errors ?? []).toEqual([]);
    for (const k of keys) expect(await exists(s3a, bucketA, k)).toBe(false);
  });
});

describe('listBlobs', () => {
  it('follows ListObjectsV2 continuation tokens and returns only keys under the prefix', async () => {
    const t = newTenant('list');
    const neighbour = `tenants/${t.id}x/`;
    cleanupPrefixes.push(neighbour);
    const bodies = [...Array(23).keys()].map((i) => Buffer.from(`object ${i} `.repeat(i + 1)));
    await Promise.all(bodies.map((b, i) => put(s3a, bucketA, `${t.prefix}k${String(i).padStart(3, '0')}`, b)));
    await put(s3a, bucketA, `${neighbour}not-mine`, Buffer.from('x'));

    const send = vi.spyOn(s3a, 'send');
    try {
      const listed = await listBlobs(s3a, bucketA, t.prefix, { pageSize: 5 });
      const pages = send.mock.calls.filter(([c]) => c instanceof ListObjectsV2Command).length;
      expect(pages).toBe(5); // 23 keys at 5 per page
      expect(listed).toEqual(bodies.map((b, i) => ({ key: `${t.prefix}k${String(i).padStart(3, '0')}`, size: b.length, etag: md5(b) })));
    } finally {
      send.mockRestore();
    }
    expect(await listBlobs(s3a, bucketA, `tenants/${uniq('none')}/`)).toEqual([]);
  });
});

describe('copyBlobPrefix', () => {
  for (const sameEndpoint of [false, true]) {
    const how = sameEndpoint ? 'server-side (CopyObject)' : 'streamed (Get+Put, multipart > 8 MB)';

    it(`copies a tenant prefix ${how} byte for byte, then is a no-op, then propagates changes, adds and deletes`, async () => {
      const t = newTenant(sameEndpoint ? 'cps' : 'cpx');
      const neighbours = await seedNeighbours(t.id);
      const objects = await seedTenant(t.prefix, sameEndpoint ? 60 : 150);
      // A stale destination key the source never had is removed by the first copy.
      await put(s3b, bucketB, `${t.prefix}stale`, Buffer.from('stale'));
      const src = A;
      const dst = B;
      const totalBytes = [...objects.values()].reduce((n, b) => n + b.length, 0);

      const progress: BlobCopyProgress[] = [];
      const first = await copyBlobPrefix({ src, dst, prefix: t.prefix, sameEndpoint, concurrency: 6, onProgress: (p) => progress.push(p) });
      expect(first).toMatchObject({ copied: objects.size, skipped: 0, deleted: 1, bytes: totalBytes });
      expect(progress).toHaveLength(objects.size + 1);
      expect(progress.at(-1)).toMatchObject({ done: objects.size + 1, total: objects.size + 1 });
      await expectDestinationEquals(t.prefix, objects, first.manifest);
      const bigEtag = (await s3b.send(new HeadObjectCommand({ Bucket: bucketB, Key: `${t.prefix}big/nine-megabytes.bin` }))).ETag;
      if (!sameEndpoint) expect(bigEtag).toMatch(/-2"?$/); // went up as a 2-part multipart upload
      for (const k of [`${t.prefix}big/nine-megabytes.bin`, `${t.prefix}small/0000.bin`]) {
        const h = await s3b.send(new HeadObjectCommand({ Bucket: bucketB, Key: k }));
        expect({ ContentType: h.ContentType, Metadata: h.Metadata }, k).toEqual(TYPED); // headers travel with the bytes
      }
      await expectNeighboursUntouched(neighbours);

      const second = await copyBlobPrefix({ src, dst, prefix: t.prefix, sameEndpoint });
      expect(second).toMatchObject({ copied: 0, skipped: objects.size, deleted: 0, bytes: 0 });
      expect(compareBlobManifests(first.manifest, second.manifest).different).toEqual([]);

      // Same-size rewrite (only the hash can tell), resize, delete, add, and a rewrite of the big one.
      const sameSize = `${t.prefix}small/0001.bin`;
      const resized = `${t.prefix}small/0002.bin`;
      const removed = `${t.prefix}small/0003.bin`;
      const added = `${t.prefix}new/added.bin`;
      const big = `${t.prefix}big/nine-megabytes.bin`;
      objects.set(sameSize, binaryBody(objects.get(sameSize)!.length));
      objects.set(resized, binaryBody(77));
      objects.set(added, binaryBody(4096));
      objects.set(big, binaryBody(9 * MIB));
      objects.delete(removed);
      for (const k of [sameSize, resized, added, big]) await put(s3a, bucketA, k, objects.get(k)!);
      await s3a.send(new DeleteObjectCommand({ Bucket: bucketA, Key: removed }));

      const third = await copyBlobPrefix({ src, dst, prefix: t.prefix, sameEndpoint });
      expect(third).toMatchObject({ copied: 4, skipped: objects.size - 4, deleted: 1 });
      await expectDestinationEquals(t.prefix, objects, third.manifest);
      expect(compareBlobManifests(await manifestOf(s3a, bucketA, t.prefix), await manifestOf(s3b, bucketB, t.prefix))).toEqual({
        missing: [],
        extra: [],
        different: [],
      });
      await expectNeighboursUntouched(neighbours);
    });
  }

  it('copies objects above the CopyObject limit server-side with UploadPartCopy', async () => {
    const t = newTenant('upc');
    const big = binaryBody(9 * MIB + 3);
    await put(s3a, bucketA, `${t.prefix}big`, big);
    await put(s3a, bucketA, `${t.prefix}small`, Buffer.from('small'));
    const r = await copyBlobPrefix({
      src: A,
      dst: B,
      prefix: t.prefix,
      sameEndpoint: true,
      limits: { serverCopyMaxBytes: 8 * MIB, partSizeBytes: 5 * MIB },
    });
    expect(r).toMatchObject({ copied: 2, bytes: big.length + 5 });
    expect((await get(s3b, bucketB, `${t.prefix}big`)).equals(big)).toBe(true);
    expect((await s3b.send(new HeadObjectCommand({ Bucket: bucketB, Key: `${t.prefix}big` }))).ETag).toMatch(/-2"?$/);
    expect(r.manifest.find((m) => m.key === `${t.prefix}big`)?.sha256).toBe(sha256(big));
  });

  it('re-reads an object overwritten after listing and drops one deleted after listing', async () => {
    const t = newTenant('race');
    const changed = `${t.prefix}changed`;
    const vanished = `${t.prefix}vanished`;
    await put(s3a, bucketA, changed, Buffer.from('version 1'));
    await put(s3a, bucketA, vanished, Buffer.from('soon gone'));
    await put(s3b, bucketB, vanished, Buffer.from('copied earlier'));
    const v2 = Buffer.from('version 2, longer');
    // The source client changes the bucket just before the copier's first read of each key.
    const meddled = new Set<string>();
    const meddlingSrc = {
      send: async (cmd: any) => {
        if (cmd instanceof GetObjectCommand && !meddled.has(cmd.input.Key!)) {
          meddled.add(cmd.input.Key!);
          if (cmd.input.Key === changed) await put(s3a, bucketA, changed, v2);
          if (cmd.input.Key === vanished) await s3a.send(new DeleteObjectCommand({ Bucket: bucketA, Key: vanished }));
        }
        return s3a.send(cmd);
      },
    } as unknown as S3Client;

    const r = await copyBlobPrefix({ src: { ...A, s3: meddlingSrc }, dst: B, prefix: t.prefix, sameEndpoint: false });
    expect(r).toMatchObject({ copied: 1, deleted: 1 });
    expect(r.manifest).toEqual([{ key: changed, size: v2.length, sha256: sha256(v2) }]);
    expect((await get(s3b, bucketB, changed)).equals(v2)).toBe(true);
    expect(await exists(s3b, bucketB, vanished)).toBe(false);
  });

  it('refuses a prefix that is not exactly tenants/<id>/ and copying a bucket onto itself', async () => {
    const src = A;
    const dst = B;
    for (const prefix of ['', 'tenants/', 'tenants/abc', 'tenants/abc/def/', 'Tenants/abc/']) {
      await expect(copyBlobPrefix({ src, dst, prefix, sameEndpoint: true })).rejects.toMatchObject({ type: 'InvalidInput' });
    }
    await expect(copyBlobPrefix({ src, dst: src, prefix: tenantBlobPrefix('abc'), sameEndpoint: false })).rejects.toMatchObject({ type: 'InvalidInput' });
  });
});

describe('deleteBlobPrefix', () => {
  it('deletes every object of the tenant in batches, leaves neighbours, and deletes 0 the second time', async () => {
    const t = newTenant('del');
    const neighbours = await seedNeighbours(t.id);
    const keys = [...Array(31).keys()].map((i) => `${t.prefix}obj/${i}`);
    await Promise.all(keys.map((k) => put(s3a, bucketA, k, Buffer.from(k))));
    const send = vi.spyOn(s3a, 'send');
    try {
      expect(await deleteBlobPrefix(A, t.prefix, { batchSize: 7 })).toEqual({ deleted: 31 });
      expect(send.mock.calls.filter(([c]) => c instanceof DeleteObjectsCommand)).toHaveLength(5);
    } finally {
      send.mockRestore();
    }
    expect(await listBlobs(s3a, bucketA, t.prefix)).toEqual([]);
    expect(await deleteBlobPrefix(A, t.prefix)).toEqual({ deleted: 0 });
    await expectNeighboursUntouched(neighbours);
  });

  it('refuses any prefix other than tenants/<valid id>/ and deletes nothing', async () => {
    const t = newTenant('guard');
    const key = `${t.prefix}precious`;
    await put(s3a, bucketA, key, Buffer.from('keep'));
    const bad = [
      '',
      '/',
      'tenants',
      'tenants/',
      `tenants/${t.id}`,
      `tenants/${t.id}/precious`,
      `tenants/${t.id}/sub/`,
      `/tenants/${t.id}/`,
      'tenants/../',
      'tenants/ABC/',
      `tenants/${t.id}//`,
    ];
    for (const prefix of bad) {
      await expect(deleteBlobPrefix(A, prefix)).rejects.toMatchObject({ type: 'InvalidInput' });
    }
    await expect(deleteBlobPrefix(A, t.prefix, { batchSize: 1001 })).rejects.toMatchObject({ type: 'InvalidInput' });
    expect(await exists(s3a, bucketA, key)).toBe(true);
  });
});

describe('blob manifest on the target shard', () => {
  it('creates its table idempotently, even when several callers race', async () => {
    const pool = shardPool('shard-b');
    await Promise.all([ensureManifestTable(pool), ensureManifestTable(pool), ensureManifestTable(pool)]);
    await ensureManifestTable(pool);
    const r = await pool.query(`select count(*)::int as n from pg_tables where schemaname = 'shardctl' and tablename = 'blob_manifest'`);
    expect(r.rows[0].n).toBe(1);
  });

  it('replaces a move manifest atomically and keeps the previous one if the write fails', async () => {
    const pool = shardPool('shard-b');
    const moveId = uniq('move-blobs');
    cleanupMoves.push(moveId);
    const e = (key: string, body: string): ManifestEntry => ({ key, size: Buffer.byteLength(body), sha256: sha256(Buffer.from(body)) });
    const v1 = [e('tenants/t/b', 'bee'), e('tenants/t/a', 'a'), e('tenants/t/big', 'x'.repeat(10))];
    await recordManifest(pool, moveId, v1);
    expect(await loadManifest(pool, moveId)).toEqual([...v1].sort((x, y) => (x.key < y.key ? -1 : 1)));

    const v2 = [e('tenants/t/c', 'sea')];
    await recordManifest(pool, moveId, v2);
    expect(await loadManifest(pool, moveId)).toEqual(v2);

    // Postgres refuses NUL in text: the failure comes after the delete, inside the transaction.
    await expect(recordManifest(pool, moveId, [e('tenants/t/ok', 'ok'), e('tenants/t/\u0000bad', 'bad')])).rejects.toThrow();
    expect(await loadManifest(pool, moveId)).toEqual(v2);

    const many = [...Array(12_000).keys()].map((i) => e(`tenants/t/${i}`, String(i)));
    await recordManifest(pool, moveId, many);
    expect((await loadManifest(pool, moveId)).length).toBe(12_000);

    await recordManifest(pool, moveId, []);
    expect(await loadManifest(pool, moveId)).toEqual([]);
    await expect(recordManifest(pool, moveId, [v1[0], v1[0]])).rejects.toMatchObject({ type: 'InvalidInput' });
  });

  it('records the manifest of a real copy on the target and validates it against both buckets', async () => {
    const t = newTenant('rec');
    const objects = new Map([...Array(12).keys()].map((i) => [`${t.prefix}f${i}`, binaryBody(100 + i)] as [string, Buffer]));
    for (const [k, b] of objects) await put(s3a, bucketA, k, b);
    const r = await copyBlobPrefix({ src: A, dst: B, prefix: t.prefix, sameEndpoint: false });
    const pool = shardPool('shard-b');
    const moveId = `move-${t.id}`;
    cleanupMoves.push(moveId);
    await recordManifest(pool, moveId, r.manifest);
    const recorded = await loadManifest(pool, moveId);
    const ok = { missing: [], extra: [], different: [] };
    expect(compareBlobManifests(recorded, await manifestOf(s3a, bucketA, t.prefix))).toEqual(ok);
    expect(compareBlobManifests(recorded, await manifestOf(s3b, bucketB, t.prefix))).toEqual(ok);

    // A destination object altered behind the copier's back shows up as different, with both sides.
    const victim = `${t.prefix}f3`;
    await put(s3b, bucketB, victim, Buffer.from('tampered'));
    const diff = compareBlobManifests(recorded, await manifestOf(s3b, bucketB, t.prefix));
    expect(diff.different).toEqual([
      { key: victim, srcSize: objects.get(victim)!.length, dstSize: 8, srcSha: sha256(objects.get(victim)!), dstSha: sha256(Buffer.from('tampered')) },
    ]);
  });
});
