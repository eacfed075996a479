// Finding the processes a test started, however deep: the test marks the environment of what it
// spawns (SHARDCTL_TEST_MARK) and every descendant inherits it, so /proc/*/environ names them
// all, including ones a script lost track of. Linux only (/proc).
import fs from 'node:fs';
import { spawn, ChildProcess, SpawnOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export const MARK_VAR = 'SHARDCTL_TEST_MARK';

export function newMark(prefix: string): string {
  return `${prefix}-${process.pid}-${randomBytes(4).toString('hex')}`;
}

export interface MarkedProcess {
  pid: number;
  cmdline: string;
}

/** The whole test run's mark (test/global-setup.ts): what a test forgot to stop is found at the end. */
export const RUN_MARK_VAR = 'SHARDCTL_TEST_RUN';

/** Live (not zombie) processes whose environment carries `mark` (in `varName`). */
export function markedProcesses(mark: string, varName = MARK_VAR): MarkedProcess[] {
  const needle = Buffer.from(`\0${varName}=${mark}\0`);
  const out: MarkedProcess[] = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const env = Buffer.concat([Buffer.from('\0'), fs.readFileSync(`/proc/${e}/environ`), Buffer.from('\0')]);
      if (!env.includes(needle)) continue;
      const stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
      if (stat[stat.lastIndexOf(')') + 2] === 'Z') continue;
      out.push({ pid: Number(e), cmdline: fs.readFileSync(`/proc/${e}/cmdline`, 'utf8').split('\0').join(' ').trim() });
    } catch {
      /* gone meanwhile, or not ours to read */
    }
  }
  return out;
}

export interface Spawned {
  proc: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves once the output contains `text`; rejects if the process ends first or after timeoutMs. */
  waitFor(text: string | RegExp, timeoutMs: number): Promise<void>;
}

/** Spawns with stdout and stderr collected together. */
export function spawnCollecting(cmd: string, args: string[], opts: SpawnOptions): Spawned {
  const proc = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  // On exit, not close: a leaked descendant holding the pipes must not hang the test; the
  // output is complete once the pipes close, or after a short grace.
  const closed = new Promise<void>((resolve) => proc.once('close', () => resolve()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.once('exit', (code, signal) => void Promise.race([closed, new Promise((r) => setTimeout(r, 2000))]).then(() => resolve({ code, signal }))),
  );
  let ended = false;
  void exited.then(() => (ended = true));
  const has = (t: string | RegExp) => (typeof t === 'string' ? out.includes(t) : t.test(out));
  return {
    proc,
    output: () => out,
    exited,
    async waitFor(text, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (!has(text)) {
        if (ended) throw new Error(`exited before printing ${text}:\n${out.slice(-3000)}`);
        if (Date.now() > deadline) throw new Error(`no ${text} within ${timeoutMs} ms:\n${out.slice(-3000)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
  };
}

/** SIGTERM then SIGKILL the marked processes `which` keeps: for a test's own leftovers. Returns what it found. */
export async function killMarked(mark: string, varName = MARK_VAR, which: (p: MarkedProcess) => boolean = () => true): Promise<MarkedProcess[]> {
  const found = markedProcesses(mark, varName).filter(which);
  for (const sig of ['SIGTERM', 'SIGKILL'] as const) {
    for (const p of markedProcesses(mark, varName).filter(which)) {
      try {
        process.kill(p.pid, sig);
      } catch {
        /* gone */
      }
    }
    const deadline = Date.now() + 10_000;
    while (markedProcesses(mark, varName).filter(which).length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  }
  return found;
}
