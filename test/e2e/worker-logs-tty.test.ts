// The real `shardctl worker`'s log shape follows its stdout: on a pseudo-terminal (util-linux
// `script`) each line is human-readable (time, level, move, unit, phase, activity, attempt, the
// message, on one line, no JSON); piped, each line is a JSON object with those same fields. One
// small move runs through each worker (its own task queue), so the activity lines are real ones.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { uniq, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { spawnCollecting, newMark, killMarked, MARK_VAR, type Spawned } from '../helpers/procs';

const ROOT = path.resolve(__dirname, '../..');
const mark = newMark('logtty');
const ttyQueue = uniq('logtty');
const pipedQueue = uniq('logpipe');
let t: Awaited<ReturnType<typeof H.temporal>>;

/** `shardctl worker` on a pseudo-terminal: stdout and stderr both on the terminal `script` reads. */
function workerOnTty(taskQueue: string): Spawned {
  const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const command = [process.execPath, path.join(ROOT, 'cli/shardctl.js'), 'worker', '--task-queue', taskQueue].map(quote).join(' ');
  let out = '';
  const proc = spawn('script', ['-qfec', command, '/dev/null'], {
    cwd: ROOT,
    env: { ...process.env, [MARK_VAR]: mark, SHARDCTL_LOG_LEVEL: 'debug', SHARDCTL_LOG_FORMAT: '' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  proc.stdout.on('data', (d) => (out += String(d)));
  proc.stderr.on('data', (d) => (out += String(d)));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('close', (code, signal) => resolve({ code, signal })),
  );
  return {
    proc,
    // Without colours and carriage returns: the terminal's, not the logger's.
    // eslint-disable-next-line no-control-regex
    output: () => out.replace(/\x1b\[[0-9;]*m/g, '').replace(/\r\n/g, '\n'),
    exited,
    async waitFor(text, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (!(typeof text === 'string' ? out.includes(text) : text.test(out))) {
        if (Date.now() > deadline) throw new Error(`no ${text} within ${timeoutMs} ms:\n${out.slice(-3000)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
  };
}

let tty: Spawned;
let piped: Spawned;

beforeAll(async () => {
  await H.prepareStack();
  t = await H.temporal();
  tty = workerOnTty(ttyQueue);
  piped = spawnCollecting(process.execPath, [path.join(ROOT, 'cli/shardctl.js'), 'worker', '--task-queue', pipedQueue], {
    cwd: ROOT,
    env: { ...process.env, [MARK_VAR]: mark, SHARDCTL_LOG_LEVEL: 'debug', SHARDCTL_LOG_FORMAT: '' },
  });
  // Either shape: which one the terminal got is the test's to judge, not the set-up's.
  await Promise.all([tty.waitFor(/INFO: worker polling|"msg":"worker polling"/, 120_000), piped.waitFor('"msg":"worker polling"', 120_000)]);
}, 180_000);

afterAll(async () => {
  await t?.close();
  await killMarked(mark);
  await closePools();
});

describe('worker logs: human lines on a terminal, JSON when piped', () => {
  it('each activity line names move, unit, phase and attempt in both shapes', { timeout: 240_000 }, async () => {
    const onTty = await H.newTenant('shard-a', 'ltty');
    const onPipe = await H.newTenant('shard-a', 'lpip');
    await Promise.all([H.seed(onTty, 200, 1), H.seed(onPipe, 200, 1)]);
    const [ht, hp] = await Promise.all([
      H.startMove(t.client, ttyQueue, H.moveInput(onTty, 'shard-b', { soakSeconds: 1 })),
      H.startMove(t.client, pipedQueue, H.moveInput(onPipe, 'shard-b', { soakSeconds: 1 })),
    ]);
    const [doneTty, donePipe] = await Promise.all([H.waitPhase(ht, 'done', 180_000), H.waitPhase(hp, 'done', 180_000)]);
    await killMarked(mark);
    fs.mkdirSync(path.join(ROOT, 'test-results'), { recursive: true });
    fs.writeFileSync(path.join(ROOT, 'test-results', 'worker-tty.log'), tty.output());
    fs.writeFileSync(path.join(ROOT, 'test-results', 'worker-piped.log'), piped.output());

    // On the terminal: no JSON line at all, and every activity line of the move carries its context.
    const ttyLines = tty
      .output()
      .split('\n')
      .filter((l) => l.trim());
    expect(ttyLines.filter((l) => l.trimStart().startsWith('{'))).toEqual([]);
    const ours = ttyLines.filter((l) => l.includes(` unit=${onTty} `));
    const activityLines = ours.filter((l) => / activity=\w+ /.test(l));
    expect(activityLines.length).toBeGreaterThan(10);
    for (const l of activityLines) {
      expect(l).toMatch(/^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] (TRACE|DEBUG|INFO|WARN|ERROR): /);
      expect(l).toMatch(new RegExp(` unit=${onTty} phase=\\w+ activity=\\w+ attempt=\\d+ `));
      if (!l.includes('activity=planMove')) expect(l).toContain(`move=${doneTty.moveId} `);
    }
    expect(activityLines.some((l) => / phase=copy activity=copyTable attempt=1 copy batch committed \{/.test(l))).toBe(true);
    expect(activityLines.some((l) => / phase=fence activity=cutover attempt=\d+ cutover switched \{.*"pauseMs":/.test(l))).toBe(true);
    expect(ours.some((l) => / phase=soak move phase \{/.test(l))).toBe(true);

    // Piped: every stdout line is JSON, the activity lines with the same fields.
    const pipedLines = piped
      .output()
      .split('\n')
      .filter((l) => l.trim());
    expect(pipedLines.filter((l) => !l.startsWith('{'))).toEqual([expect.stringMatching(/^worker: polling /)]);
    const json = pipedLines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l));
    const pipedActivity = json.filter((l) => l.unit === onPipe && typeof l.activity === 'string');
    expect(pipedActivity.length).toBeGreaterThan(10);
    for (const l of pipedActivity) {
      expect(l).toMatchObject({ unit: onPipe, phase: expect.any(String), attempt: expect.any(Number), level: expect.any(String) });
      if (l.activity !== 'planMove') expect(l.moveId).toBe(donePipe.moveId);
    }
  });
});
