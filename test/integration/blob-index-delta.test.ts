// The cutover's final blob delta is bounded by what changed (issue 15, lib/blobs/index-delta.ts):
// for a tenant written only through the blob index, the frozen window lists nothing and copies
// only the objects named by index rows changed since the last full comparison; a tenant that also
// holds objects outside the index keeps the whole-prefix sync, so an object written there between
// the pre-sync and the freeze still reaches the target. Real move activities in-process, real
// shards and S3 (moto); every S3 command the worker sends is counted from inside the window
// (the `after-fence-raised` fault point) to the end of the cutover.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { createHash } from 'node:crypto';
import { shardPool, testConfig } from '../helpers/stack';
import * as H from '../helpers/move';
import * as B from '../helpers/blobs';
import type { Activities } from '../../activities';
import type { Router } from '../../lib/router';
import { hashObject, listBlobs, loadManifest, tenantBlobPrefix } from '../../lib/blobs';
import { shardByName } from '../../lib/config';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
const BLOBS = 40;

let act: Activities;
let router: Router;
let env: H.InProcess | undefined;
let at: Record<string, () => Promise<void>> = {};
/** Every move started here: their slots are dropped at the end even when a test fails midway. */
const refs: B.MoveRef[] = [];
/** S3 commands by name, counted while `counting`. */
let counts: Record<string, number> = {};
let counting = false;
/** The step names and the window blob delta of the last cutover cutoverCounted ran. */
let lastSteps: string[] = [];
let lastBlobSync: unknown;

beforeAll(async () => {
  env = await H.inProcessActivities({ router: true, refs, faultPoint: async (name) => void (await at[name]?.()) });
  ({ act, router } = env);
  const clients = new Set<S3Client>([env.deps.s3For(SOURCE), env.deps.s3For(TARGET)]);
  for (const c of clients) {
    c.middlewareStack.add(
      (next, context) => async (args) => {
        if (counting) {
          const name = context.commandName as string;
          counts[name] = (counts[name] ?? 0) + 1;
          // A tenant object's own (not a bucket marker's) counted apart too.
          if (String((args.input as { Key?: string }).Key ?? '').startsWith('tenants/')) counts[`${name} tenants/`] = (counts[`${name} tenants/`] ?? 0) + 1;
        }
        return next(args);
      },
      { step: 'initialize', name: 'countCommands' },
    );
  }
});
afterAll(() => env?.close());

const grantOf = (tenant: string) => ({ tenants: [tenant] });
const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const bucketOf = (shard: string) => ({ s3: env!.deps.s3For(shard), bucket: shardByName(testConfig(), shard).bucket });

async function cutoverCounted(ref: { moveId: string; unit: string; source: string; target: string }, token: string | undefined) {
  counts = {};
  const inWindow = at['after-fence-raised'];
  at['after-fence-raised'] = async () => {
    await inWindow?.();
    counting = true;
  };
  try {
    const r = await act.cutover({ ...ref, direction: 'forward', epoch: 1, fenceBudgetMs: 10_000, actor: 'blob-delta-test', deltaToken: token });
    expect(r, JSON.stringify(r)).toMatchObject({ ok: true, newEpoch: 2 });
    lastSteps = Object.keys(r.steps ?? {});
    lastBlobSync = r.blobSync;
  } finally {
    counting = false;
    at = {};
  }
  return { ...counts };
}

async function finish(ref: { moveId: string; unit: string; source: string; target: string }) {
  await act.dropReplication({ ...ref, direction: 'forward' });
  await act.dropReplication({ ...ref, direction: 'reverse' });
}

/** Every index row on the target names an object there whose bytes hash to the recorded sha256; returns name -> sha256. */
async function indexOnTarget(tenant: string): Promise<Map<string, string>> {
  const rows = await shardPool(TARGET).query(`select name, object_key, sha256, size::int as size from shardctl.blob_index where tenant_id = $1`, [tenant]);
  const { s3, bucket } = bucketOf(TARGET);
  for (const r of rows.rows) {
    const h = await hashObject(s3, bucket, r.object_key);
    expect({ name: r.name, sha256: h.sha256, size: h.size }).toEqual({ name: r.name, sha256: r.sha256, size: r.size });
  }
  return new Map(rows.rows.map((r) => [r.name, r.sha256]));
}

