// `shardctl move plan`: the dry-run twin of a move, through the real CLI against the real stack.
// It runs the plan activity's checks and the cutover's dry-run steps, and changes nothing.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { prepareStack, newTenant, seed, replicationLeftovers } from '../helpers/move';
import { shardPool, directoryPool, closePools } from '../helpers/stack';
import { getPlacement } from '../../lib/directory/placements';
import { getUnitFence } from '../../lib/shard/fence';

const root = path.resolve(__dirname, '../..');
function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(root, 'cli/shardctl.js'), ...args], { cwd: root, timeout: 60_000 }, (err, stdout, stderr) => {
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

  it('refuses with exit 4 and the reason when the tenant is already on the target', async () => {
    const r = await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-a');
    expect(r.code).toBe(4);
    expect(r.stdout).toContain(`refused: unit ${tenant} is already on shard-a`);
    expect(r.stdout).not.toContain('POINT OF NO RETURN');
  });
});
