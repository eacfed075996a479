// Creates the Temporal worker: workflows from workflows/, activities from the factory, every
// activity instrumented (worker/instrument.ts: JSON logs with the move's context, metrics), and,
// with a metrics address, the Prometheus endpoint (lib/obs/metrics.ts).
import path from 'node:path';
import { NativeConnection, Worker, Runtime } from '@temporalio/worker';
import type { LogLevel as TemporalLevel } from '@temporalio/common';
import fs from 'node:fs';
import net from 'node:net';
import { Config, shardByName } from '../lib/config';
import { startBlobCollector } from '../lib/blobs/gc-loop';
import { createActivities } from '../activities';
import { createDeps, Deps } from '../activities/deps';
import { temporalConnectionOptions } from '../lib/temporal-client';
import { createLogger, logFormatFrom, logLevelFrom, type Logger } from '../lib/obs/log';
import { createMetrics, serveMetrics, type Metrics, type MetricsServer } from '../lib/obs/metrics';
import { activityInterceptor, temporalLogger } from './instrument';
import { movesByPhaseRefresher } from './moves-gauge';
import { slotRetentionRefresher } from './slots-gauge';
import { learnAddedShards, watchConfigShards } from '../lib/config-reload';

let runtimeInstalled = false;
let runtimeLog: Logger | undefined;
/** The Temporal SDK's own Prometheus exporter (loopback), when this process's runtime has one. */
let sdkMetricsUrl: string | undefined;

/** A free loopback port, asked of the kernel (the SDK's exporter binds it right after). */
async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * The SDK's runtime, once per process: its log lines into ours and, when this worker serves
 * metrics, its own Prometheus exporter on a loopback port whose page our /metrics appends (one
 * endpoint to scrape). Only the first worker of a process decides (the runtime is global).
 */
async function installRuntime(log: Logger, withSdkMetrics: boolean) {
  runtimeLog = log;
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  const sdkLevel = ((process.env.SHARDCTL_WORKER_LOG ?? '').toUpperCase() || 'WARN') as TemporalLevel;
  const port = withSdkMetrics ? await freeLoopbackPort() : undefined;
  try {
    Runtime.install({
      logger: temporalLogger(() => runtimeLog, sdkLevel),
      ...(port ? { telemetryOptions: { metrics: { prometheus: { bindAddress: `127.0.0.1:${port}`, countersTotalSuffix: true } } } } : {}),
    });
    if (port) sdkMetricsUrl = `http://127.0.0.1:${port}/metrics`;
  } catch {
    /* already installed in this process */
  }
}

/** The SDK exporter's page, or a comment saying why not (a scrape never fails for it). */
async function sdkMetricsText(): Promise<string> {
  if (!sdkMetricsUrl) return '';
  try {
    const r = await fetch(sdkMetricsUrl, { signal: AbortSignal.timeout(2000) });
    return r.ok ? await r.text() : `# temporal sdk metrics unavailable: HTTP ${r.status}\n`;
  } catch (e) {
    return `# temporal sdk metrics unavailable: ${String((e as Error)?.message ?? e).split('\n')[0]}\n`;
  }
}

export async function connectTemporal(config: Config): Promise<NativeConnection> {
  return NativeConnection.connect(temporalConnectionOptions(config));
}

export interface StartedWorker {
  worker: Worker;
  deps: Deps;
  log: Logger;
  metrics: Metrics;
  /** The Prometheus endpoint, when a metrics address was given. */
  metricsServer?: MetricsServer;
  run: Promise<void>;
  shutdown(): Promise<void>;
}

export interface WorkerOptions {
  taskQueue?: string;
  deps?: Deps;
  /** Where the JSON logs go; default stdout at SHARDCTL_LOG_LEVEL (default `error` here, `info` for `shardctl worker`). */
  log?: Logger;
  /** `[host]:port` for GET /metrics; default config.observability.metricsAddr, else no endpoint. */
  metricsAddr?: string;
  /** How long the moves-by-phase counts from Temporal visibility are reused (default 5 s). */
  visibilityCacheMs?: number;
  /** The file `config` was loaded from: polled, so shards added to it are learned without a restart (lib/config-reload.ts). */
  configFile?: string;
  /** The environment the file's `dsnEnv` variables resolve in (default this process's). */
  configEnv?: NodeJS.ProcessEnv;
}

