// `npm run demo` against the real stack, shortened (SHARDCTL_DEMO_DURATION / _SOAK) and on a
// task queue of its own: whichever way it ends, no process it started survives it, and its
// live progress never shows more rows copied than the total.
import { describe, it, expect, beforeAll, afterAll, afterEach } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { projectRoot } from '../../lib/config';
import { buildWorkflowBundle } from '../../worker';
import { uniq } from '../helpers/stack';
import { MARK_VAR, markedProcesses, newMark, killMarked, spawnCollecting, MarkedProcess } from '../helpers/procs';

const ROOT = projectRoot();
let bundleDir: string;
let bundle: string;
const marks: string[] = [];

beforeAll(async () => {
  // One webpack build for every demo worker of this file instead of one per start.
  bundleDir = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-demo-test-'));
  bundle = await buildWorkflowBundle(path.join(bundleDir, 'workflows.js'));
});

afterAll(() => {
  if (bundleDir) fs.rmSync(bundleDir, { recursive: true, force: true });
});

afterEach(async () => {
  // A failed assertion must not leave the demo's processes to the next test.
  for (const m of marks.splice(0)) await killMarked(m);
});

function startDemo(opts: { durationS: number; ownGroup?: boolean }) {
  const mark = newMark('demo');
  marks.push(mark);
  const env = {
    ...process.env,
    [MARK_VAR]: mark,
    SHARDCTL_TASK_QUEUE: uniq('demo'),
    SHARDCTL_WORKFLOW_BUNDLE: bundle,
    SHARDCTL_DEMO_DURATION: `${opts.durationS}s`,
    SHARDCTL_DEMO_SOAK: '2s',
  };
  const demo = spawnCollecting('bash', ['scripts/demo.sh'], { cwd: ROOT, env, detached: !!opts.ownGroup });
  // Watch what runs under the demo while it runs: proves the scan sees its worker and loadgen.
  // Every (pid, command line) ever seen is kept: a process caught as it exits reads an empty
  // /proc/<pid>/cmdline, and must not overwrite what an earlier scan saw it run.
  const seen = new Set<string>();
  const timer = setInterval(() => {
    for (const p of markedProcesses(mark)) if (p.cmdline) seen.add(`${p.pid}\0${p.cmdline}`);
  }, 200);
  void demo.exited.then(() => clearInterval(timer));
  const seenMatching = (re: RegExp) => [...seen].map((s) => s.slice(s.indexOf('\0') + 1)).filter((c) => re.test(c));
  return { demo, mark, seenMatching };
}

const WORKER = /shardctl\.js worker/;
const LOADGEN = /shardctl\.js loadgen --tenants/;

/** Every `rows X/Y` of `move wait`'s live progress. */
function progressPairs(out: string): [number, number][] {
  return [...out.matchAll(/ (\d+)\/(\d+) rows /g)].map((m) => [Number(m[1]), Number(m[2])]);
}

describe('npm run demo', () => {
  it('leaves no process running once it is done, and its progress never passes 100 %', async () => {
    const { demo, mark, seenMatching } = startDemo({ durationS: 8 });
    const { code } = await demo.exited;
    const out = demo.output();
    expect(code, out.slice(-3000)).toBe(0);
    expect(out).toContain('== demo done');
    expect(seenMatching(WORKER).length, 'the scan saw the demo worker').toBeGreaterThan(0);
    expect(seenMatching(LOADGEN).length, 'the scan saw the demo loadgen').toBeGreaterThan(0);
    expect(markedProcesses(mark)).toEqual<MarkedProcess[]>([]);
    const pairs = progressPairs(out);
    expect(pairs.length).toBeGreaterThan(0);
    for (const [copied, total] of pairs) expect(copied).toBeLessThanOrEqual(total);
  }, 300_000);

  it('leaves no process running after a Ctrl-C while its load generator still runs', async () => {
    // Its own process group, signalled as a whole: what a terminal does on Ctrl-C.
    const { demo, mark } = startDemo({ durationS: 300, ownGroup: true });
    await demo.waitFor('== waiting for loadgen to finish', 240_000);
    const running = markedProcesses(mark).map((p) => p.cmdline);
    expect(
      running.filter((c) => WORKER.test(c)),
      'worker running before Ctrl-C',
    ).toHaveLength(1);
    expect(
      running.filter((c) => LOADGEN.test(c)),
      'loadgen running before Ctrl-C',
    ).toHaveLength(1);
    process.kill(-demo.proc.pid!, 'SIGINT');
    const { code } = await demo.exited;
    expect(code).toBe(130);
    expect(markedProcesses(mark)).toEqual<MarkedProcess[]>([]);
  }, 300_000);
});
