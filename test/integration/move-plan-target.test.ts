// `move plan` and `move start` against a target the directory does not keep open, through the
// real CLI on a directory of its own (test/helpers/fleet.ts), so draining or closing a shard there
// changes nothing the other suites see: refused with exit 4 and the status in words, nothing
// started; the same target open again plans.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { WorkflowNotFoundError } from '@temporalio/client';
import { runCli } from '../helpers/cli';
import { closePools, uniq } from '../helpers/stack';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { moveWorkflowId } from '../../lib/ids';
import { getPlacement } from '../../lib/directory/placements';

let fleet: Fleet;
let cli: (...args: string[]) => ReturnType<typeof runCli>;
beforeAll(async () => {
  fleet = await ownFleet('plantgt', { worker: false });
  cli = (...args) => runCli(['--config', fleet.configFile, ...args]);
}, 120_000);
afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('move plan onto a shard that is not open', () => {
  it('refuses a draining target with exit 4 and its status; move start refuses with the same words and starts nothing', { timeout: 120_000 }, () =>
    refusedWhile('draining'),
  );
  it('refuses a closed target with exit 4 and its status; move start refuses with the same words and starts nothing', { timeout: 120_000 }, () =>
    refusedWhile('closed'),
  );
});

/** Plan and start onto shard-b while the fleet's directory keeps it `status`; then open, it plans. */
async function refusedWhile(status: 'draining' | 'closed') {
  const tenant = await fleet.tenant('shard-a', { rows: 5 });
  const set = await cli('shards', 'set-status', 'shard-b', status, '--actor', 'test', '--reason', `plan refuses ${status}`);
  expect(set.code, set.stderr).toBe(0);
  try {
    const planned = await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-b', '--json');
    expect(planned.code, planned.stderr).toBe(4);
    const reasons: string[] = JSON.parse(planned.stdout).reasons;
    expect(reasons).toContain(`target shard-b is ${status}, not open`);
    // A task queue no worker polls: were a workflow started, it would stay to be seen.
    const started = await runCli(['--config', fleet.configFile, 'move', 'start', '--tenant', tenant, '--to', 'shard-b', '--yes'], {
      env: { SHARDCTL_TASK_QUEUE: uniq('idle') },
    });
    expect(started.code, started.stderr).toBe(4);
    expect(started.stderr).toContain(`target shard-b is ${status}, not open`);
    await expect(fleet.t.client.workflow.getHandle(moveWorkflowId(tenant)).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
    expect(await getPlacement(fleet.directory, tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active' });
  } finally {
    const open = await cli('shards', 'set-status', 'shard-b', 'open', '--actor', 'test');
    expect(open.code, open.stderr).toBe(0);
  }
  const again = await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-b', '--json');
  expect(again.code, again.stdout + again.stderr).toBe(0);
  expect(JSON.parse(again.stdout).ok).toBe(true);
}
