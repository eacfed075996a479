// A unit whose blobs are all written through the blob index moves exactly the objects its index
// rows name (issue 15): superseded versions, a deleted blob's version and a version object no row
// ever named (the upload of a put the fence refused) stay behind for the collector. The copy, the
// validation and each soak round work from the index (sha256 from the row, nothing re-hashed);
// the target ends with exactly the referenced objects and the move validates clean. Real move
// activities in-process, real shards and S3 (moto); the S3 commands of the copy are counted.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { DeleteObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { shardPool, testConfig } from '../helpers/stack';
import * as H from '../helpers/move';
import * as B from '../helpers/blobs';
import type { Activities } from '../../activities';
import type { Router } from '../../lib/router';
import { hashObject, tenantBlobPrefix } from '../../lib/blobs';
import { newVersionId } from '../../lib/blobs/index-table';
import { shardByName } from '../../lib/config';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';

let act: Activities;
let router: Router;
let env: H.InProcess | undefined;
const refs: B.MoveRef[] = [];
let counts: Record<string, number> = {};
let counting = false;

beforeAll(async () => {
  env = await H.inProcessActivities({ router: true, refs });
  ({ act, router } = env);
  for (const c of new Set<S3Client>([env.deps.s3For(SOURCE), env.deps.s3For(TARGET)])) {
    c.middlewareStack.add(
      (next, context) => async (args) => {
        if (counting && String((args.input as { Key?: string }).Key ?? '').startsWith('tenants/')) {
          const name = context.commandName as string;
          counts[name] = (counts[name] ?? 0) + 1;
        }
        return next(args);
      },
      { step: 'initialize', name: 'countTenantCommands' },
    );
  }
});
afterAll(() => env?.close());

const grantOf = (tenant: string) => ({ tenants: [tenant] });
const keysOn = (shard: string, tenant: string) => B.keysOn((s) => env!.deps.s3For(s), shard, tenant);

/** The object keys the unit's index rows on `shard` name, sorted, and each row's recorded sha256 and size. */
async function referencedOn(shard: string, tenant: string) {
  const r = await shardPool(shard).query(`select object_key, sha256, size::int as size from shardctl.blob_index where tenant_id = $1 order by object_key`, [
    tenant,
  ]);
  return r.rows as { object_key: string; sha256: string; size: number }[];
}

