// `shardctl move plan`: the dry-run twin of a move, through the real CLI against the real stack.
// It runs the plan activity's checks and the cutover's dry-run steps, and changes nothing; `move
// start` runs the same checks first and refuses with the same words, starting nothing.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { WorkflowNotFoundError } from '@temporalio/client';
import { prepareStack, newTenant, seed, replicationLeftovers, temporal } from '../helpers/move';
import { shardPool, directoryPool, closePools, uniq, testConfig } from '../helpers/stack';
import { createDeps } from '../../activities/deps';
import { shardBucket } from '../../activities/move/context';
import { blobCensus, tenantBlobPrefix } from '../../lib/blobs';
import { moveWorkflowId } from '../../lib/ids';
import { replicationCapacity } from '../../lib/shard/replication-capacity';
import { getPlacement } from '../../lib/directory/placements';
import { getUnitFence } from '../../lib/shard/fence';
import { Router } from '../../lib/router';

const root = path.resolve(__dirname, '../..');
function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return cliWith({}, ...args);
}
function cliWith(env: Record<string, string>, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const o = { cwd: root, timeout: 60_000, env: { ...process.env, ...env } };
    execFile(process.execPath, [path.join(root, 'cli/shardctl.js'), ...args], o, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as any).code ?? 1) : 0, stdout, stderr });
    });
  });
}

let tenant: string;
beforeAll(async () => {
  await prepareStack();
  tenant = await newTenant('shard-a', 'plan');
  await seed(tenant, 30, 2);
});
afterAll(closePools);

