// `shardctl worker` started before its servers: with the directory or Temporal down it waits,
// one log line per attempt with a growing delay, instead of exiting; once the server answers it
// polls; SIGTERM while it waits stops it cleanly. Real worker processes against the real stack.
import { describe, it, expect, afterAll } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { closedPort, configFile } from '../helpers/cli';
import { testConfig, uniq } from '../helpers/stack';
import type { Config } from '../../lib/config';

const ROOT = path.resolve(__dirname, '../..');
const cleanups: (() => void)[] = [];
afterAll(() => cleanups.splice(0).forEach((c) => c()));

/** A `shardctl worker` child with its own config; `out` and `err` grow as it writes. */
function startWorkerProcess(config: Config) {
  const f = configFile(config);
  const child = spawn(process.execPath, [path.join(ROOT, 'cli/shardctl.js'), '--config', f.file, 'worker', '--task-queue', uniq('wait')], {
    cwd: ROOT,
    env: { ...process.env, SHARDCTL_LOG_LEVEL: 'info' },
  });
  const w = { child, out: '', err: '', exit: new Promise<number | null>((r) => child.on('exit', (code) => r(code))) };
  child.stdout.on('data', (d) => (w.out += String(d)));
  child.stderr.on('data', (d) => (w.err += String(d)));
  cleanups.push(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
    f.remove();
  });
  return w;
}

async function until(what: string, pred: () => boolean, timeoutMs: number, w: { out: string; err: string; child: ChildProcess }) {
  const deadline = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\nstderr:\n${w.err}\nstdout:\n${w.out.slice(-3000)}`);
    if (w.child.exitCode !== null) throw new Error(`worker exited ${w.child.exitCode} while waiting for ${what}\nstderr:\n${w.err}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const jsonLines = (out: string) =>
  out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));

/** Forwards `port` to the real Temporal: the server "comes up" when this starts listening. */
function forward(port: number, to: string): Promise<net.Server> {
  const [host, p] = to.split(':');
  const server = net.createServer((a) => {
    const b = net.connect(Number(p), host);
    a.pipe(b).pipe(a);
    a.on('error', () => b.destroy());
    b.on('error', () => a.destroy());
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}

describe('shardctl worker waits for its servers', () => {
  it(
    'with Temporal down it retries with backoff and a line per attempt, then polls once Temporal answers; SIGTERM stops it',
    { timeout: 120_000 },
    async () => {
      const port = await closedPort();
      const config = testConfig();
      const w = startWorkerProcess({ ...config, temporal: { ...config.temporal, address: `127.0.0.1:${port}` } });
      await until('a second attempt', () => /waiting for Temporal at 127\.0\.0\.1:\d+ \(attempt 2, next in 2s\)/.test(w.err), 60_000, w);
      expect(w.child.exitCode).toBeNull();
      expect(w.err).toContain(`worker: waiting for Temporal at 127.0.0.1:${port} (attempt 1, next in 1s)`);
      const waits = jsonLines(w.out).filter((l) => l.msg === 'waiting for Temporal');
      expect(waits.map((l) => [l.attempt, l.retryInMs])).toEqual([
        [1, 1000],
        [2, 2000],
      ]);
      expect(waits[0]).toMatchObject({ level: 'warn', server: 'Temporal', address: `127.0.0.1:${port}` });

      const server = await forward(port, config.temporal.address);
      try {
        await until('polling', () => w.err.includes('worker: polling'), 60_000, w);
        expect(jsonLines(w.out).some((l) => l.msg === 'Temporal reachable' && l.attempts >= 3)).toBe(true);
        w.child.kill('SIGTERM');
        expect(await w.exit).toBe(0);
      } finally {
        server.close();
      }
      // Nothing secret in what it wrote while waiting.
      expect(w.out + w.err).not.toContain(new URL(config.directory.dsn).password + '@');
      expect(w.out + w.err).not.toContain(config.s3.secretAccessKey);
    },
  );

  it('with the directory down it waits (no exit 5), and SIGTERM while it waits ends it with 0 and nothing started', { timeout: 120_000 }, async () => {
    const port = await closedPort();
    const config = testConfig();
    const dsn = new URL(config.directory.dsn);
    dsn.port = String(port);
    const w = startWorkerProcess({ ...config, directory: { dsn: dsn.toString() } });
    await until('a second attempt', () => /waiting for directory at 127\.0\.0\.1:\d+\/shardctl \(attempt 2/.test(w.err), 60_000, w);
    expect(w.err).toContain('placement directory unreachable');
    w.child.kill('SIGTERM');
    expect(await w.exit).toBe(0);
    expect(jsonLines(w.out).map((l) => l.msg)).toContain('worker stopping');
    expect(w.err).not.toContain('worker: polling');
    expect(w.out + w.err).not.toContain(`:${new URL(config.directory.dsn).password}@`);
  });
});