describe('a unit written only through the blob index', () => {
  it('moves exactly the objects its index references: superseded versions, a deleted blob and an unreferenced upload stay behind; validation and soak clean', async () => {
    const tenant = await H.newTenant(SOURCE, 'bio');
    await H.seed(tenant, 20, 0);
    const grant = grantOf(tenant);
    for (let i = 0; i < 8; i++) await router.putBlob(tenant, grant, `doc/${i}`, `doc ${i} v1`);
    // Superseded: doc/0..2 twice (v1 and v2 stay on the source), doc/7 deleted (its v1 stays).
    for (let i = 0; i < 3; i++) await router.putBlob(tenant, grant, `doc/${i}`, `doc ${i} v2`);
    for (let i = 0; i < 3; i++) await router.putBlob(tenant, grant, `doc/${i}`, `doc ${i} v3`);
    await router.deleteBlob(tenant, grant, 'doc/7');
    // A version object no row names (a put refused after its upload): the collector's.
    const src = { s3: env!.deps.s3For(SOURCE), bucket: shardByName(testConfig(), SOURCE).bucket };
    const orphan = `${tenantBlobPrefix(tenant)}doc/orphan@${newVersionId()}`;
    await src.s3.send(new PutObjectCommand({ Bucket: src.bucket, Key: orphan, Body: 'never committed' }));

    const referenced = await referencedOn(SOURCE, tenant);
    expect(referenced).toHaveLength(7);
    const onSource = await keysOn(SOURCE, tenant);
    // 8 + 3 + 3 versions and the orphan: 8 of them unreferenced.
    expect(onSource).toHaveLength(15);

    const ref = await B.plannedMove(act, refs, tenant, SOURCE, TARGET);
    counts = {};
    counting = true;
    try {
      const r = await act.copyBlobs({ ...ref, direction: 'forward' });
      expect(r).toMatchObject({ copied: 7, total: 7, deleted: 0, outOfBand: [] });
    } finally {
      counting = false;
    }
    // One server-side copy per referenced object, none read (their sha256 is the index's).
    expect(counts.CopyObjectCommand ?? 0, JSON.stringify(counts)).toBe(7);
    expect(counts.GetObjectCommand ?? 0, JSON.stringify(counts)).toBe(0);
    expect(await keysOn(TARGET, tenant)).toEqual(referenced.map((r) => r.object_key));

    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    const v = await act.validateMove({ ...ref, direction: 'forward' });
    expect(v, v.mismatches.join('\n')).toMatchObject({ ok: true, mismatches: [] });
    await act.setupReplication({ ...ref, direction: 'reverse' });
    const c = await act.cutover({ ...ref, direction: 'forward', epoch: 1, fenceBudgetMs: 10_000, actor: 'blob-index-only', deltaToken: v.deltaToken });
    expect(c, JSON.stringify(c)).toMatchObject({ ok: true, newEpoch: 2 });
    await act.dropReplication({ ...ref, direction: 'forward' });
    // The cutover's pre-sync and final delta brought nothing more.
    expect(await keysOn(TARGET, tenant)).toEqual(referenced.map((r) => r.object_key));

    // Soak: the new owner overwrites doc/3; a reverse round brings the old owner in line with the
    // new owner's index (the old owner's own garbage that shardctl listed is no longer kept there).
    await router.putBlob(tenant, grant, 'doc/3', 'doc 3 v2');
    await act.catchUp({ ...ref, direction: 'reverse', maxDurationMs: 20_000, mode: 'now' });
    const soak = await act.copyBlobs({ ...ref, direction: 'reverse' });
    expect(soak.outOfBand).toEqual([]);
    const now = await referencedOn(TARGET, tenant);
    expect(now).toHaveLength(7);
    // The target holds exactly the referenced objects (the soak's superseded doc/3 v1 included
    // until the collector runs: it is the new owner's garbage now, not a sync's to delete).
    const onTarget = await keysOn(TARGET, tenant);
    for (const r of now) expect(onTarget).toContain(r.object_key);
    expect(onTarget.filter((k) => !now.some((r) => r.object_key === k))).toHaveLength(1);
    expect(onTarget).not.toContain(orphan);
    // Each referenced object on the target is the bytes its row recorded.
    const dst = { s3: env!.deps.s3For(TARGET), bucket: shardByName(testConfig(), TARGET).bucket };
    for (const r of now) expect(await hashObject(dst.s3, dst.bucket, r.object_key)).toMatchObject({ sha256: r.sha256, size: r.size });
    // The old owner (the way back) holds what the new owner's index names, and what it had no longer referenced is gone.
    expect(await keysOn(SOURCE, tenant)).toEqual(now.map((r) => r.object_key));
    const back = await act.validateMove({ ...ref, direction: 'reverse' });
    expect(back, back.mismatches.join('\n')).toMatchObject({ ok: true, mismatches: [] });
  });

  it('validation checks each referenced object on the target against its index row: one changed and one deleted behind the sync are both reported', async () => {
    const tenant = await H.newTenant(SOURCE, 'biv');
    await H.seed(tenant, 20, 0);
    const grant = grantOf(tenant);
    for (let i = 0; i < 4; i++) await router.putBlob(tenant, grant, `doc/${i}`, `doc ${i} v1`);
    const ref = await B.plannedMove(act, refs, tenant, SOURCE, TARGET);
    await act.copyBlobs({ ...ref, direction: 'forward' });
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    const [changed, deleted] = (await referencedOn(SOURCE, tenant)).map((r) => r.object_key);
    const dst = { s3: env!.deps.s3For(TARGET), bucket: shardByName(testConfig(), TARGET).bucket };
    // Same size, other bytes: only the sha256 tells them apart.
    await dst.s3.send(new PutObjectCommand({ Bucket: dst.bucket, Key: changed, Body: 'doc 0 XX' }));
    await dst.s3.send(new DeleteObjectCommand({ Bucket: dst.bucket, Key: deleted }));
    const v = await act.validateMove({ ...ref, direction: 'forward' });
    expect(v.ok).toBe(false);
    expect(v.mismatches.find((m) => m.includes(changed))).toMatch(/sha256/);
    expect(v.mismatches.find((m) => m.includes(deleted))).toMatch(/missing on shard-b/);
  });
});
