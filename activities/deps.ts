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
}

export function createDeps(config: Config, opts: { faultPoint?: (name: string) => Promise<void>; metrics?: Metrics } = {}): Deps {
  // application_name marks shardctl's own data-plane sessions (see lib/shard/write-audit.ts).
  const conns = createConnections(config, { applicationName: 'shardctl-worker', max: 10 });
  return { ...conns, config, faultPoint: opts.faultPoint ?? (async () => {}), metrics: opts.metrics };
}
