// Creates the Temporal worker: workflows from workflows/, activities from the factory.
import path from 'node:path';
import { NativeConnection, Worker, Runtime, DefaultLogger } from '@temporalio/worker';
import fs from 'node:fs';
import { Config } from '../lib/config';
import { createActivities } from '../activities';
import { createDeps, Deps } from '../activities/deps';
import { temporalConnectionOptions } from '../lib/temporal-client';

let runtimeInstalled = false;
function quietRuntime() {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    Runtime.install({ logger: new DefaultLogger((process.env.SHARDCTL_WORKER_LOG as any) || 'WARN') });
  } catch {
    /* already installed in this process */
  }
}

export async function connectTemporal(config: Config): Promise<NativeConnection> {
  return NativeConnection.connect(temporalConnectionOptions(config));
}

export interface StartedWorker {
  worker: Worker;
  deps: Deps;
  run: Promise<void>;
  shutdown(): Promise<void>;
}

export async function startWorker(config: Config, opts: { taskQueue?: string; deps?: Deps } = {}): Promise<StartedWorker> {
  quietRuntime();
  const connection = await connectTemporal(config);
  const deps = opts.deps ?? createDeps(config);
  // A prebuilt bundle (SHARDCTL_WORKFLOW_BUNDLE) skips the per-start webpack build; the crash
  // suite starts dozens of workers.
  const bundlePath = process.env.SHARDCTL_WORKFLOW_BUNDLE;
  const workflowSource =
    bundlePath && fs.existsSync(bundlePath)
      ? { workflowBundle: { codePath: bundlePath } }
      : { workflowsPath: path.join(__dirname, '..', 'workflows', 'index.ts') };
  const worker = await Worker.create({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: opts.taskQueue ?? config.temporal.taskQueue,
    ...workflowSource,
    activities: createActivities(deps),
  });
  const run = worker.run();
  return {
    worker,
    deps,
    run,
    async shutdown() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await run.catch(() => {});
      await deps.close();
      await connection.close();
    },
  };
}

/** Builds the workflow bundle once, for workers started with SHARDCTL_WORKFLOW_BUNDLE. */
export async function buildWorkflowBundle(outFile: string): Promise<string> {
  const { bundleWorkflowCode } = await import('@temporalio/worker');
  const { code } = await bundleWorkflowCode({ workflowsPath: path.join(__dirname, '..', 'workflows', 'index.ts'), logger: new DefaultLogger('WARN') });
  fs.mkdirSync(path.dirname(outFile), { recursive: true });
  fs.writeFileSync(outFile, code);
  return outFile;
}
