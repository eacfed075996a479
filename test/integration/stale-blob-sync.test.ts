// Blob syncs that stop when told (issue 15). A reverse blob sync Temporal gave up on (heartbeat
// timeout, a partitioned worker) kept running through a rollback and deleted, from the bucket that
// owned the tenant again, every key it could no longer find on its old source. Here the stale sync
// is a real copyBlobs activity whose reads of the source bucket are held at the S3 client while a
// real rollback (reverse cutover, then its clean-up) runs; released, it must delete nothing.
// And a sync stops at its activity's cancellation signal, copying nothing more; a cutover's sync
// started under a freeze stops once that freeze is over (unfrozen, or taken over by a later attempt).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { S3Client } from '@aws-sdk/client-s3';
import { shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { createActivities } from '../../activities';
import { Deps } from '../../activities/deps';
import { syncUnitBlobs } from '../../activities/move/context';
import * as B from '../helpers/blobs';
import { compareAndSetPlacement } from '../../lib/directory/placements';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
let deps: Deps;
let act: ReturnType<typeof createActivities>;
const refs: B.MoveRef[] = [];
const clients: S3Client[] = [];

let env: H.InProcess | undefined;
beforeAll(async () => {
  env = await H.inProcessActivities({ refs, clients });
  ({ deps, act } = env);
});
afterAll(() => env?.close());

/** Deps whose S3 client for `shard` is `s3` (everything else shared with the test's deps). */
const withClient = (shard: string, s3: S3Client): Deps => ({ ...deps, s3For: (s) => (s === shard ? s3 : deps.s3For(s)) });
const keysOn = (shard: string, tenant: string) => B.keysOn(deps.s3For, shard, tenant);
function heldReads(shard: string) {
  const h = B.heldClient(shard, 'GetObjectCommand');
  clients.push(h.s3);
  return { ...h, reads: h.reached };
}
/** A sync's outcome: 'finished', or the error it stopped with. */
const outcomeOf = (p: Promise<unknown>): Promise<'finished' | Error> =>
  p.then(
    () => 'finished' as const,
    (e: Error) => e,
  );
/** copyBlobs of `ref` in `direction`, its CopyObject requests into `shard` held at the S3 client (after its fence check). */
function heldCopy(shard: string, ref: B.MoveRef, direction: 'forward' | 'reverse') {
  const held = B.heldClient(shard, 'CopyObjectCommand');
  clients.push(held.s3);
  return { held, stale: outcomeOf(createActivities(withClient(shard, held.s3)).copyBlobs({ ...ref, direction })) };
}
const ledgerRows = async (shard: string, tenant: string) =>
  (await shardPool(shard).query('select count(*)::int as n from shardctl.blob_ledger where unit = $1', [tenant])).rows[0].n as number;

describe('a blob sync Temporal gave up on', () => {
  const staleSyncs = {
    // The soak's reverse sync (the case): Temporal gave up on its worker.
    'a soak reverse sync': (d: Deps, ref: B.MoveRef) => createActivities(d).copyBlobs({ ...ref, direction: 'reverse' }),
    // A rollback cutover attempt Temporal gave up on, its blob delta still running: the cutover
    // calls syncUnitBlobs without a move, so only the directory and the fence stop it.
    "an abandoned rollback attempt's blob delta": (d: Deps, ref: B.MoveRef) => syncUnitBlobs(d, ref.target, ref.source, ref.unit, { hashUnchanged: false }),
  };
  for (const [kind, startSync] of Object.entries(staleSyncs)) {
    it(`${kind}, still running through a rollback, deletes nothing from the bucket that owns the tenant again`, async () => {
      const { tenant, ref } = await B.switchedTenant(act, refs, 'stale', SOURCE, TARGET);
      // Written on the new owner during soak: the reverse sync has them to copy back.
      const soakKeys = await B.putDirect(deps.s3For(TARGET), TARGET, tenant, 30, 'soak');
      const everything = await keysOn(TARGET, tenant);
      expect(everything).toHaveLength(35);

      // The soak's reverse sync, on a worker Temporal lost touch with: it has listed both buckets
      // and its reads of the new owner's objects hang.
      const held = heldReads(TARGET);
      const stale = outcomeOf(startSync(withClient(TARGET, held.s3), ref));
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
      expect((outcome as Error).message).toMatch(/blob sync of .* from shard-b to shard-a stopped: /);
    });
  }

  it('still running after the move was cancelled, copies nothing into the target and leaves nothing there', async () => {
    const tenant = await H.newTenant(SOURCE, 'stale-cancel');
    await B.putDirect(deps.s3For(SOURCE), SOURCE, tenant, 20, 'docs');
    const ref = await B.plannedMove(act, refs, tenant, SOURCE, TARGET, false);
    const held = heldReads(SOURCE);
    const stale = outcomeOf(createActivities(withClient(SOURCE, held.s3)).copyBlobs({ ...ref, direction: 'forward' }));
    await held.reads;
    // The cancel changes no epoch: only the move's dropped slot tells the stale sync it is over.
    await act.cancelMove({ ...ref, epoch: 1, actor: 'stale-sync-test' });
    held.release();
    const outcome = await stale;
    expect(await keysOn(TARGET, tenant)).toEqual([]);
    expect(await ledgerRows(TARGET, tenant)).toBe(0);
    expect(outcome).toBeInstanceOf(Error);
    expect((outcome as Error).message).toMatch(/stopped: move .* dropped its forward slot/);
  });

  it('a copy past its fence check and in flight when the move is cancelled lands after the clean-up and is removed: nothing stays in the undone target', async () => {
    const tenant = await H.newTenant(SOURCE, 'stale-land');
    await B.putDirect(deps.s3For(SOURCE), SOURCE, tenant, 5, 'docs');
    const ref = await B.plannedMove(act, refs, tenant, SOURCE, TARGET, false);
    // The target's CopyObject requests are held after the sync's fence passed for them.
    const { held, stale } = heldCopy(TARGET, ref, 'forward');
    await held.reached;
    await act.cancelMove({ ...ref, epoch: 1, actor: 'stale-sync-test' });
    expect(await keysOn(TARGET, tenant)).toEqual([]);
    held.release();
    const outcome = await stale;
    // The held copies (those past their fence check before the cancel) landed after the clean-up: the sync removed them.
    expect(held.held()).toBeGreaterThanOrEqual(1);
    expect(outcome).toBeInstanceOf(Error);
    expect((outcome as Error).message).toMatch(/stopped: move .* dropped its forward slot/);
    expect(await keysOn(TARGET, tenant)).toEqual([]);
    expect(await ledgerRows(TARGET, tenant)).toBe(0);
  });

  it("a cutover's blob pre-sync held mid-copy when the move is cancelled stops, and its copies that land after the clean-up are removed", async () => {
    const tenant = await H.newTenant(SOURCE, 'stale-pre');
    await H.seed(tenant, 20, 0);
    const ref = await B.plannedMove(act, refs, tenant, SOURCE, TARGET);
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    const v = await act.validateMove({ ...ref, direction: 'forward' });
    expect(v, v.mismatches.join('\n')).toMatchObject({ ok: true });
    await act.setupReplication({ ...ref, direction: 'reverse' });
    // Written after the validation: the cutover's pre-sync has them to copy, and is held on them.
    await B.putDirect(deps.s3For(SOURCE), SOURCE, tenant, 5, 'late');
    const held = B.heldClient(TARGET, 'CopyObjectCommand');
    clients.push(held.s3);
    const stale = createActivities(withClient(TARGET, held.s3))
      .cutover({ ...ref, direction: 'forward', epoch: 1, fenceBudgetMs: 10_000, actor: 'stale-sync-test', deltaToken: v.deltaToken })
      .then(
        (r) => r,
        (e: Error) => e,
      );
    await held.reached;
    await act.cancelMove({ ...ref, epoch: 1, actor: 'stale-sync-test' });
    expect(await keysOn(TARGET, tenant)).toEqual([]);
    held.release();
    const outcome = await stale;
    expect(held.held()).toBeGreaterThanOrEqual(1);
    // The cutover never froze the unit: its pre-sync stopped at the cancel's dropped slot.
    expect(JSON.stringify(outcome instanceof Error ? outcome.message : outcome)).toMatch(/dropped its forward slot/);
    expect(await H.placement(tenant)).toMatchObject({ shard: SOURCE, epoch: 1, state: 'active' });
    expect(await keysOn(TARGET, tenant)).toEqual([]);
  });

  it('a soak copy past its fence check and in flight when the source is retired lands after the retire and is removed: nothing stays in the retired bucket', async () => {
    const { tenant, ref } = await B.switchedTenant(act, refs, 'stale-ret', SOURCE, TARGET);
    await B.putDirect(deps.s3For(TARGET), TARGET, tenant, 5, 'soak');
    // The soak's reverse sync copies into the old owner's bucket; its CopyObject requests are held.
    const { held, stale } = heldCopy(SOURCE, ref, 'reverse');
    await held.reached;
    await act.retireSource({ ...ref, epoch: 2, actor: 'stale-sync-test' });
    expect(await keysOn(SOURCE, tenant)).toEqual([]);
    held.release();
    const outcome = await stale;
    expect(held.held()).toBeGreaterThanOrEqual(1);
    expect(outcome).toBeInstanceOf(Error);
    expect((outcome as Error).message).toMatch(/stopped: move .* dropped its reverse slot/);
    expect(await keysOn(SOURCE, tenant)).toEqual([]);
    // The owner keeps everything.
    expect(await keysOn(TARGET, tenant)).toHaveLength(10);
  });

  it('a soak copy in flight through a rollback lands in the bucket that owns the tenant again and is kept there', async () => {
    const { tenant, ref } = await B.switchedTenant(act, refs, 'stale-rb', SOURCE, TARGET);
    await B.putDirect(deps.s3For(TARGET), TARGET, tenant, 5, 'soak');
    const everything = await keysOn(TARGET, tenant);
    const { held, stale } = heldCopy(SOURCE, ref, 'reverse');
    await held.reached;
    await act.catchUp({ ...ref, direction: 'reverse', maxDurationMs: 20_000, mode: 'now' });
    const back = await act.cutover({ ...ref, direction: 'reverse', epoch: 2, fenceBudgetMs: 10_000, actor: 'stale-sync-test' });
    expect(back, JSON.stringify(back)).toMatchObject({ ok: true, newEpoch: 3 });
    await act.cleanupAfterRollback({ ...ref, epoch: 3, actor: 'stale-sync-test' });
    expect(await keysOn(SOURCE, tenant)).toEqual(everything);
    held.release();
    const outcome = await stale;
    expect(held.held()).toBeGreaterThanOrEqual(1);
    expect(outcome).toBeInstanceOf(Error);
    // The owner's objects are all still there: a copy landing in the owner's bucket is the owner's.
    expect(await keysOn(SOURCE, tenant)).toEqual(everything);
  });

  it('started under a freeze, stops once that attempt unfroze the unit and copies nothing more', () => stopsAfterItsFreeze('unfrozen'));
  it('started under a freeze, stops once a later attempt took the freeze over and copies nothing more', () => stopsAfterItsFreeze('taken over'));

  /** A cutover's blob sync (no move: the cutover passes none) held mid-read while its freeze ends. */
  async function stopsAfterItsFreeze(how: 'unfrozen' | 'taken over') {
    const tenant = await H.newTenant(SOURCE, 'frz');
    await B.putDirect(deps.s3For(SOURCE), SOURCE, tenant, 20, 'docs');
    const dir = deps.directoryPool();
    const audit = { actor: 'stale-sync-test', action: 'test.freeze' };
    const moveId = `${tenant}.e1.test`;
    const frozen = await compareAndSetPlacement(
      dir,
      tenant,
      { shard: SOURCE, epoch: 1, state: 'active' },
      { shard: SOURCE, state: 'moving', moveId, freezeToken: 'attempt-1' },
      audit,
    );
    expect(frozen.ok).toBe(true);
    const held = heldReads(SOURCE);
    const sync = outcomeOf(syncUnitBlobs(withClient(SOURCE, held.s3), SOURCE, TARGET, tenant, { hashUnchanged: false }));
    await held.reads;
    const expectFrozen = { shard: SOURCE, epoch: 1, state: 'moving' as const, freezeToken: 'attempt-1' };
    const next =
      how === 'unfrozen'
        ? { shard: SOURCE, state: 'active' as const, moveId: null }
        : { shard: SOURCE, state: 'moving' as const, moveId, freezeToken: 'attempt-2' };
    expect((await compareAndSetPlacement(dir, tenant, expectFrozen, next, audit)).ok).toBe(true);
    held.release();
    const outcome = await sync;
    expect(await keysOn(TARGET, tenant)).toEqual([]);
    expect(outcome).toBeInstanceOf(Error);
    expect((outcome as Error).message).toMatch(/stopped: it started under freeze attempt-1; now the directory shows /);
    // The taken-over freeze is left to no attempt: unfrozen, the tenant is the other suites' to ignore.
    if (how === 'taken over') {
      const unfreeze = await compareAndSetPlacement(
        dir,
        tenant,
        { ...expectFrozen, freezeToken: 'attempt-2' },
        { shard: SOURCE, state: 'active', moveId: null },
        audit,
      );
      expect(unfreeze.ok).toBe(true);
    }
  }

  it("stops at its activity's cancellation signal and copies nothing more", async () => {
    const tenant = await H.newTenant(SOURCE, 'abort');
    const plan = await act.planMove({ unit: tenant, target: TARGET });
    expect(plan.ok, plan.reasons.join('; ')).toBe(true);
    await B.putDirect(deps.s3For(SOURCE), SOURCE, tenant, 20, 'docs');
    const held = heldReads(SOURCE);
    const cancel = new AbortController();
    const sync = outcomeOf(syncUnitBlobs(withClient(SOURCE, held.s3), SOURCE, TARGET, tenant, { signal: cancel.signal }));
    await held.reads;
    cancel.abort(new Error('activity cancelled (heartbeat timeout)'));
    held.release();
    const outcome = await sync;
    expect(await keysOn(TARGET, tenant)).toEqual([]);
    expect(outcome).toBeInstanceOf(Error);
  });
});
