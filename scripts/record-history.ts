// Records real move histories as replay fixtures (test/fixtures/histories/*.json), the safety net
// test/unit/replay.test.ts replays offline against the current workflow code.
//
// When to re-record: almost never. A fixture stands for a move that may be running in production
// right now, recorded by the code that is deployed; its whole point is to fail when a change to
// workflows/ would break such a move on replay. So:
//   - A change to the command sequence of a running move (a new/removed/reordered activity,
//     timer, child, marker, search-attribute upsert, a different branch) must be guarded with
//     `patched('<change-id>')` (later `deprecatePatch`), and the OLD fixtures must keep passing.
//     Then ADD a fixture for the new path (record under a new name, e.g. move-complete-v2.json);
//     do not overwrite the old ones.
//   - Re-record (overwrite) only when the old histories can no longer exist anywhere: every move
//     started by the old code has finished (or been terminated) in every environment, and the
//     patch guard is being removed. Say so in the change description.
//   - Never re-record just to make a failing replay test pass: that failure is the bug report.
//
// Usage (needs the dev stack: `shardctl dev up`):
//   npx tsx scripts/record-history.ts                 # all scenarios
//   npx tsx scripts/record-history.ts complete        # one or more of: complete cancelled rolled-back
// Each scenario runs a real move of a fresh, small tenant on shard-a with an in-process worker on
// a unique task queue, waits until the workflow has closed, then writes its full history in the
// standard Temporal JSON history format (the one `temporal workflow show --output json` writes).
import fs from 'node:fs';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import * as proto from '@temporalio/proto';
import { historyToJSON, History } from '@temporalio/common/lib/proto-utils';
import { testConfig, uniq, closePools } from '../test/helpers/stack';
import * as H from '../test/helpers/move';
import { startWorker } from '../worker';
import * as M from '../workflows/messages';
import type { Phase } from '../workflows/phases';

require('../lib/quiet-warnings.js');

const OUT_DIR = path.join(__dirname, '..', 'test', 'fixtures', 'histories');
const op = { actor: 'record-history' };

/**
 * The SDK's `historyToJSON`, or the same ProtoJSON conversion done with the protobufjs copy that
 * owns @temporalio/proto's types. Needed while npm installs two protobufjs@8 copies (one under
 * @temporalio/common, one under @temporalio/proto): protojson's `type instanceof Type` check
 * then fails with "type must be a Type" in the SDK helper.
 */
export function historyToJson(history: History): string {
  try {
    return historyToJSON(history);
  } catch (e: any) {
    if (!/type must be a Type/.test(String(e?.message))) throw e;
    const protoDir = path.dirname(require.resolve('@temporalio/proto/package.json'));
    const protojson = require(require.resolve('protobufjs/ext/protojson', { paths: [protoDir] }));
    const type = (proto as any).temporal.api.history.v1.History;
    return JSON.stringify(protojson.toJson(type, type.fromObject(history)), null, 2);
  }
}

type Client = Awaited<ReturnType<typeof H.temporal>>['client'];

interface Scenario {
  file: string;
  target: string;
  input: Partial<M.MoveInput>;
  /** Drives the move to its end once started; returns the phase it must end in. */
  drive(h: WorkflowHandle): Promise<Phase>;
}

const SCENARIOS: Record<string, Scenario> = {
  complete: {
    file: 'move-complete.json',
    target: 'shard-b',
    input: { soakSeconds: 2 },
    async drive(h) {
      await H.waitPhase(h, 'done', 240_000);
      return 'done';
    },
  },
  cancelled: {
    file: 'move-cancelled.json',
    target: 'shard-c',
    input: { approveCutover: 'manual' },
    async drive(h) {
      await H.waitFor(h, (s) => s.awaitingApproval, 180_000);
      await h.executeUpdate(M.cancelUpdate, { args: [op] });
      await H.waitPhase(h, 'cancelled', 180_000);
      return 'cancelled';
    },
  },
  'rolled-back': {
    file: 'move-rolled-back.json',
    target: 'shard-b',
    input: { soakSeconds: 600 },
    async drive(h) {
      await H.waitPhase(h, 'soak', 240_000);
      // Let one reverse-replication round start so the history holds a cancelled soak activity.
      await new Promise((r) => setTimeout(r, 1500));
      await h.executeUpdate(M.rollbackUpdate, { args: [op] });
      await H.waitPhase(h, 'rolled-back', 180_000);
      return 'rolled-back';
    },
  },
};

async function record(client: Client, taskQueue: string, name: string, sc: Scenario): Promise<string> {
  const tenant = await H.newTenant('shard-a', 'rec');
  await H.seed(tenant, 40, 2);
  const h = await H.startMove(client, taskQueue, H.moveInput(tenant, sc.target, sc.input));
  const want = await sc.drive(h);
  const result = (await h.result()) as M.MoveStatus; // the history is complete once the run closed
  if (result.phase !== want) throw new Error(`${name}: move ended in ${result.phase}, expected ${want}: ${result.lastError}`);
  const history = await client.workflow.getHandle(h.workflowId).fetchHistory();
  const json = JSON.stringify(JSON.parse(historyToJson(history)), null, 2) + '\n';
  const file = path.join(OUT_DIR, sc.file);
  fs.writeFileSync(file, json);
  return `${name}: ${tenant} -> ${sc.target}, ${history.events?.length ?? 0} events -> ${path.relative(process.cwd(), file)}`;
}

async function main() {
  const wanted = process.argv.slice(2);
  const unknown = wanted.filter((w) => !(w in SCENARIOS));
  if (unknown.length) throw new Error(`unknown scenario(s) ${unknown.join(', ')}; known: ${Object.keys(SCENARIOS).join(', ')}`);
  const names = wanted.length ? wanted : Object.keys(SCENARIOS);
  fs.mkdirSync(OUT_DIR, { recursive: true });
  await H.prepareStack();
  const taskQueue = uniq('record');
  const worker = await startWorker(testConfig(), { taskQueue });
  const t = await H.temporal();
  try {
    // Concurrently: the scenarios touch distinct tenants and workflow ids.
    const lines = await Promise.all(names.map((n) => record(t.client, taskQueue, n, SCENARIOS[n])));
    for (const l of lines) console.log(l);
  } finally {
    await t.close();
    await worker.shutdown();
    await closePools();
  }
}

if (require.main === module) {
  main().then(
    () => process.exit(0),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
