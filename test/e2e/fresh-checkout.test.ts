// First contact, as a new user has it: a fresh checkout in a folder only its owner can enter
// (a clone under /root), a stack of its own on ports of its own. `dev up` starts it (as root the
// servers run as `nobody`, who cannot enter the checkout), the first `tenant create` works,
// `dev status` lists the workers polling it, `dev down` stops this checkout's, `dev up` finds
// the same data again and `dev reset` wipes it, wherever it was kept.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { execFile, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { projectRoot } from '../../lib/config';
import { stackAt } from '../../lib/dev/stack';
import { buildWorkflowBundle } from '../../worker';
import { MARK_VAR, newMark, killMarked, spawnCollecting, Spawned } from '../helpers/procs';

const ROOT = projectRoot();
const isRoot = process.getuid?.() === 0;
const mark = newMark('fresh');
let parent: string; // the 0700 folder
let clone: string;
let env: NodeJS.ProcessEnv;
let bundle: string;
let dataDir: string | undefined;
const workers: Spawned[] = [];

/** Ports of the test stack, shifted: distinct from it and from other checkouts' stacks on their own bases. */
function freshPorts(): Record<string, string> {
  const off = Number(process.env.SHARDCTL_TEST_FRESH_PORT_OFFSET ?? 100);
  const p = stackAt(ROOT).ports;
  return {
    SHARDCTL_DEV_PG_PORT: String(p.pg.directory + off),
    SHARDCTL_DEV_TEMPORAL_PORT: String(p.temporal + off),
    SHARDCTL_DEV_UI_PORT: String(p.temporalUi + off),
    SHARDCTL_DEV_S3_PORT: String(p.s3 + off),
  };
}

/** The working tree as it is (uncommitted edits too), without node_modules or .dev. */
function copyCheckout(to: string) {
  const r = spawnSync('git', ['ls-files', '-co', '--exclude-standard', '-z'], { cwd: ROOT, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`git ls-files: ${r.stderr}`);
  for (const f of r.stdout.split('\0').filter(Boolean)) {
    if (f.startsWith('node_modules/') || f.startsWith('.dev/')) continue;
    const src = path.join(ROOT, f);
    if (!fs.existsSync(src)) continue; // deleted in the working tree
    fs.mkdirSync(path.dirname(path.join(to, f)), { recursive: true });
    fs.copyFileSync(src, path.join(to, f));
  }
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(to, 'node_modules'));
  fs.mkdirSync(path.join(to, '.dev'));
  // Tools are downloads, not state: borrowing them saves the pip installs.
  if (fs.existsSync(path.join(ROOT, '.dev', 'tools'))) fs.symlinkSync(path.join(ROOT, '.dev', 'tools'), path.join(to, '.dev', 'tools'));
}

function cli(args: string[], opts: { cwd?: string; extraEnv?: NodeJS.ProcessEnv } = {}): Promise<{ code: number; out: string }> {
  const cwd = opts.cwd ?? clone;
  return new Promise((resolve) =>
    execFile(
      process.execPath,
      [path.join(cwd, 'cli', 'shardctl.js'), ...args],
      { cwd, env: { ...env, ...opts.extraEnv }, timeout: 180_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as any).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    ),
  );
}

function startWorker(cwd: string, args: string[], extraEnv: NodeJS.ProcessEnv = {}): Spawned {
  const w = spawnCollecting(process.execPath, [path.join(cwd, 'cli', 'shardctl.js'), 'worker', ...args], {
    cwd,
    env: { ...env, SHARDCTL_WORKFLOW_BUNDLE: bundle, ...extraEnv },
  });
  workers.push(w);
  return w;
}

interface StatusEntry {
  part: string;
  healthy: boolean;
  pid?: number;
  source?: string;
  taskQueues?: string[];
  cwd?: string;
}

async function statusEntries(): Promise<{ code: number; entries: StatusEntry[] }> {
  const r = await cli(['dev', 'status', '--json']);
  return { code: r.code, entries: JSON.parse(r.out.slice(r.out.indexOf('['))) };
}

beforeAll(async () => {
  parent = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-0700-'));
  fs.chmodSync(parent, 0o700);
  clone = path.join(parent, 'shardctl');
  copyCheckout(clone);
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SHARDCTL_')));
  env = { ...clean, ...freshPorts(), [MARK_VAR]: mark, SHARDCTL_WORKER_LOG: 'ERROR' };
  bundle = await buildWorkflowBundle(path.join(parent, 'workflows.js'));
});

afterAll(async () => {
  await killMarked(mark);
  if (clone && fs.existsSync(path.join(clone, '.dev'))) await cli(['dev', 'reset']);
  if (parent) fs.rmSync(parent, { recursive: true, force: true });
});