describe('shardctl move plan', () => {
  it('prints the tables and the cutover steps in order with one point of no return, and changes nothing', async () => {
    const src = shardPool('shard-a');
    const before = { placement: await getPlacement(directoryPool(), tenant), fence: await getUnitFence(src, tenant) };
    const r = await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-b', '--json');
    expect(r.code).toBe(0);
    const plan = JSON.parse(r.stdout);
    expect(plan).toMatchObject({ ok: true, source: 'shard-a', epoch: 1, moveId: `${tenant}.e1.dryrun` });
    expect(plan.tables.reduce((n: number, t: any) => n + t.rowsEstimated, 0)).toBeGreaterThan(0);
    const steps: string[] = plan.cutoverSteps;
    expect(steps.filter((s) => s.startsWith('POINT OF NO RETURN'))).toHaveLength(1);
    expect(steps.findIndex((s) => s.startsWith('freeze:'))).toBeLessThan(steps.findIndex((s) => s.startsWith('POINT OF NO RETURN')));
    // Nothing changed: placement, fence, no slot or publication of the move.
    expect(await getPlacement(directoryPool(), tenant)).toEqual(before.placement);
    expect(await getUnitFence(src, tenant)).toEqual(before.fence);
    expect(await replicationLeftovers(`${tenant}.`)).toEqual([]);
    expect(await getUnitFence(shardPool('shard-b'), tenant)).toBeUndefined();
  });

  it('says which final blob delta the cutover will use: the whole prefix for objects put directly, the index rows for a tenant written only through the index; and what the move copies', async () => {
    // The shared tenant's two blobs were put directly (seed's default).
    const direct = JSON.parse((await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-b', '--json')).stdout);
    expect(direct.blobs).toMatchObject({ objects: 2, unversioned: 2, truncated: false, windowDelta: 'prefix' });
    expect(direct.blobs.bytes).toBeGreaterThan(0);
    const text = await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-b');
    expect(text.stdout).toMatch(/blobs: 2 object\(s\), ≈ .+, 2 not written through the blob index; the cutover's final blob delta lists the whole prefix/);
    const indexed = await newTenant('shard-a', 'planix');
    await seed(indexed, 30, 3, 'index');
    const viaIndex = await cli('move', 'plan', '--tenant', indexed, '--to', 'shard-b', '--json');
    expect(JSON.parse(viaIndex.stdout).blobs).toMatchObject({ objects: 3, unversioned: 0, truncated: false, windowDelta: 'index' });
    // What the move copies: every object an index row names, never a superseded or deleted version.
    const churned = await newTenant('shard-a', 'planvx');
    const router = await Router.create(testConfig());
    try {
      const grant = { tenants: [churned] };
      for (const v of ['v1', 'v2', 'v3']) await router.putBlob(churned, grant, 'doc/0', `doc 0 ${v}`);
      await router.putBlob(churned, grant, 'doc/1', 'doc 1 v1');
      await router.deleteBlob(churned, grant, 'doc/1');
      await router.putBlob(churned, grant, 'doc/2', 'doc 2 v1');
    } finally {
      await router.close();
    }
    const churnedPlan = JSON.parse((await cli('move', 'plan', '--tenant', churned, '--to', 'shard-b', '--json')).stdout);
    expect(churnedPlan.blobs).toMatchObject({ objects: 5, unversioned: 0, unreferenced: 3, toCopy: { objects: 2 }, windowDelta: 'index' });
    expect(churnedPlan.blobs.toCopy.bytes).toBe('doc 0 v3'.length + 'doc 2 v1'.length);
    expect((await cli('move', 'plan', '--tenant', churned, '--to', 'shard-b')).stdout).toMatch(
      /blobs: 5 object\(s\), ≈ .+ \(the move copies 2, ≈ .+; 3 superseded or deleted version\(s\) no index row names stay for the collector\)/,
    );
    const bare = await newTenant('shard-a', 'plan0');
    const none = JSON.parse((await cli('move', 'plan', '--tenant', bare, '--to', 'shard-b', '--json')).stdout);
    expect(none.blobs).toMatchObject({ objects: 0, windowDelta: 'prefix' });
    expect((await cli('move', 'plan', '--tenant', bare, '--to', 'shard-b')).stdout).toContain(
      "blobs: none yet; the cutover's final blob delta lists the (empty) prefix",
    );
  });

  it('counts at most its bound of objects and says so', async () => {
    const config = testConfig();
    const deps = createDeps(config);
    try {
      const b = shardBucket(deps, 'shard-a');
      const prefix = tenantBlobPrefix(tenant);
      expect(await blobCensus(b.s3, b.bucket, prefix, { maxObjects: 1 })).toMatchObject({ objects: 1, unversioned: 1, truncated: true, windowDelta: 'prefix' });
      expect(await blobCensus(b.s3, b.bucket, prefix, { maxObjects: 2 })).toMatchObject({ objects: 2, truncated: false });
    } finally {
      await deps.close();
    }
  });

  it('refuses with exit 4 and the reason when the tenant is already on the target', async () => {
    const r = await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-a');
    expect(r.code).toBe(4);
    expect(r.stdout).toContain(`refused: unit ${tenant} is already on shard-a`);
    expect(r.stdout).not.toContain('POINT OF NO RETURN');
  });

  it('reads the replication capacity the slot check judges from the server: a slot of any kind counts against max_replication_slots', async () => {
    const pool = shardPool('shard-b');
    const before = await replicationCapacity(pool);
    expect(before.walLevel).toBe('logical');
    expect(before.maxSlots).toBe(Number((await pool.query('show max_replication_slots')).rows[0].max_replication_slots));
    // A physical slot reserves no WAL until used: one taken for a moment does not hurt the other suites.
    const name = `shardctl_plan_probe_${process.pid}`;
    await pool.query('select pg_create_physical_replication_slot($1)', [name]);
    try {
      const during = await replicationCapacity(pool);
      expect(during.usedSlots).toBeGreaterThanOrEqual(1);
      expect((await pool.query('select 1 from pg_replication_slots where slot_name = $1', [name])).rowCount).toBe(1);
      expect(during.maxSlots).toBe(before.maxSlots);
    } finally {
      await pool.query('select pg_drop_replication_slot($1)', [name]);
    }
  });

  it('move start runs the same checks and refuses with the same words (exit 4): no move workflow is started', async () => {
    const planned = await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-a', '--json');
    expect(planned.code).toBe(4);
    const reasons: string[] = JSON.parse(planned.stdout).reasons;
    expect(reasons).toEqual([`unit ${tenant} is already on shard-a`]);
    // A task queue no worker polls: were a workflow started, it would stay to be seen.
    const r = await cliWith({ SHARDCTL_TASK_QUEUE: uniq('idle') }, 'move', 'start', '--tenant', tenant, '--to', 'shard-a', '--yes');
    const t = await temporal();
    try {
      expect(r.code, r.stderr).toBe(4);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim()).toBe(`shardctl: move start refused, nothing started: ${reasons.join('; ')}`);
      await expect(t.client.workflow.getHandle(moveWorkflowId(tenant)).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
    } finally {
      await t.client.workflow
        .getHandle(moveWorkflowId(tenant))
        .terminate('test over')
        .catch(() => {});
      await t.close();
    }
  });
});
