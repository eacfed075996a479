// The rebalancer end to end on the real stack: three heavy tenants on one shard, `rebalance
// start` with concurrency 2 under light live writes, ends with one per shard, every tenant's rows
// intact on its new owner (loadgen verify), nothing frozen, no slot or publication left.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import path from 'node:path';
import fs from 'node:fs';
import { testConfig, closePools, directoryPool, shardPool, uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';
import { Router } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { createTenant } from '../../lib/tenants';
import { startLoadgen } from '../../lib/loadgen';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import type { RebalanceStatus } from '../../workflows/rebalance-messages';

let env: Awaited<ReturnType<typeof H.moveEnv>>;

beforeAll(async () => {
  env = await H.moveEnv('rebal');
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

describe('rebalance, end to end', () => {
  it(
    'spreads three tenants from one shard over three (max 2 at once, the default one move out of a shard at a time) under live writes, losing nothing',
    { timeout: 400_000 },
    async () => {
      const config = testConfig();
      const tenants: string[] = [];
      for (let i = 0; i < 3; i++) {
        const tenant = uniq(`rb${i}`);
        // Heavy enough that the fleet's other tenants (load 1 each) do not change the plan.
        await createTenant({ directory: directoryPool(), shardPool, config }, { tenant, shard: 'shard-a', expectedLoad: 100, actor: 'test' });
        await H.seed(tenant, 200, 2);
        tenants.push(tenant);
      }
      const baselines = await Promise.all(tenants.map((x) => C.baselineOf(x)));

      const router = await Router.create(config);
      const deps = createDeps(config);
      const logFile = path.join('test-results', `rebalance-${tenants[0]}.jsonl`);
      fs.mkdirSync('test-results', { recursive: true });
      const lg = startLoadgen({ config, router, s3For: (s) => deps.s3For(s), tenants, rate: 30, durationMs: 300_000, logFile, concurrency: 3 });
      let st: RebalanceStatus;
      try {
        await new Promise((r) => setTimeout(r, 1500));
        const input = rebalanceInputFor(config, { scope: { kind: 'rebalance' }, requestedBy: 'test', maxConcurrent: 2, soakSeconds: 2, units: tenants });
        const h = await startRebalance(env.t.client, env.tq, input);
        st = await h.result();
        lg.stop();
        const stats = await lg.done;
        expect(stats.writes.ack).toBeGreaterThan(20);
        expect({ mismatches: stats.readMismatches, failed: stats.reads.failed, unknown: stats.writes.unknown }).toEqual({
          mismatches: 0,
          failed: 0,
          unknown: 0,
        });
      } finally {
        lg.stop();
        await lg.done.catch(() => {});
        await router.close();
        await deps.close();
      }

      // Every move succeeded. The fleet-wide verdict depends on the other suites' tenants on this
      // shared stack (hundreds, placed unevenly): when moving only these three cannot bring every
      // shard within tolerance, the run ends failed with that one problem and nothing else.
      expect(st.lastError, JSON.stringify(st.problems)).toBe('');
      // Likewise shard-a's headroom: with only these three movable (units), the other suites' tenants keep it over.
      expect(st.problems.filter((p) => !p.startsWith('the fleet stays outside') && !/^shard-a stays over its headroom .*outside the run/.test(p))).toEqual([]);
      expect(st.phase, JSON.stringify(st.problems)).toBe(st.problems.length ? 'failed' : 'done');
      expect(st.plans).toBe(1);
      // The plan balances the whole fleet, and the stack holds other suites' tenants (load 1 each,
      // a few hundred, placed by those suites): two or all three of these heavy ones move off shard-a.
      expect(st.moves.length).toBeGreaterThanOrEqual(2);
      expect(st.moves.length).toBeLessThanOrEqual(3);
      expect(st.moves.every((m) => m.state === 'done' && m.from === 'shard-a' && m.to !== 'shard-a')).toBe(true);
      expect(new Set(st.moves.map((m) => m.unit)).size).toBe(st.moves.length); // none moved twice

      // Balanced: one tenant per shard, each active at epoch 2 if it moved, writable on its owner.
      const owners = new Map<string, string>();
      for (const t of tenants) {
        const p = await H.placement(t);
        const moved = st.moves.find((m) => m.unit === t);
        expect(p).toMatchObject({ shard: moved ? moved.to : 'shard-a', epoch: moved ? 2 : 1, state: 'active', moveId: null });
        owners.set(t, p!.shard);
        // Not frozen: a write at the current epoch commits on the owner.
        expect(await H.tryWrite(p!.shard, t, p!.epoch), t).toBe('ok');
        if (moved) {
          expect(await H.tryWrite('shard-a', t, 2), `${t} refused on its old owner`).toBe('SC421');
          expect(await C.leftoversOn('shard-a', t, [`${t}.e1`]), `${t} retired on shard-a`).toEqual([]);
        }
        // No slot or publication of its moves left on any shard.
        expect(await H.replicationLeftovers(`${t}.e1`), t).toEqual([]);
      }
      expect(new Set(owners.values()).size).toBeGreaterThanOrEqual(2);

      // Every seeded and acknowledged row and object of each tenant on its owner, nothing else.
      const report = await C.expectLogVerified({ logFile, config, baselines });
      for (const t of tenants) expect(Object.values(report.ownerRows[t]).reduce((n, x) => n + x, 0)).toBe(await H.rowCount(owners.get(t)!, t));
    },
  );
});
