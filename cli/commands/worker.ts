// `shardctl worker`: runs the Temporal worker (workflows + activities) until SIGINT/SIGTERM; a
// directory or Temporal not up yet is waited for (worker/wait.ts), a signal ends the wait. Logs
// are JSON lines on stdout (SHARDCTL_LOG_LEVEL, default info), human lines when stdout is a
// terminal (SHARDCTL_LOG_FORMAT=json|pretty decides otherwise); with --metrics-addr (or
// SHARDCTL_METRICS_ADDR / observability.metricsAddr) it serves Prometheus metrics on GET /metrics.
import { Command } from 'commander';
import { configPath, projectRoot } from '../../lib/config';
import { configOf } from '../run';
import type { StartedWorker } from '../../worker';
import { untilReachable } from '../../worker/wait';
import { ensureDirectory } from '../../lib/directory/ensure';
import { dsnHost } from '../../lib/directory/db';
import { registerWorker } from '../../lib/dev/workers';
import { createLogger, logFormatFrom, logLevelFrom } from '../../lib/obs/log';
import { createMetrics, parseListenAddr } from '../../lib/obs/metrics';
import { invalidInput } from '../../lib/errors';
import path from 'node:path';
import { examples } from '../help';

/**
 * How long a signalled worker may take to stop. On shutdown the SDK tells Temporal the worker is
 * leaving (its shutdown_worker call, bounded at 30 s by the SDK); through a partition that waits
 * the whole 30 s (measured: exit 30.1 s after SIGTERM with Temporal blackholed). Nothing of ours
 * needs that call: a worker may be killed at any instant (DESIGN.md §1), so past this bound it exits.
 */
export const STOP_BOUND_MS = 10_000;

export function register(program: Command) {
  const worker = program
    .command('worker')
    .description('run a Temporal worker for moves (JSON logs on stdout, human lines on a terminal; Prometheus metrics with --metrics-addr)')
    .option('--task-queue <q>', 'task queue (default from config)')
    .option('--metrics-addr <[host]:port>', 'serve GET /metrics here, e.g. :9464 (default $SHARDCTL_METRICS_ADDR or observability.metricsAddr; none if unset)')
    .action(async (o) => {
      const config = configOf(program)();
      const metricsAddr: string | undefined = o.metricsAddr ?? config.observability.metricsAddr;
      if (metricsAddr) {
        try {
          parseListenAddr(metricsAddr);
        } catch (e) {
          throw invalidInput((e as Error).message);
        }
      }
      let level, format;
      try {
        level = logLevelFrom(process.env.SHARDCTL_LOG_LEVEL, 'info');
        format = logFormatFrom(process.env.SHARDCTL_LOG_FORMAT, !!process.stdout.isTTY);
      } catch (e) {
        throw invalidInput((e as Error).message);
      }
      const taskQueue: string = o.taskQueue ?? config.temporal.taskQueue;
      const log = createLogger(config, { level, format, base: { taskQueue } });
      // Loaded here, not at the top: the Temporal worker (and its native bridge) takes about 1.5 s of
      // CPU to load, which every other verb of the CLI would pay.
      // require, not import(): the CLI runs TypeScript through tsx's CommonJS hook, and a dynamic
      // import() of a local .ts module goes to Node's ESM loader, which cannot load it.
      /* eslint-disable @typescript-eslint/no-require-imports */
      const { startWorker } = require('../../worker') as typeof import('../../worker');
      const { createDeps } = require('../../activities/deps') as typeof import('../../activities/deps');
      const { faultHookFromEnv } = require('../../worker/faults') as typeof import('../../worker/faults');
      /* eslint-enable @typescript-eslint/no-require-imports */
      const metrics = createMetrics();
      const deps = createDeps(config, { faultPoint: faultHookFromEnv(), metrics });
      // Listed by `dev status` and stopped by `dev down` of this checkout's stack until it exits, waiting or polling.
      registerWorker(path.join(projectRoot(), '.dev'), { taskQueue, temporalAddress: config.temporal.address });
      const stopping = new AbortController();
      let w: StartedWorker | undefined;
      const stop = () => {
        log.info('worker stopping');
        stopping.abort();
        if (w) void w.shutdown();
        setTimeout(() => {
          log.warn({ boundMs: STOP_BOUND_MS }, 'worker did not stop within its bound after the signal (Temporal unreachable?); exiting now');
          log.flush();
          process.exit(0);
        }, STOP_BOUND_MS).unref();
      };
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      const wait = { log, signal: stopping.signal, say: (line: string) => process.stderr.write(`worker: ${line}\n`) };
      // The directory's schema is the worker's contract with the CLI: bring it up to date first.
      const migrated = await untilReachable('directory', dsnHost(config.directory.dsn), () => ensureDirectory(deps.directoryPool(), config), wait);
      if (migrated)
        w = await untilReachable(
          'Temporal',
          config.temporal.address,
          () => startWorker(config, { taskQueue, deps, log, metricsAddr, configFile: configPath(program.opts().config) }),
          wait,
        );
      if (!w || stopping.signal.aborted) {
        // Told to stop while waiting (or while the worker was being created): nothing ran.
        await w?.shutdown();
        if (!w) await deps.close();
        log.flush();
        return;
      }
      log.info(
        {
          temporal: config.temporal.address,
          namespace: config.temporal.namespace,
          directory: dsnHost(config.directory.dsn),
          shards: config.shards.map((s) => ({ name: s.name, host: dsnHost(s.dsn), bucket: s.bucket })),
          metrics: w.metricsServer?.url ?? null,
        },
        'worker polling',
      );
      process.stderr.write(`worker: polling ${taskQueue} on ${config.temporal.address} (pid ${process.pid})\n`);
      await w.run;
      await w.shutdown();
      log.flush();
    });
  examples(worker, 'worker', 'worker --task-queue shardctl-moves-canary', 'worker --metrics-addr :9464', 'SHARDCTL_LOG_LEVEL=debug worker | jq .');
}