/** Each indexed object of the tenant on the target hashes to the sha256 the source's index recorded. */
async function indexOnTargetAfterCopy(tenant: string, rows: { object_key: string; sha256: string }[]) {
  const { s3, bucket } = bucketOf(TARGET);
  for (const r of rows) expect((await hashObject(s3, bucket, r.object_key)).sha256, r.object_key).toBe(r.sha256);
  expect((await listBlobs(s3, bucket, tenantBlobPrefix(tenant))).length).toBe(rows.length + 1);
}

/** A tenant of 20 rows and `blobs` blobs `doc/<i>` put through the index (then `more`), copied, caught up and validated. */
const indexedTenantReady = (prefix: string, blobs: number, more?: (tenant: string) => Promise<void>) =>
  H.validatedMove(act, {
    source: SOURCE,
    target: TARGET,
    prefix,
    rows: 20,
    beforePlan: async (t) => {
      for (let i = 0; i < blobs; i++) await router.putBlob(t, grantOf(t), `doc/${i}`, `doc ${i} v1`);
      await more?.(t);
    },
  });

const copies = (c: Record<string, number>) => (c.CopyObjectCommand ?? 0) + (c.PutObjectCommand ?? 0) + (c.CreateMultipartUploadCommand ?? 0);

describe('the final blob delta under the fence', () => {
  it('the copy takes the sha256 of each object written through the index from the index (reads none of them) and hashes only the objects outside it', async () => {
    const tenant = await H.newTenant(SOURCE, 'bh');
    for (let i = 0; i < 10; i++) await router.putBlob(tenant, grantOf(tenant), `doc/${i}`, `doc ${i} v1`);
    const { s3, bucket } = bucketOf(SOURCE);
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: `${tenantBlobPrefix(tenant)}direct/0`, Body: 'direct 0' }));
    const ref = await B.plannedMove(act, refs, tenant, SOURCE, TARGET, false);
    counts = {};
    counting = true;
    try {
      const r = await act.copyBlobs({ ...ref, direction: 'forward' });
      expect(r).toMatchObject({ copied: 11, total: 11 });
    } finally {
      counting = false;
    }
    // Server-side copies (one endpoint here): the only object read is the one no index row names.
    expect(counts['GetObjectCommand tenants/'] ?? 0, JSON.stringify(counts)).toBe(1);
    expect(copies(counts), JSON.stringify(counts)).toBe(11);
    const index = await shardPool(SOURCE).query(`select object_key, sha256 from shardctl.blob_index where tenant_id = $1`, [tenant]);
    const manifest = new Map((await loadManifest(shardPool(TARGET), ref.moveId)).map((m) => [m.key, m.sha256]));
    expect(index.rows).toHaveLength(10);
    for (const row of index.rows) expect(manifest.get(row.object_key)).toBe(row.sha256);
    expect(manifest.get(`${tenantBlobPrefix(tenant)}direct/0`)).toBe(sha('direct 0'));
    // The index's hashes are the bytes': the target's copies hash to them.
    await indexOnTargetAfterCopy(tenant, index.rows);
  });

  it('for a tenant written only through the blob index, lists nothing and copies only the objects of index rows changed after the pre-sync; the target then serves every acknowledged version', async () => {
    const { tenant, ref, token } = await indexedTenantReady('bd', BLOBS);
    // After the validation, before the cutover's pre-sync: in the stream's delta, and copied (and
    // so seen at the target) by the pre-sync, so the window needs no HEAD for them.
    await router.putBlob(tenant, grantOf(tenant), 'doc/6', 'doc 6 v2');
    await router.putBlob(tenant, grantOf(tenant), 'doc/7', 'doc 7 v2');
    await router.putBlob(tenant, grantOf(tenant), 'pre/0', 'pre 0 v1');
    // After the pre-sync (the opened final apply follows it), before the freeze: two overwrites, a delete, a new blob.
    at['after-final-apply-opened'] = async () => {
      await router.putBlob(tenant, grantOf(tenant), 'doc/0', 'doc 0 v2');
      await router.putBlob(tenant, grantOf(tenant), 'doc/1', 'doc 1 v2');
      await router.deleteBlob(tenant, grantOf(tenant), 'doc/2');
      await router.putBlob(tenant, grantOf(tenant), 'new/0', 'new 0 v1');
      // A version made and superseded after the pre-sync: garbage on the source that no sync recorded.
      await router.putBlob(tenant, grantOf(tenant), 'doc/5', 'doc 5 v2');
      await router.putBlob(tenant, grantOf(tenant), 'doc/5', 'doc 5 v3');
    };
    refs.push(ref);
    const c = await cutoverCounted(ref, token);
    expect(c.ListObjectsV2Command ?? 0, JSON.stringify(c)).toBe(0);
    // The cutover's steps say which blob delta the window used.
    expect(lastSteps).toContain('blobs via index');
    expect(lastSteps).not.toContain('blobs');
    // doc/6, doc/7, pre/0 (before the pre-sync), doc/0, doc/1, doc/2 (deleted: no row), new/0, doc/5:
    // eight names changed since the validation; four objects copied in the window.
    expect(lastBlobSync).toMatchObject({ via: 'index', objects: 8, copied: 4 });
    expect(copies(c), JSON.stringify(c)).toBe(4);
    // One HEAD on the target per name changed after the pre-sync (not for the three it saw there), one on
    // the source per object copied; no GET of any object's bytes.
    expect(c.HeadObjectCommand ?? 0, JSON.stringify(c)).toBeLessThanOrEqual(4 + 4);
    const onTarget = await indexOnTarget(tenant);
    expect(onTarget.size).toBe(BLOBS + 1); // 40 - doc/2 + new/0 + pre/0
    expect(onTarget.get('doc/6')).toBe(sha('doc 6 v2'));
    expect(onTarget.get('pre/0')).toBe(sha('pre 0 v1'));
    expect(onTarget.get('doc/0')).toBe(sha('doc 0 v2'));
    expect(onTarget.get('doc/1')).toBe(sha('doc 1 v2'));
    expect(onTarget.has('doc/2')).toBe(false);
    expect(onTarget.get('new/0')).toBe(sha('new 0 v1'));
    expect(onTarget.get('doc/3')).toBe(sha('doc 3 v1'));
    expect(onTarget.get('doc/5')).toBe(sha('doc 5 v3'));
    expect(await H.fingerprint(TARGET, tenant)).toEqual(await H.fingerprint(SOURCE, tenant));
    // The superseded doc/5 v2 on the source is the index's garbage, not a write behind shardctl's back: retire goes ahead.
    await expect(act.retireSource({ ...ref, epoch: 2, actor: 'blob-delta-test' })).resolves.toEqual({ retired: true });
    const s = bucketOf(SOURCE);
    expect(await listBlobs(s.s3, s.bucket, tenantBlobPrefix(tenant))).toEqual([]);
    expect(await indexOnTarget(tenant)).toEqual(onTarget);
    await finish(ref);
  });

  it('for a tenant that also holds an object outside the index, syncs the whole prefix: an object put behind the index after the pre-sync reaches the target', async () => {
    const { s3, bucket } = bucketOf(SOURCE);
    const { tenant, ref, token } = await indexedTenantReady('bw', 5, async (t) => {
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: `${tenantBlobPrefix(t)}plain/old.txt`, Body: 'written behind the index' }));
    });
    at['after-final-apply-opened'] = async () => {
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: `${tenantBlobPrefix(tenant)}plain/late.txt`, Body: 'late, behind the index' }));
      await router.putBlob(tenant, grantOf(tenant), 'doc/0', 'doc 0 v2');
    };
    refs.push(ref);
    const c = await cutoverCounted(ref, token);
    expect(c.ListObjectsV2Command ?? 0, JSON.stringify(c)).toBeGreaterThan(0);
    expect(lastSteps).toContain('blobs');
    expect(lastSteps).not.toContain('blobs via index');
    expect(lastBlobSync).toMatchObject({ via: 'prefix' });
    expect((lastBlobSync as { objects: number }).objects).toBeGreaterThanOrEqual(7);
    const t = bucketOf(TARGET);
    const keys = (await listBlobs(t.s3, t.bucket, tenantBlobPrefix(tenant))).map((e) => e.key);
    expect(keys).toContain(`${tenantBlobPrefix(tenant)}plain/late.txt`);
    expect(keys).toContain(`${tenantBlobPrefix(tenant)}plain/old.txt`);
    expect((await indexOnTarget(tenant)).get('doc/0')).toBe(sha('doc 0 v2'));
    await finish(ref);
  });
});
