// Blob writes fenced like rows (issue 15). The router's blob API (lib/blobs/fenced.ts) runs the
// shard's write check, with the unit's shared lock, in the same transaction before it touches the
// bucket: a cutover's fence waits for an upload in flight, a frozen unit's upload waits and is
// refused at its deadline, and a PUT or DELETE through a router whose route went stale is refused
// by the old owner before it touches the bucket and lands on the new one. Writes that bypass the router (a late upload or a
// delete in the old owner's bucket) are kept by the reverse sync and block retire, naming the key.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { DeleteObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { testConfig, shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import * as B from '../helpers/blobs';
import { createActivities } from '../../activities';
import { Deps } from '../../activities/deps';
import { Router } from '../../lib/router';
import { freezeSource, unfreeze } from '../../lib/shard/fence';
import { blobKeyOf } from '../../lib/blobs/fenced';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
let deps: Deps;
let act: ReturnType<typeof createActivities>;
const refs: B.MoveRef[] = [];
const clients: S3Client[] = [];
const routers: Router[] = [];

let env: H.InProcess | undefined;
beforeAll(async () => {
  env = await H.inProcessActivities({ refs, clients });
  ({ deps, act } = env);
});
afterAll(async () => {
  await Promise.all(routers.map((r) => r.close()));
  await env?.close();
});

const keysOn = (shard: string, tenant: string) => B.keysOn(deps.s3For, shard, tenant);

async function routerWith(shard: string, s3: S3Client) {
  const r = await Router.create(testConfig(), { s3For: (s) => (s === shard ? s3 : deps.s3For(s)) });
  routers.push(r);
  return r;
}

function held(shard: string, command: 'PutObjectCommand' | 'DeleteObjectCommand') {
  const h = B.heldClient(shard, command);
  clients.push(h.s3);
  return h;
}

/** The object under the name's own key (the direct API, not the blob index), read on the owner. */
const readRaw = (router: Router, tenant: string, name: string) =>
  router.withTenant(tenant, { tenants: [tenant] }, 'read', (_tx, route) => route.blobs.get(name));

/** True once a session waits for the fence's advisory lock (class 421) on the shard. */
async function fenceWaiting(shard: string): Promise<boolean> {
  const r = await shardPool(shard).query(`select count(*)::int as n from pg_locks where locktype = 'advisory' and classid = 421 and not granted`);
  return r.rows[0].n > 0;
}

describe('blob writes through the router are fenced like rows', () => {
  it("a cutover's fence waits for a blob upload in flight, and a frozen unit's upload is refused at its deadline", async () => {
    const tenant = await H.newTenant(SOURCE, 'bf-freeze');
    const grant = { tenants: [tenant] };
    const h = held(SOURCE, 'PutObjectCommand');
    const router = await routerWith(SOURCE, h.s3);
    const events: string[] = [];
    const put = router.putBlob(tenant, grant, 'docs/in-flight', 'uploaded before the fence').then((v) => {
      events.push('put-done');
      return v;
    });
    await h.reached;
    const freeze = freezeSource(shardPool(SOURCE), tenant, 1, { lockTimeoutMs: 30_000 }).then((r) => {
      events.push('frozen');
      return r;
    });
    // Either the freeze finishes (the upload was not fenced) or it is seen waiting for the upload's lock.
    for (let waiting = false; !waiting && events.length === 0;) {
      waiting = await fenceWaiting(SOURCE);
      if (!waiting) await new Promise((r) => setTimeout(r, 20));
    }
    h.release();
    const written = await put;
    expect((await freeze).ok).toBe(true);
    expect(events).toEqual(['put-done', 'frozen']);
    expect(await keysOn(SOURCE, tenant)).toEqual([written.key]);

    // Frozen: the upload waits for the cutover and, past its deadline, is refused without touching the bucket.
    await expect(router.putBlob(tenant, grant, 'docs/while-frozen', 'x', { deadlineMs: 400 })).rejects.toMatchObject({ type: 'Frozen' });
    await expect(router.deleteBlob(tenant, grant, 'docs/in-flight', { deadlineMs: 400 })).rejects.toMatchObject({ type: 'Frozen' });
    // A read transaction passes a frozen unit's route check (reads continue), but its blob write
    // still runs the write check first: refused, nothing uploaded.
    await expect(router.withTenant(tenant, grant, 'read', (_tx, route) => route.blobs.put('docs/from-a-read', 'x'), { deadlineMs: 400 })).rejects.toMatchObject(
      { type: 'Frozen' },
    );
    expect(await keysOn(SOURCE, tenant)).toEqual([written.key]);
    expect((await unfreeze(shardPool(SOURCE), tenant, 1)).ok).toBe(true);
    expect(await router.getBlob(tenant, grant, 'docs/in-flight')).toEqual(Buffer.from('uploaded before the fence'));
  });

  for (const op of ['PUT', 'DELETE'] as const) {
    // A write transaction holds the unit's lock from its BEGIN (open_unit_write), so a switch can
    // no longer overtake one in flight: the fence waits for it (the case above). What remains is a
    // router whose route went stale: its transaction is refused at BEGIN by the old owner, before
    // the bucket is touched, and retried on the new owner.
    it(`a blob ${op} through a router whose route went stale is refused by the old owner before touching its bucket and lands on the new one`, async () => {
      const tenant = await H.newTenant(SOURCE, `bf-${op.toLowerCase()}`);
      const grant = { tenants: [tenant] };
      const name = 'docs/contract.pdf';
      // No LISTEN and an hour's TTL: the router learns of the switch only from the old owner's refusal.
      const router = await Router.create(testConfig(), { listen: false, snapshotTtlMs: 3_600_000, fullReloadMs: 3_600_000 });
      routers.push(router);
      // Both copies hold the object, as after the move's copy.
      if (op === 'DELETE') {
        await router.withTenant(tenant, grant, 'write', (_tx, route) => route.blobs.put(name, 'v1'));
        await deps.s3For(TARGET).send(new PutObjectCommand({ Bucket: testConfig().shards[1].bucket, Key: blobKeyOf(tenant, name), Body: 'v1' }));
      } else {
        expect(await router.getBlob(tenant, grant, name)).toBeUndefined(); // the route is cached now
      }
      const before = { source: await keysOn(SOURCE, tenant), target: await keysOn(TARGET, tenant) };
      await B.switchByHand(tenant, SOURCE, TARGET, 'blob-fence-test');
      const stale = router.metrics().staleRetries;
      const shards: string[] = [];
      await router.withTenant(tenant, grant, 'write', async (_tx, route) => {
        shards.push(route.shard);
        return op === 'PUT' ? route.blobs.put(name, 'v2') : route.blobs.delete(name);
      });
      expect(router.metrics().staleRetries - stale, 'refused by the old owner once').toBe(1);
      expect(shards).toEqual([TARGET]); // the transaction's work never ran on the old owner
      const key = blobKeyOf(tenant, name);
      expect(await keysOn(SOURCE, tenant)).toEqual(before.source); // the old copy is retire's to delete
      if (op === 'PUT') {
        expect(await keysOn(TARGET, tenant)).toEqual([key]);
        expect(await readRaw(router, tenant, name)).toEqual(Buffer.from('v2'));
      } else {
        expect(before.target).toEqual([key]);
        expect(await keysOn(TARGET, tenant)).toEqual([]);
        expect(await readRaw(router, tenant, name)).toBeUndefined();
      }
    });
  }
});

