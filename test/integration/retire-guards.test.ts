// The guards on the only irreversible step (DESIGN.md §4.8, §5.6): retire deletes the source
// copy only when the directory shows the target active at the move's new epoch and the source
// fence no longer owns the unit; deleteCopy (used by retire, cancel and rollback clean-up)
// refuses to delete the owner's copy. Each case builds a real copy of a seeded tenant on both
// shards with the move's own activities, sets up one wrong state by hand, and asserts the
// refusal and that every row and blob on the protected side is still there.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { shardPool, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import type { Activities } from '../../activities';
import { compareAndSetPlacement, PlacementState } from '../../lib/directory/placements';
import { setUnitFence, getUnitFence, FenceState } from '../../lib/shard/fence';
import type { TableFingerprint } from '../../lib/validate/fingerprint';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
let act: Activities;
const refs: { moveId: string; unit: string; source: string; target: string }[] = [];

let env: H.InProcess | undefined;
beforeAll(async () => {
  env = await H.inProcessActivities({ faultPoint: async () => {}, refs });
  ({ act } = env);
});
afterAll(() => env?.close());

/** A seeded tenant on the source, copied (rows and blobs) to the target by the move's activities. */
async function copiedTenant(prefix: string) {
  const tenant = await H.newTenant(SOURCE, prefix);
  await H.seed(tenant, 80, 2);
  const plan = await act.planMove({ unit: tenant, target: TARGET });
  expect(plan.ok, plan.reasons.join('; ')).toBe(true);
  const ref = { moveId: plan.moveId, unit: tenant, source: SOURCE, target: TARGET };
  refs.push(ref);
  await act.setupReplication({ ...ref, direction: 'forward' });
  for (const t of plan.tables) await act.copyTable({ ...ref, table: t.table, batchRows: 5000, rowsPerSecond: 0 });
  await act.copyBlobs({ ...ref, direction: 'forward' });
  await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
  await act.dropReplication({ ...ref, direction: 'forward' });
  const copy = await unitOn(TARGET, tenant);
  expect(copy).toEqual(await unitOn(SOURCE, tenant));
  expect(copy.rows).toBeGreaterThan(50);
  expect(copy.blobs).toBe(2);
  return { tenant, ref };
}

/** Everything of the unit on one shard: per-table fingerprints, row and blob counts. */
async function unitOn(shard: string, tenant: string): Promise<{ tables: TableFingerprint[]; rows: number; blobs: number }> {
  const tables = await H.fingerprint(shard, tenant);
  return { tables, rows: tables.reduce((n, t) => n + t.rows, 0), blobs: await H.blobCount(shard, tenant) };
}

async function fence(shard: string, next: FenceState) {
  const r = await setUnitFence(shardPool(shard), next);
  expect(r.ok, `fence on ${shard}: ${JSON.stringify(r.current)}`).toBe(true);
}

/** Moves the directory row by compare-and-set, as the cutover does (the epoch rises with the shard). */
async function directory(
  tenant: string,
  from: { shard: string; epoch: number; state: PlacementState },
  to: { shard: string; state: PlacementState; moveId: string | null },
) {
  const r = await compareAndSetPlacement(directoryPool(), tenant, from, to, { actor: 'retire-guards-test', action: 'test-setup' });
  expect(r.ok, JSON.stringify(r)).toBe(true);
}

/** The directory and fences exactly as a completed forward switch leaves them. */
async function switched(tenant: string) {
  await fence(TARGET, { unit: tenant, epoch: 2, owned: true, frozen: false });
  await directory(tenant, { shard: SOURCE, epoch: 1, state: 'active' }, { shard: TARGET, state: 'active', moveId: null });
}

const op = { epoch: 2, actor: 'retire-guards-test' };

