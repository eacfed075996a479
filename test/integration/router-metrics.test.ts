// The router's Prometheus metrics count what the shards' fences refuse, on the real stack: a
// write to a frozen unit (SC423) is a frozen wait, a write under an epoch the shard has moved
// past (SC421) is a stale-route retry.
import { describe, it, expect, afterAll } from 'vitest';
import { Registry } from 'prom-client';
import { Router } from '../../lib/router';
import { registerRouterMetrics } from '../../lib/obs/router-metrics';
import { freezeSource, unfreeze, setUnitFence } from '../../lib/shard/fence';
import { testConfig, shardPool, closePools } from '../helpers/stack';
import * as H from '../helpers/move';

afterAll(closePools);

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
});
