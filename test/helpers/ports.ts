// Free local ports for tests that start servers of their own (a second dev stack, a TCP forwarder).
import net from 'node:net';

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