describe('retire refuses unless the target owns the unit at the new epoch', () => {
  it('refuses while the directory still shows the source as owner, and deletes nothing', async () => {
    const { tenant, ref } = await copiedTenant('rg-dir');
    const before = await unitOn(SOURCE, tenant);
    await expect(act.retireSource({ ...ref, ...op })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(/refusing to retire: directory shows shard-a epoch 1 active, expected shard-b epoch 2 active/),
    });
    expect(await unitOn(SOURCE, tenant)).toEqual(before);
  });

  it('refuses while a rollback holds the unit frozen on the target (directory moving), and deletes nothing', async () => {
    const { tenant, ref } = await copiedTenant('rg-moving');
    await switched(tenant);
    await fence(SOURCE, { unit: tenant, epoch: 2, owned: false, frozen: false });
    // The rollback's freeze: only the directory says a rollback is under way; the source fence
    // does not own the unit yet, so nothing but retire's directory check protects the source.
    await directory(tenant, { shard: TARGET, epoch: 2, state: 'active' }, { shard: TARGET, state: 'moving', moveId: `${ref.moveId}.rollback` });
    const before = await unitOn(SOURCE, tenant);
    await expect(act.retireSource({ ...ref, ...op })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(/directory shows shard-b epoch 2 moving/),
    });
    expect(await unitOn(SOURCE, tenant)).toEqual(before);
  });

  it('refuses while the source fence still owns the unit (the switch never reached the source), and deletes nothing', async () => {
    const { tenant, ref } = await copiedTenant('rg-owned');
    // What a worker killed right after the directory switch leaves: the source fence still
    // owned (frozen) at the old epoch.
    await fence(SOURCE, { unit: tenant, epoch: 1, owned: true, frozen: true });
    await switched(tenant);
    const before = await unitOn(SOURCE, tenant);
    await expect(act.retireSource({ ...ref, ...op })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(/refusing to retire: the source fence is .*"owned":true.*; it must refuse the unit at epoch 2/),
    });
    expect(await unitOn(SOURCE, tenant)).toEqual(before);
    expect(await getUnitFence(shardPool(SOURCE), tenant)).toMatchObject({ epoch: 1, owned: true });
  });

  it('refuses when the source fence has seen a newer epoch than the move (a reverse switch was attempted), and deletes nothing', async () => {
    const { tenant, ref } = await copiedTenant('rg-newer');
    await switched(tenant);
    // A reverse switch that lost its compare-and-set takes back the source's acceptance at
    // epoch 3: the fence no longer owns the unit, but someone meant the source to own it.
    await fence(SOURCE, { unit: tenant, epoch: 3, owned: false, frozen: false });
    const before = await unitOn(SOURCE, tenant);
    await expect(act.retireSource({ ...ref, ...op })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(/the source fence is .*"epoch":3/),
    });
    expect(await unitOn(SOURCE, tenant)).toEqual(before);
  });

  it('retires once the state is right (the cases above refuse for their wrong state, not always)', async () => {
    const { tenant, ref } = await copiedTenant('rg-ok');
    await switched(tenant);
    await fence(SOURCE, { unit: tenant, epoch: 2, owned: false, frozen: false });
    const target = await unitOn(TARGET, tenant);
    await expect(act.retireSource({ ...ref, ...op })).resolves.toEqual({ retired: true });
    expect(await unitOn(SOURCE, tenant)).toMatchObject({ rows: 0, blobs: 0 });
    expect(await unitOn(TARGET, tenant)).toEqual(target);
  });
});

describe("deleteCopy refuses to delete the owner's copy", () => {
  it('rollback clean-up refuses to delete the target when the directory names it the owner, and deletes nothing', async () => {
    const { tenant, ref } = await copiedTenant('rg-cleanup');
    await switched(tenant);
    // Only the directory names the target: its fence does not own the unit (taken back by a
    // lost switch whose compare-and-set in fact committed).
    await fence(TARGET, { unit: tenant, epoch: 2, owned: false, frozen: false });
    const before = await unitOn(TARGET, tenant);
    await expect(act.cleanupAfterRollback({ ...ref, ...op })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(/refusing to delete .* on shard-b: it is the owner \(directory shard-b, fence owned=false\)/),
    });
    expect(await unitOn(TARGET, tenant)).toEqual(before);
  });

  it('cancel refuses to delete the target when its fence already accepts the new epoch (a switch cut between its two steps), and deletes nothing', async () => {
    const { tenant, ref } = await copiedTenant('rg-cancel');
    // This move froze the unit, the target fence accepted epoch 2, and the worker died before
    // the directory's compare-and-set: the directory still names the source.
    await directory(tenant, { shard: SOURCE, epoch: 1, state: 'active' }, { shard: SOURCE, state: 'moving', moveId: ref.moveId });
    await fence(SOURCE, { unit: tenant, epoch: 1, owned: true, frozen: true });
    await fence(TARGET, { unit: tenant, epoch: 2, owned: true, frozen: false });
    const before = await unitOn(TARGET, tenant);
    await expect(act.cancelMove({ ...ref, epoch: 1, actor: 'retire-guards-test' })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(/refusing to delete .* on shard-b: it is the owner \(directory shard-a, fence owned=true\)/),
    });
    expect(await unitOn(TARGET, tenant)).toEqual(before);
  });
});
