// Helpers for blob tests against the real stack: tenants moved by the move's own activities,
// object keys per bucket, direct (unfenced) uploads as a foreign writer makes them, and S3
// clients whose requests of one kind are held until released (a slow or partitioned worker).
import { expect } from 'vitest';
import { randomBytes } from 'node:crypto';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { testConfig, shardPool, directoryPool } from './stack';
import { compareAndSetPlacement } from '../../lib/directory/placements';
import { setUnitFence } from '../../lib/shard/fence';
import * as H from './move';
import type { createActivities } from '../../activities';
import { s3ClientFor } from '../../lib/s3';
import { listBlobs, tenantBlobPrefix } from '../../lib/blobs';

type Activities = ReturnType<typeof createActivities>;
export type MoveRef = { moveId: string; unit: string; source: string; target: string };

const bucketOf = (shard: string) => testConfig().shards.find((s) => s.name === shard)!.bucket;

/** Every key of the tenant in the shard's bucket, sorted. */
export async function keysOn(s3For: (shard: string) => S3Client, shard: string, tenant: string): Promise<string[]> {
  return (await listBlobs(s3For(shard), bucketOf(shard), tenantBlobPrefix(tenant))).map((e) => e.key).sort();
}

/** `n` objects put straight into the shard's bucket (no router, no fence); returns their keys. */
export async function putDirect(s3: S3Client, shard: string, tenant: string, n: number, label: string): Promise<string[]> {
  const keys = Array.from({ length: n }, (_, i) => `${tenantBlobPrefix(tenant)}${label}/${i}`);
  await Promise.all(keys.map((Key) => s3.send(new PutObjectCommand({ Bucket: bucketOf(shard), Key, Body: randomBytes(2048) }))));
  return keys;
}

/**
 * An S3 client of `shard` that holds each `command` on a tenant key until `release()`; `reached`
 * resolves when the first one is held. The client is the caller's to destroy.
 */
export function heldClient(shard: string, command: 'GetObjectCommand' | 'PutObjectCommand' | 'DeleteObjectCommand' | 'CopyObjectCommand') {
  let release!: () => void;
  let reach!: () => void;
  const open = new Promise<void>((r) => (release = r));
  const reached = new Promise<void>((r) => (reach = r));
  let held = 0;
  const s3 = s3ClientFor(testConfig(), shard);
  s3.middlewareStack.add(
    (next, context) => async (args) => {
      const key = String((args.input as { Key?: string }).Key ?? '');
      if (context.commandName === command && key.startsWith('tenants/')) {
        held++;
        reach();
        await open;
      }
      return next(args);
    },
    { step: 'initialize', name: `hold-${command}` },
  );
  return { s3, release, reached, held: () => held };
}

/** A planned move of the tenant with its forward replication set up (its rows copied unless `copyRows` is false). */
export async function plannedMove(act: Activities, refs: MoveRef[], tenant: string, source: string, target: string, copyRows = true): Promise<MoveRef> {
  const plan = await act.planMove({ unit: tenant, target });
  expect(plan.ok, plan.reasons.join('; ')).toBe(true);
  const ref = { moveId: plan.moveId, unit: tenant, source, target };
  refs.push(ref);
  await act.setupReplication({ ...ref, direction: 'forward' });
  if (copyRows) for (const t of plan.tables) await act.copyTable({ ...ref, table: t.table, batchRows: 5000, rowsPerSecond: 0 });
  return ref;
}

/** The switch of a unit from source (epoch 1) to target (epoch 2) by hand, as a completed cutover leaves fences and directory. */
export async function switchByHand(tenant: string, source: string, target: string, actor: string) {
  await setUnitFence(shardPool(target), { unit: tenant, epoch: 2, owned: true, frozen: false });
  const cas = await compareAndSetPlacement(
    directoryPool(),
    tenant,
    { shard: source, epoch: 1, state: 'active' },
    { shard: target, state: 'active', moveId: null },
    { actor, action: 'test-setup' },
  );
  expect(cas.ok).toBe(true);
  await setUnitFence(shardPool(source), { unit: tenant, epoch: 2, owned: false, frozen: false });
}

/** A seeded tenant moved from source to target by the move's own activities (epoch 2), reverse replication set up. */
export async function switchedTenant(act: Activities, refs: MoveRef[], prefix: string, source: string, target: string, seed = { rows: 40, blobs: 5 }) {
  const tenant = await H.newTenant(source, prefix);
  await H.seed(tenant, seed.rows, seed.blobs);
  const ref = await plannedMove(act, refs, tenant, source, target);
  await act.copyBlobs({ ...ref, direction: 'forward' });
  await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
  const v = await act.validateMove({ ...ref, direction: 'forward' });
  expect(v, v.mismatches.join('\n')).toMatchObject({ ok: true });
  await act.setupReplication({ ...ref, direction: 'reverse' });
  const c = await act.cutover({ ...ref, direction: 'forward', epoch: 1, fenceBudgetMs: 10_000, actor: 'blob-test', deltaToken: v.deltaToken });
  expect(c, JSON.stringify(c)).toMatchObject({ ok: true, newEpoch: 2 });
  await act.dropReplication({ ...ref, direction: 'forward' });
  return { tenant, ref };
}

export { dropReplications } from './move';
