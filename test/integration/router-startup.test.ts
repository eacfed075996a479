// Router.create's first directory snapshot (issue 14: a stall on the router's first directory
// connection failed Router.create at once): a directory that cannot be reached yet is tried again
// with backoff until startupTimeoutMs, then DirectoryUnavailable; a failure that is not about
// reaching it (a bad password) is thrown at once. Real directory, behind a TCP forwarder of the
// test's own that starts listening only after a while.
import { describe, it, expect, afterEach } from 'vitest';
import net from 'node:net';
import { testConfig } from '../helpers/stack';
import { Router } from '../../lib/router';
import { ShardctlError } from '../../lib/errors';
import { freePort } from '../helpers/ports';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** Forwards `port` to the directory's server once started; counts the connections it accepted. */
function forwarder(port: number) {
  const up = new URL(testConfig().directory.dsn);
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  const server = net.createServer((client) => {
    accepted++;
    const upstream = net.connect(Number(up.port), up.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => s.destroy());
      s.on('close', () => sockets.delete(s));
    }
    client.pipe(upstream).pipe(client);
  });
  return {
    get accepted() {
      return accepted;
    },
    start: () => new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r())),
    stop: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

function dsnVia(port: number, password?: string): string {
  const u = new URL(testConfig().directory.dsn);
  u.port = String(port);
  if (password !== undefined) u.password = password;
  return u.toString();
}

describe('Router.create and a directory it cannot reach yet', () => {
  it('keeps trying while the directory refuses connections, and routes once it answers', async () => {
    const port = await freePort();
    const fwd = forwarder(port);
    closers.push(() => fwd.stop().catch(() => {}));
    // Nothing listens for the first 1.5 s: every attempt until then is refused.
    const late = setTimeout(() => void fwd.start(), 1500);
    closers.push(async () => clearTimeout(late));
    const router = await Router.create(testConfig(), { directoryDsn: dsnVia(port), listen: false, startupTimeoutMs: 15_000 });
    closers.push(() => router.close());
    const m = router.metrics();
    // Attempts before the directory answered were counted as failures; the last load succeeded.
    expect(m.refreshFailures).toBeGreaterThan(0);
    expect(m.refreshes).toBe(1);
    expect(m.directoryReachable).toBe(true);
    expect(fwd.accepted).toBeGreaterThan(0);
  });

  it('gives up with DirectoryUnavailable once startupTimeoutMs has passed with the directory still unreachable', async () => {
    const port = await freePort();
    const t0 = Date.now();
    const err = await Router.create(testConfig(), { directoryDsn: dsnVia(port), listen: false, startupTimeoutMs: 1200 }).catch((e) => e);
    expect(err).toBeInstanceOf(ShardctlError);
    expect(err.type).toBe('DirectoryUnavailable');
    expect(err.message).toMatch(/ECONNREFUSED|connect/i);
    // It did wait for the window (more than one attempt), not give up at the first refusal.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1000);
  });

  it('does not retry a failure that is not about reaching the directory: a wrong password is thrown at the first attempt', async () => {
    const port = await freePort();
    const fwd = forwarder(port);
    await fwd.start();
    closers.push(() => fwd.stop());
    const err = await Router.create(testConfig(), { directoryDsn: dsnVia(port, 'not-the-password'), listen: false, startupTimeoutMs: 15_000 }).catch((e) => e);
    expect(err).toBeInstanceOf(ShardctlError);
    expect(err.type).toBe('DirectoryUnavailable');
    expect(err.message).toMatch(/password/i);
    // One connection, one attempt: the bad password was not tried again for 15 s.
    expect(fwd.accepted).toBe(1);
  });
});
