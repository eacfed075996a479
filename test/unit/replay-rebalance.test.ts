// Versioning safety net for the rebalance workflow: a real history of a cancelled isolate,
// recorded by the code before `isolate-cancel-undoes-dedication` (main at 2b6187a, with
// record-history's JSON), replays against the current code without a nondeterminism error; the
// same code with that patch's guard removed does not, so the guard is what keeps such a run
// replaying. Offline: no Temporal server.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker, bundleWorkflowCode, DefaultLogger, Runtime, WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';

const root = path.join(__dirname, '..', '..');
const fixture = path.join(root, 'test', 'fixtures', 'histories', 'rebalance-isolate-cancelled-v1.json');
const quiet = new DefaultLogger('ERROR');
const GUARD = "patched('isolate-cancel-undoes-dedication')";

try {
  Runtime.install({ logger: quiet, telemetryOptions: { logging: { filter: { core: 'ERROR', other: 'ERROR' } } } });
} catch {
  /* already installed in this process */
}

let current: WorkflowBundleWithSourceMap;
let unguarded: WorkflowBundleWithSourceMap;
let variantDir: string;
const json = JSON.parse(fs.readFileSync(fixture, 'utf8'));
const history = historyFromJSON(json);

beforeAll(async () => {
  current = await bundleWorkflowCode({ workflowsPath: path.join(root, 'workflows', 'index.ts'), logger: quiet });
  // The workflows with the guard replaced by `true`, beside links to lib/ so imports resolve.
  variantDir = path.join(root, 'tmp', `replay-rebalance-${process.pid}-${randomBytes(3).toString('hex')}`);
  fs.mkdirSync(path.join(variantDir, 'workflows'), { recursive: true });
  fs.symlinkSync(path.join(root, 'lib'), path.join(variantDir, 'lib'));
  for (const f of fs.readdirSync(path.join(root, 'workflows'))) {
    const text = fs.readFileSync(path.join(root, 'workflows', f), 'utf8');
    fs.writeFileSync(path.join(variantDir, 'workflows', f), f === 'rebalance.ts' ? text.replace(GUARD, 'true') : text);
  }
  expect(fs.readFileSync(path.join(variantDir, 'workflows', 'rebalance.ts'), 'utf8')).not.toContain(GUARD);
  unguarded = await bundleWorkflowCode({ workflowsPath: path.join(variantDir, 'workflows', 'index.ts'), logger: quiet });
}, 180_000);

afterAll(() => {
  if (variantDir) fs.rmSync(variantDir, { recursive: true, force: true });
});

describe('rebalance workflow replay', () => {
  it('the fixture is a whole cancelled isolate run that never undid its dedication', () => {
    const types = json.events.map((e: any) => e.eventType);
    expect(types[0]).toBe('EVENT_TYPE_WORKFLOW_EXECUTION_STARTED');
    expect(types.at(-1)).toBe('EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED');
    const input = JSON.parse(Buffer.from(json.events[0].workflowExecutionStartedEventAttributes.input.payloads[0].data, 'base64').toString('utf8'));
    expect(input.scope).toMatchObject({ kind: 'isolate', to: 'shard-c' });
    const activities = json.events
      .filter((e: any) => e.activityTaskScheduledEventAttributes)
      .map((e: any) => e.activityTaskScheduledEventAttributes.activityType.name);
    expect(activities).toEqual(['planRebalance', 'markPlanShards']);
    expect(types).toContain('EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED');
  });

  it('replays against the current code without a nondeterminism error', async () => {
    await expect(Worker.runReplayHistory({ workflowBundle: current, replayName: 'rb-current' }, history, 'rebalance-replay')).resolves.toBeUndefined();
  }, 60_000);

  it('fails with a DeterminismViolationError without the patch guard (the undo activity is a new command)', async () => {
    const err = await Worker.runReplayHistory({ workflowBundle: unguarded, replayName: 'rb-unguarded' }, history, 'rebalance-replay').then(
      () => undefined,
      (e) => e,
    );
    expect(err).toBeInstanceOf(DeterminismViolationError);
  }, 60_000);
});
