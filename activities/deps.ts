// The dependencies activities are built from: config, the fleet's connections (lib/connections)
// and the fault hook. Workers resolve shard connections from config; workflows only name shards.
import type { Config } from '../lib/config';
import { createConnections, type Connections } from '../lib/connections';
import type { Metrics } from '../lib/obs/metrics';

export interface Deps extends Connections {
  config: Config;
  /** Fault hook: called at named fault points; the crash suite makes it SIGKILL the worker. */
  faultPoint(name: string): Promise<void>;
  /** The worker's metrics (lib/obs/metrics.ts); absent in direct calls (tests, the CLI's dry run). */
  metrics?: Metrics;
  /**
   * Pools for the cutover's frozen window: every statement bounded by
   * `limits.frozenWindowQueryTimeoutMs` (client and server side), connects bounded too, TCP
   * keepalive on, so a blackholed link fails the step well inside the freeze's lease.
   */
  frozenWindow: Pick<Connections, 'shardPool' | 'directoryPool'>;
  /**
   * Re-reads the worker's config file for shards added since it started (returns their names);
   * absent when the config did not come from a file the worker watches (lib/config-reload.ts).
   */
  learnShards?: () => string[];
}

export function createDeps(config: Config, opts: { faultPoint?: (name: string) => Promise<void>; metrics?: Metrics } = {}): Deps {
  // application_name names shardctl's own data-plane sessions; each registers itself before it writes in the replica role (lib/shard/write-audit.ts).
  const conns = createConnections(config, { applicationName: 'shardctl-worker', max: 10 });
  const q = config.limits.frozenWindowQueryTimeoutMs;
  const bounded = createConnections(config, {
    applicationName: 'shardctl-worker',
    max: 4,
    queryTimeoutMs: q,
    statementTimeoutMs: q,
    connectionTimeoutMillis: q,
    keepAliveInitialDelayMs: 1000,
  });
  return {
    ...conns,
    async close() {
      await Promise.all([conns.close(), bounded.close()]);
    },
    config,
    faultPoint: opts.faultPoint ?? (async () => {}),
    metrics: opts.metrics,
    frozenWindow: { shardPool: bounded.shardPool, directoryPool: bounded.directoryPool },
  };
}
