// A `shardctl worker` signalled while its link to Temporal is partitioned stops within its bound
// (cli/commands/worker.ts STOP_BOUND_MS) instead of waiting out the SDK's 30 s shutdown call to
// the unreachable server. A real worker process, toxiproxy between it and Temporal.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import * as C from '../helpers/crash';
import { NetLab } from '../helpers/proxy';
import { uniq } from '../helpers/stack';
import { buildWorkflowBundle } from '../../worker';
import { STOP_BOUND_MS } from '../../cli/commands/worker';
import { sleep } from '../../lib/dev/proc';

let lab: NetLab;
// Installing toxiproxy on a cold Go module cache takes minutes (lib/dev/toxiproxy.ts).
beforeAll(async () => {
  lab = await NetLab.start(path.join(C.ARTIFACTS, 'worker-stop'));
  await buildWorkflowBundle(C.BUNDLE);
}, 600_000);
afterAll(async () => {
  await C.stopStragglers();
  await lab?.close({ stopServer: true });
});

describe('shardctl worker stops on SIGTERM', () => {
  it('within its bound while Temporal is blackholed (before: 30 s, the SDK waiting on its shutdown call)', { timeout: 120_000 }, async () => {
    const tq = uniq('stop');
    const net = await lab.configFor(`stop-${tq}`, ['temporal']);
    const w = C.spawnWorker(tq, { env: { SHARDCTL_CONFIG: net.file } });
    try {
      await w.ready;
      await net.links.temporal.blackhole();
      await sleep(2000); // its polls are now stuck in the partition
      const t0 = Date.now();
      w.proc.kill('SIGTERM');
      const r = await Promise.race([w.exited, sleep(40_000).then(() => 'still running 40 s after SIGTERM' as const)]);
      const tookMs = Date.now() - t0;
      expect(r).toEqual({ code: 0, signal: null });
      expect(tookMs, 'ms from SIGTERM to exit').toBeLessThan(STOP_BOUND_MS + 3000);
      // The bound is what ended it: the log says so.
      expect(fs.readFileSync(w.log, 'utf8')).toContain('worker did not stop within its bound after the signal');
    } finally {
      await lab.healAll();
      if (w.proc.exitCode === null && w.proc.signalCode === null) w.proc.kill('SIGKILL');
    }
  });
});
