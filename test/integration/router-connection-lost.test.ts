// A connection that breaks inside a router transaction before its COMMIT was sent (issue 14: a
// bystander's write under 1 % connection resets reached its caller as `read ECONNRESET`): the
// server rolled the transaction back, so the router runs fn again on a new connection within the
// call's deadline; the write commits once. Real shard, the break made by pg_terminate_backend of
// the transaction's own backend.
import { describe, it, expect, afterAll } from 'vitest';
import { testConfig, shardPool, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { Router } from '../../lib/router';

afterAll(async () => {
  await closePools();
});

describe('router: a connection lost before commit', () => {
  it('runs fn again on a new connection and commits the write once', async () => {
    const tenant = await H.newTenant('shard-a', 'rcl');
    const router = await Router.create(testConfig(), { snapshotTtlMs: 60_000 });
    try {
      const pids: number[] = [];
      const kind = `lost-${Date.now()}`;
      await router.withTenant(tenant, { tenants: [tenant] }, 'write', async (tx) => {
        const pid = (await tx.query('select pg_backend_pid() as pid')).rows[0].pid as number;
        pids.push(pid);
        await tx.query(`insert into public.events(tenant_id, kind) values ($1, $2)`, [tenant, kind]);
        // The first attempt's backend is terminated under it, after its insert, before COMMIT.
        if (pids.length === 1) {
          await shardPool('shard-a').query('select pg_terminate_backend($1)', [pid]);
          await tx.query('select 1');
        }
      });
      expect(pids).toHaveLength(2);
      expect(pids[1]).not.toBe(pids[0]);
      expect(router.metrics().connectRetries).toBe(1);
      const n = await shardPool('shard-a').query('select count(*)::int as n from public.events where tenant_id = $1 and kind = $2', [tenant, kind]);
      expect(n.rows[0].n).toBe(1);
    } finally {
      await router.close();
    }
  });

  it('gives up at the deadline with the reason when every attempt loses its connection, and nothing commits', async () => {
    const tenant = await H.newTenant('shard-a', 'rcl');
    const router = await Router.create(testConfig(), { snapshotTtlMs: 60_000 });
    try {
      let attempts = 0;
      const kind = `lost-all-${Date.now()}`;
      const err = await router
        .withTenant(
          tenant,
          { tenants: [tenant] },
          'write',
          async (tx) => {
            attempts++;
            const pid = (await tx.query('select pg_backend_pid() as pid')).rows[0].pid as number;
            await tx.query(`insert into public.events(tenant_id, kind) values ($1, $2)`, [tenant, kind]);
            await shardPool('shard-a').query('select pg_terminate_backend($1)', [pid]);
            await tx.query('select 1');
          },
          { deadlineMs: 1500 },
        )
        .catch((e: unknown) => e);
      expect(err).toMatchObject({ type: 'Unavailable' });
      expect(String((err as Error).message)).toMatch(/broke before commit/);
      expect(attempts).toBeGreaterThan(1);
      const n = await shardPool('shard-a').query('select count(*)::int as n from public.events where tenant_id = $1 and kind = $2', [tenant, kind]);
      expect(n.rows[0].n).toBe(0);
    } finally {
      await router.close();
    }
  });
});
