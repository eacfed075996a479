// Versioning safety net for the rebalance workflow: real histories of a cancelled and of a failed
// isolate, recorded by the code before the isolate's dedication was undone at its end (main at
// 2b6187a, with record-history's JSON; both runs left shard-c dedicated to a tenant on shard-a),
// replay against the current code without a nondeterminism error; the same code with the
// matching patch guard removed does not, so each guard is what keeps such a run replaying. The
// same for a drain whose first move failed with two moves still pending, recorded by the code
// before a failure blocked only itself (this branch's parent of a731ca1): that run dropped the
// pending moves and planned again, where the current code starts them.
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

const activitiesOf = (json: any): string[] =>
  json.events.filter((e: any) => e.activityTaskScheduledEventAttributes).map((e: any) => e.activityTaskScheduledEventAttributes.activityType.name);
const inputOf = (json: any) =>
  JSON.parse(Buffer.from(json.events[0].workflowExecutionStartedEventAttributes.input.payloads[0].data, 'base64').toString('utf8'));

/** An isolate onto shard-c that never undid its dedication. */
function isolateRun(json: any) {
  expect(inputOf(json).scope).toMatchObject({ kind: 'isolate', to: 'shard-c' });
  expect(activitiesOf(json)).toContain('markPlanShards');
  expect(activitiesOf(json)).not.toContain('undoIsolateDedication');
  expect(json.events.map((e: any) => e.eventType)).toContain('EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED');
}

const FIXTURES = [
  {
    file: 'rebalance-isolate-cancelled-v1.json',
    guard: "patched('isolate-cancel-undoes-dedication')",
    last: 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED',
    what: 'a whole isolate run onto shard-c that never undid its dedication',
    check: isolateRun,
  },
  {
    file: 'rebalance-isolate-failed-v1.json',
    guard: "patched('isolate-failed-undoes-dedication')",
    last: 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED',
    what: 'a whole isolate run onto shard-c that never undid its dedication',
    check: isolateRun,
  },
  {
    file: 'rebalance-failure-stalls-v1.json',
    guard: "patched('rebalance-failure-blocks-only-itself')",
    last: 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED',
    what: 'a whole drain of shard-c (one at a time) whose first move failed and whose two pending moves waited for a re-plan',
    check(json: any) {
      expect(inputOf(json)).toMatchObject({ scope: { kind: 'drain', shard: 'shard-c' }, maxConcurrent: 1 });
      // Planned twice: the failure dropped what was pending and the run planned again.
      expect(activitiesOf(json).filter((a) => a === 'planRebalance')).toHaveLength(2);
      const children = json.events.filter((e: any) => e.startChildWorkflowExecutionInitiatedEventAttributes);
      const ended = json.events.filter((e: any) => e.eventType === 'EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED');
      expect(children).toHaveLength(3);
      expect(ended).toHaveLength(3);
      // The second plan came after the first child ended, before the second child started.
      const types: string[] = json.events.map((e: any) => e.eventType);
      const secondPlan = json.events.findIndex(
        (e: any, i: number) =>
          i > types.indexOf('EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED') && e.activityTaskScheduledEventAttributes?.activityType.name === 'planRebalance',
      );
      expect(secondPlan).toBeGreaterThan(0);
      expect(json.events.indexOf(children[1])).toBeGreaterThan(secondPlan);
    },
  },
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
    it(`${f.file} is ${f.what}`, () => {
      const json = load(f.file);
      const types = json.events.map((e: any) => e.eventType);
      expect(types[0]).toBe('EVENT_TYPE_WORKFLOW_EXECUTION_STARTED');
      expect(types.at(-1)).toBe(f.last);
      f.check(json);
    });

    it(`${f.file} replays against the current code without a nondeterminism error`, async () => {
      await expect(
        Worker.runReplayHistory({ workflowBundle: current, replayName: 'rb-current' }, historyFromJSON(load(f.file)), 'rebalance-replay'),
      ).resolves.toBeUndefined();
    }, 60_000);

    it(`${f.file} fails with a DeterminismViolationError without its patch guard (the guarded change is a new command)`, async () => {
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
