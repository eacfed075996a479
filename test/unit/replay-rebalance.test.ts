// Versioning safety net for the rebalance workflow: real histories of a cancelled and of a failed
// isolate, recorded by the code before the isolate's dedication was undone at its end (main at
// 2b6187a, with record-history's JSON; both runs left shard-c dedicated to a tenant on shard-a),
// replay against the current code without a nondeterminism error; the same code with the
// matching patch guard removed does not, so each guard is what keeps such a run replaying.
// Offline: no Temporal server.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker, bundleWorkflowCode, DefaultLogger, Runtime, WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';

const root = path.join(__dirname, '..', '..');
const quiet = new DefaultLogger('ERROR');

try {
  Runtime.install({ logger: quiet, telemetryOptions: { logging: { filter: { core: 'ERROR', other: 'ERROR' } } } });
} catch {
  /* already installed in this process */
}

const FIXTURES = [
  { file: 'rebalance-isolate-cancelled-v1.json', guard: "patched('isolate-cancel-undoes-dedication')", last: 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED' },
  { file: 'rebalance-isolate-failed-v1.json', guard: "patched('isolate-failed-undoes-dedication')", last: 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED' },
];
const load = (file: string) => JSON.parse(fs.readFileSync(path.join(root, 'test', 'fixtures', 'histories', file), 'utf8'));

let current: WorkflowBundleWithSourceMap;
const unguarded = new Map<string, WorkflowBundleWithSourceMap>();
const variantDirs: string[] = [];

/** The workflows with `guard` replaced by `true`, beside a link to lib/ so imports resolve. */
async function withoutGuard(guard: string): Promise<WorkflowBundleWithSourceMap> {
  const dir = path.join(root, 'tmp', `replay-rebalance-${process.pid}-${randomBytes(3).toString('hex')}`);
  variantDirs.push(dir);
  fs.mkdirSync(path.join(dir, 'workflows'), { recursive: true });
  fs.symlinkSync(path.join(root, 'lib'), path.join(dir, 'lib'));
  for (const f of fs.readdirSync(path.join(root, 'workflows'))) {
    const text = fs.readFileSync(path.join(root, 'workflows', f), 'utf8');
    fs.writeFileSync(path.join(dir, 'workflows', f), f === 'rebalance.ts' ? text.replace(guard, 'true') : text);
  }
  expect(fs.readFileSync(path.join(dir, 'workflows', 'rebalance.ts'), 'utf8')).not.toContain(guard);
  return bundleWorkflowCode({ workflowsPath: path.join(dir, 'workflows', 'index.ts'), logger: quiet });
}

beforeAll(async () => {
  current = await bundleWorkflowCode({ workflowsPath: path.join(root, 'workflows', 'index.ts'), logger: quiet });
  for (const f of FIXTURES) unguarded.set(f.file, await withoutGuard(f.guard));
}, 240_000);

afterAll(() => {
  for (const d of variantDirs) fs.rmSync(d, { recursive: true, force: true });
});

describe('rebalance workflow replay', () => {
  for (const f of FIXTURES) {
    it(`${f.file} is a whole isolate run onto shard-c that never undid its dedication`, () => {
      const json = load(f.file);
      const types = json.events.map((e: any) => e.eventType);
      expect(types[0]).toBe('EVENT_TYPE_WORKFLOW_EXECUTION_STARTED');
      expect(types.at(-1)).toBe(f.last);
      const input = JSON.parse(Buffer.from(json.events[0].workflowExecutionStartedEventAttributes.input.payloads[0].data, 'base64').toString('utf8'));
      expect(input.scope).toMatchObject({ kind: 'isolate', to: 'shard-c' });
      const activities = json.events
        .filter((e: any) => e.activityTaskScheduledEventAttributes)
        .map((e: any) => e.activityTaskScheduledEventAttributes.activityType.name);
      expect(activities).toContain('markPlanShards');
      expect(activities).not.toContain('undoIsolateDedication');
      expect(types).toContain('EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED');
    });

    it(`${f.file} replays against the current code without a nondeterminism error`, async () => {
      await expect(
        Worker.runReplayHistory({ workflowBundle: current, replayName: 'rb-current' }, historyFromJSON(load(f.file)), 'rebalance-replay'),
      ).resolves.toBeUndefined();
    }, 60_000);

    it(`${f.file} fails with a DeterminismViolationError without its patch guard (the undo is a new command)`, async () => {
      const err = await Worker.runReplayHistory(
        { workflowBundle: unguarded.get(f.file)!, replayName: 'rb-unguarded' },
        historyFromJSON(load(f.file)),
        'rebalance-replay',
      ).then(
        () => undefined,
        (e) => e,
      );
      expect(err).toBeInstanceOf(DeterminismViolationError);
    }, 60_000);
  }
});
