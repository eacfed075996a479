// Blob syncs that stop when told (issue 15). A reverse blob sync Temporal gave up on (heartbeat
// timeout, a partitioned worker) kept running through a rollback and deleted, from the bucket that
// owned the tenant again, every key it could no longer find on its old source. Here the stale sync
// is a real copyBlobs activity whose reads of the source bucket are held at the S3 client while a
// real rollback (reverse cutover, then its clean-up) runs; released, it must delete nothing.
// And a sync stops at its activity's cancellation signal, copying nothing more.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { testConfig, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { createActivities } from '../../activities';
import { createDeps, Deps } from '../../activities/deps';
import { syncUnitBlobs } from '../../activities/move/context';
import { s3ClientFor } from '../../lib/s3';
import { listBlobs, tenantBlobPrefix } from '../../lib/blobs';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
let deps: Deps;
let act: ReturnType<typeof createActivities>;
const refs: { moveId: string; unit: string; source: string; target: string }[] = [];
const clients: S3Client[] = [];

beforeAll(async () => {
  await H.prepareStack();
  deps = createDeps(testConfig());
  act = createActivities(deps);
});
afterAll(async () => {
  for (const ref of refs) {
    for (const direction of ['forward', 'reverse'] as const) await act.dropReplication({ ...ref, direction }).catch(() => {});
  }
  for (const c of clients) c.destroy();
  await deps?.close();
  await closePools();
});

/** An S3 client of `shard` whose reads of tenant objects wait until `release()`; `reads` resolves at the first one. */
function heldReads(shard: string) {
  let release!: () => void;
  let firstRead!: () => void;
  const open = new Promise<void>((r) => (release = r));
  const reads = new Promise<void>((r) => (firstRead = r));
  let held = 0;
  const s3 = s3ClientFor(testConfig(), shard);
  clients.push(s3);
  s3.middlewareStack.add(
    (next, context) => async (args) => {
      const key = String((args.input as { Key?: string }).Key ?? '');
      if (context.commandName === 'GetObjectCommand' && key.startsWith('tenants/')) {
        held++;
        firstRead();
        await open;
      }
      return next(args);
    },
    { step: 'initialize', name: 'holdTenantReads' },
  );
  return { s3, release, reads, held: () => held };
}

/** Deps whose S3 client for `shard` is `s3` (everything else shared with the test's deps). */
const withClient = (shard: string, s3: S3Client): Deps => ({ ...deps, s3For: (s) => (s === shard ? s3 : deps.s3For(s)) });

async function putBlobs(shard: string, tenant: string, n: number, label: string): Promise<string[]> {
  const bucket = testConfig().shards.find((s) => s.name === shard)!.bucket;
  const keys = Array.from({ length: n }, (_, i) => `${tenantBlobPrefix(tenant)}${label}/${i}`);
  await Promise.all(keys.map((Key) => deps.s3For(shard).send(new PutObjectCommand({ Bucket: bucket, Key, Body: randomBytes(2048) }))));
  return keys;
}

async function keysOn(shard: string, tenant: string): Promise<string[]> {
  const bucket = testConfig().shards.find((s) => s.name === shard)!.bucket;
  return (await listBlobs(deps.s3For(shard), bucket, tenantBlobPrefix(tenant))).map((e) => e.key).sort();
}

/** A tenant moved to the target by the move's own activities (epoch 2), reverse replication set up. */
async function switchedTenant(prefix: string) {
  const tenant = await H.newTenant(SOURCE, prefix);
  await H.seed(tenant, 40, 5);
  const plan = await act.planMove({ unit: tenant, target: TARGET });
  expect(plan.ok, plan.reasons.join('; ')).toBe(true);
  const ref = { moveId: plan.moveId, unit: tenant, source: SOURCE, target: TARGET };
  refs.push(ref);
  await act.setupReplication({ ...ref, direction: 'forward' });
  for (const t of plan.tables) await act.copyTable({ ...ref, table: t.table, batchRows: 5000, rowsPerSecond: 0 });
  await act.copyBlobs({ ...ref, direction: 'forward' });
  await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
  const v = await act.validateMove({ ...ref, direction: 'forward' });
  expect(v, v.mismatches.join('\n')).toMatchObject({ ok: true });
  await act.setupReplication({ ...ref, direction: 'reverse' });
  const c = await act.cutover({ ...ref, direction: 'forward', epoch: 1, fenceBudgetMs: 10_000, actor: 'stale-sync-test', deltaToken: v.deltaToken });
  expect(c, JSON.stringify(c)).toMatchObject({ ok: true, newEpoch: 2 });
  await act.dropReplication({ ...ref, direction: 'forward' });
  return { tenant, ref };
}