describe('a fresh checkout in a folder only its owner can enter', () => {
  it('dev up starts the whole stack, with the Postgres data where its server user can reach it', async () => {
    const r = await cli(['dev', 'up']);
    expect(r.code, r.out).toBe(0);
    const st = await statusEntries();
    expect(st.code).toBe(0);
    expect(st.entries.filter((e) => !e.part.startsWith('worker ')).every((e) => e.healthy)).toBe(true);
    const pgLink = path.join(clone, '.dev', 'pg');
    dataDir = fs.realpathSync(pgLink);
    if (isRoot) {
      // root runs the servers as nobody, who cannot enter the 0700 folder: the data is kept outside it.
      expect(fs.lstatSync(pgLink).isSymbolicLink()).toBe(true);
      expect(dataDir.startsWith(fs.realpathSync(parent) + path.sep)).toBe(false);
      const nobody = Number(spawnSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).stdout.trim());
      expect(fs.statSync(path.join(dataDir, 'shard-a', 'data')).uid).toBe(nobody);
      expect(fs.readFileSync(path.join(clone, '.dev', 'logs', 'pg-shard-a.log'), 'utf8')).toContain('database system is ready');
    }
  }, 240_000);

  it('takes its first tenant right away: dev up prepared the shards', async () => {
    const created = await cli(['tenant', 'create', 'first-contact', '--shard', 'shard-a', '--actor', 'test']);
    expect(created.code, created.out).toBe(0);
    const list = await cli(['shards', 'list']);
    expect(list.code, list.out).toBe(0);
    expect(list.out).not.toContain('not prepared');
    expect(list.out.match(/reachable/g)).toHaveLength(3);
  });

  it("dev status lists the workers polling the stack: this checkout's, and one from another checkout", async () => {
    const mine = startWorker(clone, ['--task-queue', 'fresh-queue']);
    // Another checkout's worker on the same stack (the case of an orphaned demo worker elsewhere).
    const other = startWorker(ROOT, [], { SHARDCTL_CONFIG: path.join(clone, '.dev', 'config.json') });
    await Promise.all([mine.waitFor('worker: polling', 90_000), other.waitFor('worker: polling', 90_000)]);
    let entries: StatusEntry[] = [];
    const deadline = Date.now() + 30_000;
    // Temporal lists a poller once its first poll arrives.
    while (Date.now() < deadline) {
      entries = (await statusEntries()).entries;
      if (entries.some((e) => e.pid === other.proc.pid) && entries.some((e) => e.pid === mine.proc.pid)) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(entries.find((e) => e.pid === mine.proc.pid)).toMatchObject({
      part: `worker ${mine.proc.pid}`,
      healthy: true,
      source: 'checkout',
      taskQueues: ['fresh-queue'],
    });
    expect(entries.find((e) => e.pid === other.proc.pid)).toMatchObject({ source: 'poller', taskQueues: ['shardctl-moves'], cwd: fs.realpathSync(ROOT) });
  }, 180_000);

  it("dev down stops the stack and this checkout's worker, and leaves another checkout's alone", async () => {
    const [mine, other] = workers;
    const r = await cli(['dev', 'down']);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toContain(`stopped worker ${mine.proc.pid}`);
    const ended = await Promise.race([mine.exited, new Promise((res) => setTimeout(() => res('still running'), 20_000))]);
    expect(ended).not.toBe('still running');
    expect(fs.readdirSync(path.join(clone, '.dev', 'run', 'workers'))).toEqual([]);
    expect(other.proc.exitCode).toBeNull();
    other.proc.kill('SIGTERM');
    await other.exited;
    const st = await statusEntries();
    // 5: a server unreachable (cli/exit.ts), now that the stack is down.
    expect(st.code).toBe(5);
    expect(st.entries.filter((e) => e.part.startsWith('worker '))).toEqual([]);
  }, 120_000);

  it('dev up finds the same data again, and dev reset wipes it wherever it was kept', async () => {
    const up = await cli(['dev', 'up']);
    expect(up.code, up.out).toBe(0);
    expect(fs.realpathSync(path.join(clone, '.dev', 'pg'))).toBe(dataDir);
    const shown = await cli(['tenant', 'show', 'first-contact', '--json']);
    expect(shown.code, shown.out).toBe(0);
    expect(JSON.parse(shown.out).shard).toBe('shard-a');
    const reset = await cli(['dev', 'reset']);
    expect(reset.code, reset.out).toBe(0);
    expect(fs.existsSync(dataDir!)).toBe(false);
    expect(fs.readdirSync(path.join(clone, '.dev')).filter((e) => e !== 'tools')).toEqual([]);
  }, 240_000);
});
