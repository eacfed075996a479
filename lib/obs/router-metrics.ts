// Prometheus metrics of a router (lib/router): what the fences refuse, seen where the refusals
// land — stale-route retries (SC421), frozen waits (SC423), serialization retries — plus the
// directory snapshot's age and reachability. Read from `router.metrics()` at scrape time. An
// application that embeds the router registers them on its own registry and serves them itself.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { RouterMetrics } from '../router/router';

export function registerRouterMetrics(registry: Registry, router: { metrics(): RouterMetrics }): void {
  const registers = [registry];
  const counter = (name: string, help: string, read: (m: RouterMetrics) => number) =>
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset();
        this.inc(read(router.metrics()));
      },
    });
  const gauge = (name: string, help: string, read: (m: RouterMetrics) => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read(router.metrics()));
      },
    });
  counter('shardctl_router_transactions_total', 'Tenant transactions the router ran (each attempt counts)', (m) => m.transactions);
  counter('shardctl_router_stale_route_retries_total', 'Writes a shard refused as a stale route (SC421), retried after a refresh', (m) => m.staleRetries);
  counter('shardctl_router_frozen_waits_total', 'Writes refused because the unit was frozen for a cutover (SC423), waited out', (m) => m.frozenWaits);
  counter('shardctl_router_serialization_retries_total', 'Transactions retried after a serialization failure or deadlock', (m) => m.serializationRetries);
  counter('shardctl_router_refresh_failures_total', 'Directory snapshot refreshes that failed', (m) => m.refreshFailures);
  gauge('shardctl_router_snapshot_age_seconds', 'Age of the directory snapshot the router routes by (-1 before the first load)', (m) =>
    Number.isFinite(m.snapshotAgeMs) ? m.snapshotAgeMs / 1000 : -1,
  );
  gauge('shardctl_router_directory_reachable', '1 when the last directory read succeeded', (m) => (m.directoryReachable ? 1 : 0));
  gauge('shardctl_router_generation', 'Directory generation of the snapshot', (m) => m.generation);
}
