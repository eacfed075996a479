// Versioning safety net: real move histories (recorded by scripts/record-history.ts) must replay
// against the current workflow code without a nondeterminism error. Offline: no Temporal server.
// A failure here means a change to workflows/ would break moves that are running right now; guard
// the change with `patched()` instead of re-recording (see the header of record-history.ts).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import * as proto from '@temporalio/proto';
import { historyFromJSON, History } from '@temporalio/common/lib/proto-utils';
import { Worker, bundleWorkflowCode, DefaultLogger, Runtime, WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';
import { moveWorkflowId } from '../../lib/ids';

const root = path.join(__dirname, '..', '..');
const fixtures = path.join(root, 'test', 'fixtures', 'histories');
const workflowsPath = path.join(root, 'workflows', 'index.ts');
const quiet = new DefaultLogger('ERROR');

try {
  // Core logs every replayed nondeterminism as a WARN; the negative test provokes them on purpose.
  Runtime.install({ logger: quiet, telemetryOptions: { logging: { filter: { core: 'ERROR', other: 'ERROR' } } } });
} catch {
  /* already installed in this process */
}

/**
 * The SDK's `historyFromJSON`, or the same ProtoJSON parse done with the protobufjs copy that owns
 * @temporalio/proto's types: while npm installs two protobufjs@8 copies, the SDK helper fails its
 * `type instanceof Type` check ("type must be a Type").
 */
function historyFromJson(json: unknown): History {
  try {
    return historyFromJSON(json);
  } catch (e: any) {
    if (!/type must be a Type/.test(String(e?.message))) throw e;
    const protoDir = path.dirname(require.resolve('@temporalio/proto/package.json'));
    const protojson = require(require.resolve('protobufjs/ext/protojson', { paths: [protoDir] }));
    return protojson.fromJson((proto as any).temporal.api.history.v1.History, json, { ignoreUnknownFields: true });
  }
}

interface Fixture {
  name: string;
  history: History;
  workflowId: string;
  eventTypes: string[];
  activities: string[];
}

/** Histories carry no workflow id; the move's is derived from its unit (its input). */
function loadFixture(name: string): Fixture {
  const json = JSON.parse(fs.readFileSync(path.join(fixtures, name), 'utf8'));
  const started = json.events[0].workflowExecutionStartedEventAttributes;
  const input = JSON.parse(Buffer.from(started.input.payloads[0].data, 'base64').toString('utf8'));
  return {
    name,
    history: historyFromJson(json),
    workflowId: moveWorkflowId(input.unit),
    eventTypes: json.events.map((e: any) => e.eventType),
    activities: json.events
      .filter((e: any) => e.activityTaskScheduledEventAttributes)
      .map((e: any) => e.activityTaskScheduledEventAttributes.activityType.name),
  };
}

const FIXTURES: { file: string; mustSchedule: string[] }[] = [
  { file: 'move-complete.json', mustSchedule: ['planMove', 'copyTable', 'cutover', 'dropReplication', 'retireSource'] },
  { file: 'move-cancelled.json', mustSchedule: ['planMove', 'validateMove', 'cancelMove'] },
  { file: 'move-rolled-back.json', mustSchedule: ['cutover', 'catchUp', 'cleanupAfterRollback'] },
];

let current: WorkflowBundleWithSourceMap;
let variantDir: string;
let variant: WorkflowBundleWithSourceMap;

beforeAll(async () => {
  current = await bundleWorkflowCode({ workflowsPath, logger: quiet });
  // A deliberately incompatible copy: same workflow type, one extra activity before the real code.
  // It lives inside the project so the bundler resolves @temporalio/workflow from node_modules.
  variantDir = path.join(root, 'tmp', `replay-variant-${process.pid}-${randomBytes(3).toString('hex')}`);
  fs.mkdirSync(variantDir, { recursive: true });
  const rel = path.relative(variantDir, path.join(root, 'workflows')).split(path.sep).join('/');
  fs.writeFileSync(
    path.join(variantDir, 'index.ts'),
    [
      `import { proxyActivities } from '@temporalio/workflow';`,
      `import { moveTenantWorkflow as released } from '${rel}/move';`,
      `import type { MoveInput } from '${rel}/messages';`,
      `const { sourceWalLsn } = proxyActivities<{ sourceWalLsn(i: { shard: string }): Promise<string> }>({ startToCloseTimeout: '1 minute' });`,
      `export async function moveTenantWorkflow(input: MoveInput) {`,
      `  await sourceWalLsn({ shard: input.target });`,
      `  return released(input);`,
      `}`,
      '',
    ].join('\n'),
  );
  variant = await bundleWorkflowCode({ workflowsPath: path.join(variantDir, 'index.ts'), logger: quiet });
}, 120_000);

afterAll(() => {
  if (variantDir) fs.rmSync(variantDir, { recursive: true, force: true });
});

describe('move workflow replay (determinism against recorded histories)', () => {
  for (const f of FIXTURES) {
    it(`replays ${f.file} against the current workflow code without a nondeterminism error`, async () => {
      const fx = loadFixture(f.file);
      // The fixture is a whole, closed run of the path its name says.
      expect(fx.eventTypes[0]).toBe('EVENT_TYPE_WORKFLOW_EXECUTION_STARTED');
      expect(fx.eventTypes.at(-1)).toBe('EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED');
      for (const a of f.mustSchedule) expect(fx.activities).toContain(a);
      await expect(Worker.runReplayHistory({ workflowBundle: current, replayName: 'replay-current' }, fx.history, fx.workflowId)).resolves.toBeUndefined();
    }, 60_000);
  }

  it('replays every fixture in one batch (runReplayHistories) with no error', async () => {
    const all = FIXTURES.map((f) => loadFixture(f.file));
    const errors: string[] = [];
    let n = 0;
    for await (const r of Worker.runReplayHistories(
      { workflowBundle: current, replayName: 'replay-batch' },
      all.map((x) => ({ history: x.history, workflowId: x.workflowId })),
    )) {
      n++;
      if (r.error) errors.push(`${r.workflowId}: ${r.error.message}`);
    }
    expect(errors).toEqual([]);
    expect(n).toBe(all.length);
  }, 60_000);

  it('fails with a DeterminismViolationError when the workflow schedules an extra activity first', async () => {
    for (const f of FIXTURES) {
      const fx = loadFixture(f.file);
      const err = await Worker.runReplayHistory({ workflowBundle: variant, replayName: 'replay-variant' }, fx.history, fx.workflowId).then(
        () => undefined,
        (e) => e,
      );
      expect(err, f.file).toBeInstanceOf(DeterminismViolationError);
      expect(err.message).toMatch(/nondeterminism/i);
    }
  }, 60_000);
});