describe('blob writes that bypass the router after the switch', () => {
  it('are kept by the reverse sync and block retire, naming each key; once accepted, retire goes on', async () => {
    const { tenant, ref } = await B.switchedTenant(act, refs, 'bf-late', SOURCE, TARGET);
    const seeded = await keysOn(SOURCE, tenant);
    expect(seeded).toHaveLength(5);
    // An application still configured for the old owner uploads one object and deletes another there.
    const [late] = await B.putDirect(deps.s3For(SOURCE), SOURCE, tenant, 1, 'late');
    const gone = seeded[0];
    await deps.s3For(SOURCE).send(new DeleteObjectCommand({ Bucket: testConfig().shards[0].bucket, Key: gone }));

    const sync = await act.copyBlobs({ ...ref, direction: 'reverse' });
    expect(sync.outOfBand).toEqual(
      [
        { key: late, change: 'written' },
        { key: gone, change: 'deleted' },
      ].sort((a, b) => (a.key < b.key ? -1 : 1)),
    );
    const left = await keysOn(SOURCE, tenant);
    expect(left).toContain(late); // not deleted as "extra"
    expect(left).not.toContain(gone); // not brought back

    const rows = await H.rowCount(SOURCE, tenant);
    await expect(act.retireSource({ ...ref, epoch: 2, actor: 'blob-fence-test' })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(
        /refusing to retire: 2 object\(s\) of .* in bucket shardctl-shard-a of shard-a were written, changed or deleted outside shardctl/,
      ),
    });
    await expect(act.retireSource({ ...ref, epoch: 2, actor: 'blob-fence-test' })).rejects.toThrow(
      new RegExp(`${late} written; ${gone} deleted|${gone} deleted; ${late} written`),
    );
    expect(await keysOn(SOURCE, tenant)).toEqual(left);
    expect(await H.rowCount(SOURCE, tenant)).toBe(rows);

    // The operator reconciled and accepts the bucket as it is (the refusal says how).
    await shardPool(SOURCE).query('delete from shardctl.blob_ledger where unit = $1', [tenant]);
    await expect(act.retireSource({ ...ref, epoch: 2, actor: 'blob-fence-test' })).resolves.toEqual({ retired: true });
    expect(await keysOn(SOURCE, tenant)).toEqual([]);
  });

  it('an upload that reached the new owner after a rollback switched back blocks the rollback clean-up, naming the key', async () => {
    const { tenant, ref } = await B.switchedTenant(act, refs, 'bf-rb', SOURCE, TARGET);
    await act.catchUp({ ...ref, direction: 'reverse', maxDurationMs: 20_000, mode: 'now' });
    const back = await act.cutover({ ...ref, direction: 'reverse', epoch: 2, fenceBudgetMs: 10_000, actor: 'blob-fence-test' });
    expect(back, JSON.stringify(back)).toMatchObject({ ok: true, newEpoch: 3 });
    // A writer still routed to the target uploads there, behind the router.
    const [late] = await B.putDirect(deps.s3For(TARGET), TARGET, tenant, 1, 'after-rollback');
    const before = await keysOn(TARGET, tenant);
    await expect(act.cleanupAfterRollback({ ...ref, epoch: 3, actor: 'blob-fence-test' })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(new RegExp(`refusing to clean up after the rollback: 1 object\\(s\\) .* of shard-b .*\\(${late} written\\)`)),
    });
    expect(await keysOn(TARGET, tenant)).toEqual(before);
  });
});
