// Running the real `shardctl` CLI from tests: its exit code and both streams, with an optional
// config file of the test's own (e.g. a server on a closed port) that is removed afterwards.
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Config } from '../../lib/config';
import { uniq } from './stack';

const ROOT = path.resolve(__dirname, '../..');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `shardctl ...args` (asynchronously: an in-process worker keeps running meanwhile). */
export function runCli(args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [path.join(ROOT, 'cli/shardctl.js'), ...args],
      { cwd: ROOT, timeout: opts.timeoutMs ?? 60_000, env: { ...process.env, ...opts.env } },
      (err, stdout, stderr) => resolve({ code: err ? ((err as any).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/**
 * Runs `shardctl ...args` on a pseudo-terminal (util-linux `script`), typing `input` once the
 * CLI has asked (its prompt ends with ": "). stdout and stderr arrive together on `stdout`.
 */
export function runCliOnTty(args: string[], input: string, opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<CliResult> {
  const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const command = [process.execPath, path.join(ROOT, 'cli/shardctl.js'), ...args].map(quote).join(' ');
  return new Promise((resolve) => {
    const child = spawn('script', ['-qfec', command, '/dev/null'], { cwd: ROOT, env: { ...process.env, ...opts.env, NO_COLOR: '1' } });
    let out = '';
    let typed = false;
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.stdout.on('data', (d) => {
      out += String(d);
      if (!typed && /confirm \(anything else aborts\): /.test(out)) {
        typed = true;
        child.stdin.write(`${input}\n`);
      }
    });
    child.stderr.on('data', (d) => (out += String(d)));
    child.on('close', (code) => {
      clearTimeout(timer);
      // Without the terminal's cursor controls (readline draws the prompt with them).
      // eslint-disable-next-line no-control-regex
      resolve({ code: code ?? 1, stdout: out.replace(/\x1b\[[0-9;]*[A-Za-z]/g, '').replace(/\r\n/g, '\n'), stderr: '' });
    });
  });
}

/** A port nothing listens on (bound, then released). */
export function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** Writes `config` to a temporary file; `remove()` deletes it. */
export function configFile(config: Config): { file: string; remove: () => void } {
  const file = path.join(os.tmpdir(), `${uniq('shardctl-cfg')}.json`);
  fs.writeFileSync(file, JSON.stringify(config));
  return { file, remove: () => fs.rmSync(file, { force: true }) };
}

/** The one JSON line a failing `--json` call writes on stderr. */
export function jsonError(r: CliResult): { code: string; exitCode: number; message: string } {
  const lines = r.stderr.trim().split('\n');
  if (lines.length !== 1) throw new Error(`expected one line on stderr, got ${lines.length}:\n${r.stderr}`);
  return JSON.parse(lines[0]).error;
}
