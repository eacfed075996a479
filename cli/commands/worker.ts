// `shardctl worker`: runs the Temporal worker (workflows + activities) until SIGINT/SIGTERM.
import { Command } from 'commander';
import { loadConfig, projectRoot } from '../../lib/config';
import { startWorker } from '../../worker';
import { createDeps } from '../../activities/deps';
import { faultHookFromEnv } from '../../worker/faults';
import { ensureDirectory } from '../../lib/directory/ensure';
import { registerWorker } from '../../lib/dev/workers';
import path from 'node:path';
import { examples } from '../help';

export function register(program: Command) {
  const worker = program
    .command('worker')
    .description('run a Temporal worker for moves')
    .option('--task-queue <q>', 'task queue (default from config)')
    .action(async (o) => {
      const config = loadConfig({ file: program.opts().config });
      const deps = createDeps(config, { faultPoint: faultHookFromEnv() });
      // The directory's schema is the worker's contract with the CLI: bring it up to date first.
      await ensureDirectory(deps.directoryPool(), config);
      const w = await startWorker(config, { taskQueue: o.taskQueue, deps });
      // Listed by `dev status` and stopped by `dev down` of this checkout's stack until it exits.
      registerWorker(path.join(projectRoot(), '.dev'), { taskQueue: o.taskQueue ?? config.temporal.taskQueue, temporalAddress: config.temporal.address });
      process.stderr.write(`worker: polling ${o.taskQueue ?? config.temporal.taskQueue} on ${config.temporal.address} (pid ${process.pid})\n`);
      const stop = () => void w.shutdown();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
      await w.run;
      await w.shutdown();
    });
  examples(worker, 'worker', 'worker --task-queue shardctl-moves-canary');
}
