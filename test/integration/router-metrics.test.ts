// The router's Prometheus metrics count what the shards' fences refuse, on the real stack: a
// write to a frozen unit (SC423) is a frozen wait, a write under an epoch the shard has moved
// past (SC421) is a stale-route retry. Its snapshot age grows with the clock while the directory
// is cut off (toxiproxy, test/helpers/proxy.ts) and falls back once it answers again.
import { describe, it, expect, afterAll } from 'vitest';
import path from 'node:path';
import { Registry } from 'prom-client';
import { Router } from '../../lib/router';
import { registerRouterMetrics } from '../../lib/obs/router-metrics';
import { freezeSource, unfreeze, setUnitFence } from '../../lib/shard/fence';
import { testConfig, shardPool, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { NetLab } from '../helpers/proxy';

let lab: NetLab | undefined;
afterAll(async () => {
  await lab?.close({ stopServer: true });
  await closePools();
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const value = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);

describe('router metrics', () => {
  it('count frozen waits and stale-route retries as the fences refuse writes', async () => {
    await H.prepareStack();
    const tenant = await H.newTenant('shard-a', 'rtm');
    const router = await Router.create(testConfig());
    const registry = new Registry();
    registerRouterMetrics(registry, router);
    const write = () =>
      router.withTenant(tenant, { tenants: '*' }, 'write', (tx) => tx.query(`insert into public.events(tenant_id, kind) values ($1, 'probe')`, [tenant]), {
        deadlineMs: 400,
        retryBudget: 2,
      });
    try {
      await write();
      const before = await registry.metrics();
      expect(value(before, 'shardctl_router_frozen_waits_total')).toBe(0);
      expect(value(before, 'shardctl_router_directory_reachable')).toBe(1);

      await freezeSource(shardPool('shard-a'), tenant, 1);
      await expect(write()).rejects.toMatchObject({ type: 'Frozen' });
      const frozen = await registry.metrics();
      expect(value(frozen, 'shardctl_router_frozen_waits_total')).toBeGreaterThan(0);
      expect(value(frozen, 'shardctl_router_stale_route_retries_total')).toBe(0);

      await unfreeze(shardPool('shard-a'), tenant, 1);
      await setUnitFence(shardPool('shard-a'), { unit: tenant, epoch: 2, owned: true, frozen: false });
      await expect(write()).rejects.toMatchObject({ type: 'StaleRoute' });
      const stale = await registry.metrics();
      expect(value(stale, 'shardctl_router_stale_route_retries_total')).toBeGreaterThan(0);
      expect(value(stale, 'shardctl_router_transactions_total')).toBeGreaterThan(value(frozen, 'shardctl_router_transactions_total'));
    } finally {
      await router.close();
    }
  });

  it('report a snapshot age that grows with the clock while the directory is unreachable, and falls back once it answers', { timeout: 60_000 }, async () => {
    await H.prepareStack();
    lab = await NetLab.start(path.join(__dirname, '..', '..', 'test-results', 'network', 'router-metrics'));
    const { config, links } = await lab.configFor('router', ['directory']);
    const TTL_MS = 200;
    const router = await Router.create(config, { snapshotTtlMs: TTL_MS, connectTimeoutMs: 500 });
    const registry = new Registry();
    registerRouterMetrics(registry, router);
    const age = async () => value(await registry.metrics(), 'shardctl_router_snapshot_age_seconds');
    try {
      // Reachable: each TTL probe freshens the snapshot, so its age stays within a few TTLs.
      await sleep(4 * TTL_MS);
      expect(await age()).toBeGreaterThanOrEqual(0);
      expect(await age()).toBeLessThan(1);

      await links.directory.down();
      const cut = Date.now();
      await sleep(1500);
      const first = await registry.metrics();
      // Nothing freshened it since the cut: the age is at least the time since then (a probe in flight at the cut may have landed just after it).
      expect(value(first, 'shardctl_router_snapshot_age_seconds')).toBeGreaterThanOrEqual((Date.now() - cut - 300) / 1000);
      expect(value(first, 'shardctl_router_directory_reachable')).toBe(0);
      expect(value(first, 'shardctl_router_refresh_failures_total')).toBeGreaterThan(0);
      await sleep(1000);
      expect(await age()).toBeGreaterThanOrEqual(value(first, 'shardctl_router_snapshot_age_seconds') + 0.9);

      await links.directory.heal();
      let healed = Infinity;
      for (const until = Date.now() + 15_000; healed >= 1 && Date.now() < until; await sleep(100)) healed = await age();
      expect(healed).toBeLessThan(1);
      expect(value(await registry.metrics(), 'shardctl_router_directory_reachable')).toBe(1);
    } finally {
      await links.directory.heal().catch(() => {});
      await router.close();
    }
  });
});
