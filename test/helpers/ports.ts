// Free local ports for tests that start servers of their own (a second dev stack, a TCP forwarder).
import net from 'node:net';
import type { Stack } from '../../lib/dev/stack';

/** A port nothing listens on now (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** The first port from `from` (stepping 10) with `n` consecutive ports free now and none in `taken`; marks them taken. */
export async function freeRun(from: number, n: number, taken: Set<number>): Promise<number> {
  const free = (port: number) =>
    new Promise<boolean>((resolve) => {
      const srv = net.createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
  for (let base = from; base + n < 65536; base += 10) {
    const run = Array.from({ length: n }, (_, i) => base + i);
    if (run.some((p) => taken.has(p))) continue;
    if ((await Promise.all(run.map(free))).every(Boolean)) {
      run.forEach((p) => taken.add(p));
      return base;
    }
  }
  throw new Error(`no ${n} free ports from ${from}`);
}

/** The ports this checkout's own dev stack uses (plus `toxiproxyRun` ports from its toxiproxy's): a second stack must take none of them. */
export function stackPorts(ports: Stack['ports'], toxiproxyRun = 1): Set<number> {
  return new Set<number>([
    ...Object.values(ports.pg),
    ports.temporal,
    ports.temporalUi,
    ports.temporalHttp,
    ports.temporalMetrics,
    ports.s3,
    ...Array.from({ length: toxiproxyRun }, (_, i) => ports.toxiproxy + i),
  ]);
}
