// Small process helpers for the dev stack: run a command to completion, spawn a detached
// daemon with its output in a log file, probe ports and PIDs. Node-only.
import { setTimeout } from 'node:timers/promises';
import { spawn, spawnSync, SpawnSyncOptions } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function run(cmd: string, args: string[], opts: SpawnSyncOptions = {}): RunResult {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, ...opts });
  if (r.error) return { code: 127, stdout: '', stderr: String(r.error.message) };
  return { code: r.status ?? 1, stdout: String(r.stdout ?? ''), stderr: String(r.stderr ?? '') };
}

/** Starts a daemon in its own process group, output appended to logFile; returns its pid. */
export function spawnDaemon(cmd: string, args: string[], logFile: string, env: NodeJS.ProcessEnv, cwd?: string): number {
  const fd = fs.openSync(logFile, 'a');
  const child = spawn(cmd, args, { detached: true, stdio: ['ignore', fd, fd], env, cwd });
  fs.closeSync(fd);
  if (child.pid === undefined) throw new Error(`could not start ${cmd}`);
  child.unref();
  return child.pid;
}

/** The path of `bin` on PATH, or undefined. */
export function onPath(bin: string): string | undefined {
  const r = run('sh', ['-c', `command -v ${bin}`]);
  return r.code === 0 ? r.stdout.trim() : undefined;
}

export function pidAlive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
  } catch (e: any) {
    return e.code === 'EPERM';
  }
  // A zombie answers signal 0 until its parent reaps it, but it runs nothing any more.
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return !fs.existsSync('/proc/self'); // gone since the signal, or no /proc (macOS): signal 0 is all we know
  }
}

export function readPid(file: string): number | undefined {
  try {
    const n = Number(fs.readFileSync(file, 'utf8').trim());
    return Number.isInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

/** SIGTERM the process group, then SIGKILL after graceMs; resolves when it is gone. */
export async function stopGroup(pid: number, graceMs = 10_000): Promise<void> {
  const sig = (s: NodeJS.Signals) => {
    try {
      process.kill(-pid, s);
    } catch {
      try {
        process.kill(pid, s);
      } catch {
        /* already gone */
      }
    }
  };
  sig('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (pidAlive(pid) && Date.now() < deadline) await sleep(100);
  if (pidAlive(pid)) sig('SIGKILL');
  while (pidAlive(pid)) await sleep(50);
}

export function portOpen(port: number, host = '127.0.0.1', timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ port, host });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(timeoutMs, () => done(false));
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

export async function sleep(ms: number): Promise<void> {
  await setTimeout(ms);
}

export function tail(file: string, lines = 20): string {
  try {
    const all = fs.readFileSync(file, 'utf8').split('\n');
    return all.slice(-lines - 1).join('\n');
  } catch {
    return '(no log yet)';
  }
}