export async function startWorker(config: Config, opts: WorkerOptions = {}): Promise<StartedWorker> {
  const taskQueue = opts.taskQueue ?? config.temporal.taskQueue;
  const log =
    opts.log ??
    createLogger(config, {
      level: logLevelFrom(process.env.SHARDCTL_LOG_LEVEL, 'error'),
      format: logFormatFrom(process.env.SHARDCTL_LOG_FORMAT, !!process.stdout.isTTY),
      base: { taskQueue },
    });
  const addr = opts.metricsAddr ?? config.observability.metricsAddr;
  await installRuntime(log, !!addr);
  const metrics = opts.deps?.metrics ?? createMetrics();
  const connection = await connectTemporal(config);
  const deps = opts.deps ?? createDeps(config, { metrics });
  deps.metrics ??= metrics;
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
    taskQueue,
    ...workflowSource,
    activities: createActivities(deps),
    interceptors: { activity: [activityInterceptor(log, deps.metrics)] },
  });
  let metricsServer: MetricsServer | undefined;
  let refresher: ReturnType<typeof movesByPhaseRefresher> | undefined;
  if (addr) {
    const moves = (refresher = movesByPhaseRefresher(config, deps.metrics!, { cacheMs: opts.visibilityCacheMs }));
    const slots = slotRetentionRefresher(config, (s) => deps.shardPool(s), deps.metrics!);
    const beforeScrape = async () => {
      await Promise.all([moves.refresh(), slots.refresh()]);
    };
    metricsServer = await serveMetrics(addr, deps.metrics!, beforeScrape, sdkMetricsText).catch(async (e) => {
      await connection.close();
      throw e;
    });
    log.info({ url: metricsServer.url }, 'metrics endpoint listening');
  }
  const shardWatch = opts.configFile ? watchConfigShards(config, opts.configFile, log, { env: opts.configEnv }) : undefined;
  if (opts.configFile) deps.learnShards = () => learnAddedShards(config, opts.configFile!, opts.configEnv).added;
  // The blob collector (issue 15): superseded and unreferenced versions go without an operator.
  const collector =
    config.limits.blobGcIntervalMs > 0
      ? startBlobCollector(
          {
            tenantColumn: config.tenant.column,
            datasets: config.datasets,
            directoryPool: () => deps.directoryPool(),
            shardPool: (s) => deps.shardPool(s),
            bucketOf: (s) => ({ shard: s, s3: deps.s3For(s), bucket: shardByName(config, s).bucket }),
          },
          { intervalMs: config.limits.blobGcIntervalMs, graceMs: config.limits.blobGcGraceMs, log },
        )
      : undefined;
  const run = worker.run();
  // Idempotent: a signal handler and the end of `run` may both ask for it.
  let stopping: Promise<void> | undefined;
  const shutdown = () =>
    (stopping ??= (async () => {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await run.catch(() => {});
      shardWatch?.stop();
      await collector?.stop();
      await metricsServer?.close();
      await refresher?.close();
      await deps.close();
      await connection.close();
    })());
  return {
    worker,
    deps,
    log,
    metrics: deps.metrics!,
    metricsServer,
    run,
    shutdown,
  };
}

/** Builds the workflow bundle once, for workers started with SHARDCTL_WORKFLOW_BUNDLE. */
export async function buildWorkflowBundle(outFile: string): Promise<string> {
  const { bundleWorkflowCode, DefaultLogger } = await import('@temporalio/worker');
  const { code } = await bundleWorkflowCode({ workflowsPath: path.join(__dirname, '..', 'workflows', 'index.ts'), logger: new DefaultLogger('WARN') });
  fs.mkdirSync(path.dirname(outFile), { recursive: true });
  fs.writeFileSync(outFile, code);
  return outFile;
}