describe('a blob sync Temporal gave up on', () => {
  it('still running through a rollback, deletes nothing from the bucket that owns the tenant again', async () => {
    const { tenant, ref } = await switchedTenant('stale');
    // Written on the new owner during soak: the reverse sync has them to copy back.
    const soakKeys = await putBlobs(TARGET, tenant, 30, 'soak');
    const everything = await keysOn(TARGET, tenant);
    expect(everything).toHaveLength(35);

    // The soak's reverse sync, on a worker Temporal lost touch with: it has listed both buckets
    // and its reads of the new owner's objects hang.
    const held = heldReads(TARGET);
    const stale = createActivities(withClient(TARGET, held.s3))
      .copyBlobs({ ...ref, direction: 'reverse' })
      .then(
        () => 'finished',
        (e: Error) => e,
      );
    await held.reads;

    // The rollback: reverse cutover (its own blob delta copies the soak's objects back), then the
    // clean-up deletes the target's copy, so the stale sync's source no longer has any of them.
    await act.catchUp({ ...ref, direction: 'reverse', maxDurationMs: 20_000, mode: 'now' });
    const back = await act.cutover({ ...ref, direction: 'reverse', epoch: 2, fenceBudgetMs: 10_000, actor: 'stale-sync-test' });
    expect(back, JSON.stringify(back)).toMatchObject({ ok: true, newEpoch: 3 });
    await act.cleanupAfterRollback({ ...ref, epoch: 3, actor: 'stale-sync-test' });
    expect(await H.placement(tenant)).toMatchObject({ shard: SOURCE, epoch: 3, state: 'active' });
    expect(await keysOn(TARGET, tenant)).toEqual([]);
    expect(await keysOn(SOURCE, tenant)).toEqual(everything);

    held.release();
    const outcome = await stale;
    expect(held.held()).toBeGreaterThan(0);
    // Every object of the owner is still there, the soak's too.
    const left = await keysOn(SOURCE, tenant);
    expect(
      soakKeys.filter((k) => !left.includes(k)),
      `${everything.length - left.length} of the owner's ${everything.length} objects deleted`,
    ).toEqual([]);
    expect(left).toEqual(everything);
    expect(outcome).toBeInstanceOf(Error);
    expect((outcome as Error).message).toMatch(/blob sync of .* from shard-b to shard-a stopped: .* now the directory shows shard-a epoch 3/);
  });

  it("stops at its activity's cancellation signal and copies nothing more", async () => {
    const tenant = await H.newTenant(SOURCE, 'abort');
    const plan = await act.planMove({ unit: tenant, target: TARGET });
    expect(plan.ok, plan.reasons.join('; ')).toBe(true);
    await putBlobs(SOURCE, tenant, 20, 'docs');
    const held = heldReads(SOURCE);
    const cancel = new AbortController();
    const sync = syncUnitBlobs(withClient(SOURCE, held.s3), SOURCE, TARGET, tenant, { signal: cancel.signal }).then(
      () => 'finished',
      (e: Error) => e,
    );
    await held.reads;
    cancel.abort(new Error('activity cancelled (heartbeat timeout)'));
    held.release();
    const outcome = await sync;
    expect(await keysOn(TARGET, tenant)).toEqual([]);
    expect(outcome).toBeInstanceOf(Error);
  });
});
