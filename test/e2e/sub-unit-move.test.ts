// A split tenant's sub-unit moves on its own (issue 13, "a hot tenant can be split into K
// sub-units, each movable on its own"; docs/architecture.md, "Splitting a tenant"). A tenant with
// two tables keyed by a split column is seeded on shard-a, split 4 ways, and T:1 is moved to
// shard-b under live router writes to every sub-unit (copy, catch-up with the applier dropping the
// other sub-units' changes, validate, fence, switch, soak, retire); T:2 is moved to shard-b too,
// beside T:1 (its copy, validation and the soak's reverse stream meet T:1's rows and changes there), and
// rolled back during soak. Asserts: only the moved sub-unit's rows reach the target, every
// acknowledged write of every sub-unit is where its sub-unit is, the other sub-units keep being
// written on the source throughout (no failed write), a router with a stale route is refused
// (SC421) and retries on the new owner, the target's fence knows K, and retire and the rollback's
// clean-up delete only the moved sub-unit's rows on the side that no longer owns it.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { testConfig, closePools, shardPool, directoryPool, uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import * as M from '../../workflows/messages';
import { Router } from '../../lib/router';
import { prepareAllShards } from '../../lib/shard/prepare';
import { createTenant } from '../../lib/tenants';
import { splitTenant } from '../../lib/tenant-split';
import { tenantUnitForRow } from '../../lib/buckets/route';
import { subUnitFences } from '../../lib/shard/split';
import { getUnitFence, setUnitFence } from '../../lib/shard/fence';
import { runCli, configFile } from '../helpers/cli';
import { moveInputFor } from '../../lib/moves/start';
import { previewUnitDeletion } from '../../lib/moves/deletion-preview';
import type { Connections } from '../../lib/connections';
import { startWorker } from '../../worker';
import type { Config } from '../../lib/config';

const WAYS = 4;
const schema = `su_${randomBytes(4).toString('hex')}`;
const SHARDS = ['shard-a', 'shard-b', 'shard-c'];
let config: Config;
let worker: Awaited<ReturnType<typeof startWorker>>;
let t: Awaited<ReturnType<typeof H.temporal>>;
let tq: string;
let tenant: string;
let splitEpoch: number;
const keys = Array.from({ length: 160 }, (_, i) => `k-${i}-ü${i % 7 === 0 ? '東' : ''}`);

/** Every acknowledged write, per key: the order's v (updates acked) and the lines' n. */
const acked = new Map<string, { v: number; ns: number[] }>();

const subOf = (key: string) => tenantUnitForRow(tenant, key, new Map([[tenant, WAYS]]));

beforeAll(async () => {
  await H.prepareStack();
  const base = testConfig();
  config = {
    ...base,
    tenant: {
      ...base.tenant,
      schemas: [schema],
      tables: [`${schema}.orders`, `${schema}.lines`],
      splitColumns: { [`${schema}.orders`]: 'order_key', [`${schema}.lines`]: 'order_key' },
    },
  };
  for (const s of SHARDS) {
    await shardPool(s).query(`create schema ${schema};
      create table ${schema}.orders (tenant_id text not null, order_key text not null, v int not null default 0, primary key (tenant_id, order_key));
      create table ${schema}.lines (tenant_id text not null, order_key text not null, n int not null, note text, primary key (tenant_id, order_key, n))`);
  }
  const res = await prepareAllShards(config, shardPool, {});
  expect(res.filter((r) => r.error)).toEqual([]);
  tenant = uniq('su');
  await createTenant({ directory: directoryPool(), shardPool, config }, { tenant, shard: 'shard-a', actor: 'test' });
  tq = uniq('su');
  // Seeded before the split (the tenant's own route), then split 4 ways: no row moves.
  const router = await Router.create(config);
  try {
    for (const [i, key] of keys.entries()) {
      await router.withTenant(tenant, { tenants: [tenant] }, 'write', async (tx) => {
        await tx.query(`insert into ${schema}.orders(tenant_id, order_key) values ($1, $2)`, [tenant, key]);
        await tx.query(`insert into ${schema}.lines(tenant_id, order_key, n) values ($1, $2, $3)`, [tenant, key, i]);
      });
      acked.set(key, { v: 0, ns: [i] });
    }
  } finally {
    await router.close();
  }
  splitEpoch = (await splitTenant({ directory: directoryPool(), shardPool, config }, { tenant, ways: WAYS, actor: 'test' })).epoch;
  const counts = [0, 1, 2, 3].map((k) => keys.filter((key) => subOf(key) === `${tenant}:${k}`).length);
  expect(Math.min(...counts)).toBeGreaterThan(10);
  worker = await startWorker(config, { taskQueue: tq });
  t = await H.temporal();
}, 120_000);

afterAll(async () => {
  await t?.close();
  await worker?.shutdown();
  for (const s of SHARDS)
    await shardPool(s)
      .query(`drop schema if exists ${schema} cascade`)
      .catch(() => {});
  await closePools();
});

/** Acknowledged state per key: the order's v (updates acked) and the lines' n. */
type Acked = Map<string, { v: number; ns: number[] }>;

/** One transaction of `key`'s sub-unit: a line, and the order's v raised. The shard it committed on. */
async function write(router: Router, key: string, n: number, acked: Acked): Promise<string> {
  const shard = await router.withTenant(
    tenant,
    { tenants: [tenant] },
    'write',
    async (tx, route) => {
      await tx.query(`insert into ${schema}.lines(tenant_id, order_key, n, note) values ($1, $2, $3, $4)`, [tenant, key, n, `n${n}`]);
      await tx.query(`update ${schema}.orders set v = v + 1 where tenant_id = $1 and order_key = $2`, [tenant, key]);
      return route.shard;
    },
    { splitKey: key },
  );
  const a = acked.get(key)!;
  a.v++;
  a.ns.push(n);
  return shard;
}

/** Writes to random keys of every sub-unit until stopped; counts the writes that failed (there must be none) and where each sub-unit's landed. */
function liveWriter(router: Router, acked: Acked) {
  let stop = false;
  let failed = 0;
  const errors: string[] = [];
  const landed = new Map<string, Set<string>>();
  let n = 10_000;
  const acks = new Map<string, number>();
  const done = (async () => {
    while (!stop) {
      const key = keys[Math.floor(Math.random() * keys.length)];
      await write(router, key, n++, acked)
        .then((shard) => {
          landed.set(subOf(key), (landed.get(subOf(key)) ?? new Set()).add(shard));
          acks.set(subOf(key), (acks.get(subOf(key)) ?? 0) + 1);
        })
        .catch((e) => {
          failed++;
          if (errors.length < 5) errors.push(String(e?.message ?? e));
        });
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  return {
    landed,
    acks,
    async stop() {
      stop = true;
      await done;
      return { failed, errors };
    },
  };
}

/** The tenant's rows on `shard` (of sub-unit `sub`, or all): key → v and lines' n. */
async function rowsOn(shard: string, sub?: string): Promise<Acked> {
  const o = await shardPool(shard).query(`select order_key, v from ${schema}.orders where tenant_id = $1`, [tenant]);
  const l = await shardPool(shard).query(`select order_key, array_agg(n order by n) as ns from ${schema}.lines where tenant_id = $1 group by order_key`, [
    tenant,
  ]);
  const lines = new Map<string, number[]>(l.rows.map((x) => [x.order_key, x.ns]));
  const out: Acked = new Map();
  for (const r of o.rows) if (!sub || subOf(r.order_key) === sub) out.set(r.order_key, { v: r.v, ns: lines.get(r.order_key) ?? [] });
  // A line without its order would be a row the comparison above misses.
  for (const k of lines.keys()) if ((!sub || subOf(k) === sub) && !out.has(k)) out.set(k, { v: -1, ns: lines.get(k)! });
  return out;
}

const expected = (acked: Acked, pred: (key: string) => boolean): Acked =>
  new Map(
    [...acked]
      .filter(([k]) => pred(k))
      .map(([k, a]) => [k, { v: a.v, ns: [...a.ns].sort((x, y) => x - y) }] as const)
      .sort(([x], [y]) => (x < y ? -1 : 1)),
  );
const sorted = (m: Acked): Acked => new Map([...m].sort(([x], [y]) => (x < y ? -1 : 1)));

describe('moving a sub-unit of a split tenant, end to end', () => {
  it(
    'moves T:1 under live writes to every sub-unit: only its rows reach the target, the others keep serving on the source, a stale route is refused and retried, retire deletes only its rows',
    { timeout: 400_000 },
    async () => {
      const router = await Router.create(config);
      // No LISTEN and an hour's TTL: this router learns of the switch only from the old owner's refusal.
      const stale = await Router.create(config, { listen: false, snapshotTtlMs: 3_600_000, fullReloadMs: 3_600_000 });
      try {
        const moved = `${tenant}:1`;
        const inMoved = (k: string) => subOf(k) === moved;
        const movedKey = keys.find(inMoved)!;
        // The stale router's cache now routes T:1 to shard-a at the split's epoch.
        expect(await write(stale, movedKey, 1, acked)).toBe('shard-a');

        const writer = liveWriter(router, acked);
        await new Promise((r) => setTimeout(r, 500));
        const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: moved, target: 'shard-b', requestedBy: 'test', soakSeconds: 5 }));
        expect(h.workflowId).toBe(`move-${moved}`);
        await H.waitPhase(h, 'soak', 300_000);
        expect(await H.placement(moved)).toMatchObject({ shard: 'shard-b', epoch: splitEpoch + 1, state: 'active' });
        for (const k of [0, 2, 3]) expect(await H.placement(`${tenant}:${k}`)).toMatchObject({ shard: 'shard-a', epoch: splitEpoch, state: 'active' });
        // The new owner's fence knows K; the old owner's T:1 is disowned, its other sub-units are not.
        expect(await subUnitFences(shardPool('shard-b'), [moved])).toEqual([{ unit: moved, epoch: splitEpoch + 1, owned: true, frozen: false, ways: WAYS }]);
        expect(
          (
            await subUnitFences(
              shardPool('shard-a'),
              [0, 1, 2, 3].map((k) => `${tenant}:${k}`),
            )
          ).map((f) => [f.unit, f.owned]),
        ).toEqual([
          [`${tenant}:0`, true],
          [moved, false],
          [`${tenant}:2`, true],
          [`${tenant}:3`, true],
        ]);
        // A stale route's write is refused by the old owner (SC421) and retried on the new one.
        const retries = stale.metrics().staleRetries;
        expect(await write(stale, movedKey, 2, acked)).toBe('shard-b');
        expect(stale.metrics().staleRetries - retries).toBe(1);
        const ins = `insert into ${schema}.lines(tenant_id, order_key, n) values ($1, $2, 3)`;
        expect(await H.inUnitTx('shard-a', moved, splitEpoch, ins, [tenant, movedKey])).toBe('SC421');
        // The new owner writes T:1's rows under the new epoch and refuses another sub-unit's row in T:1's transaction.
        expect(await H.inUnitTx('shard-b', moved, splitEpoch + 1, ins, [tenant, movedKey])).toBe('ok');
        expect(await H.inUnitTx('shard-b', moved, splitEpoch + 1, ins, [tenant, keys.find((k) => !inMoved(k))!])).toBe('SC403');
        await new Promise((r) => setTimeout(r, 500));
        const w = await writer.stop();
        expect(w).toEqual({ failed: 0, errors: [] });
        // Every sub-unit was written during the move; the others only ever on shard-a.
        for (const k of [0, 2, 3]) expect([...(writer.landed.get(`${tenant}:${k}`) ?? [])]).toEqual(['shard-a']);
        expect(writer.landed.get(moved)).toContain('shard-b');

        const done = await H.waitPhase(h, 'done', 200_000);
        expect(done.phase).toBe('done');
        // What the run measured (reported, not asserted): writes acknowledged per sub-unit while the move ran, and the cutover's write pause.
        console.log(
          `sub-unit move: acked during the move ${JSON.stringify(Object.fromEntries([...writer.acks].sort()))}, cutover pause ${done.cutoverPauseMs} ms`,
        );
        // The target holds exactly T:1's acknowledged rows (and none of another sub-unit's).
        expect(sorted(await rowsOn('shard-b'))).toEqual(expected(acked, inMoved));
        // Retire deleted T:1's rows on shard-a and nothing else: every other sub-unit's acked state is there.
        expect((await rowsOn('shard-a', moved)).size).toBe(0);
        expect(sorted(await rowsOn('shard-a'))).toEqual(expected(acked, (k) => !inMoved(k)));
        expect(await H.replicationLeftovers(done.moveId)).toEqual([]);
      } finally {
        await stale.close();
        await router.close();
      }
    },
  );

  it(
    'T:2 moved beside T:1 and rolled back during soak: every write made on the new owner is back on the source, T:1 written there meanwhile stays, and the clean-up deletes only T:2 on the target',
    { timeout: 400_000 },
    async () => {
      expect(await H.placement(`${tenant}:1`), 'the first case moved T:1').toMatchObject({ shard: 'shard-b' });
      const router = await Router.create(config);
      const moved = `${tenant}:2`;
      const inMoved = (k: string) => subOf(k) === moved;
      try {
        const h = await H.startMove(t.client, tq, moveInputFor(config, { tenant: moved, target: 'shard-b', requestedBy: 'test', soakSeconds: 600 }));
        await H.waitPhase(h, 'soak', 300_000);
        // What `move retire` would delete on the source now: T:2's rows only.
        const preview = await previewUnitDeletion(config, { shardPool, directoryPool } as unknown as Connections, 'shard-a', moved);
        const mine = [...acked].filter(([k]) => inMoved(k));
        expect(Object.fromEntries(preview.tables.map((x) => [x.table, x.rows]))).toEqual({
          [`${schema}.orders`]: mine.length,
          [`${schema}.lines`]: mine.reduce((c, [, a]) => c + a.ns.length, 0),
        });
        expect(preview.blobPrefix).toBe('');
        let n = 50_000;
        for (const key of keys.filter(inMoved).slice(0, 10)) expect(await write(router, key, n++, acked)).toBe('shard-b');
        // T:1's writes on shard-b during the soak: the reverse stream (filtered on the tenant) carries them, and its applier must drop them.
        for (const key of keys.filter((k) => subOf(k) === `${tenant}:1`).slice(0, 10)) expect(await write(router, key, n++, acked)).toBe('shard-b');
        // Another sub-unit's write during the soak stays on shard-a, and T:1 on shard-b.
        expect(
          await write(
            router,
            keys.find((k) => subOf(k) === `${tenant}:3`)!,
            n++,
            acked,
          ),
        ).toBe('shard-a');
        expect(
          await write(
            router,
            keys.find((k) => subOf(k) === `${tenant}:1`)!,
            n++,
            acked,
          ),
        ).toBe('shard-b');
        await h.executeUpdate(M.rollbackUpdate, { args: [{ actor: 'sre-test', reason: 'test' }] });
        await H.waitPhase(h, 'rolled-back', 200_000);
        expect(await H.placement(moved)).toMatchObject({ shard: 'shard-a', epoch: splitEpoch + 2, state: 'active' });
        // Every acked write of T:2 is back on shard-a; shard-b keeps no row of T:2 (and all of T:1's, below).
        expect(sorted(await rowsOn('shard-a', moved))).toEqual(expected(acked, inMoved));
        expect((await rowsOn('shard-b', moved)).size).toBe(0);
        // The other sub-units are as acked: T:0 and T:3 on shard-a, T:1 on shard-b.
        expect(sorted(await rowsOn('shard-a'))).toEqual(expected(acked, (k) => subOf(k) !== `${tenant}:1`));
        expect(sorted(await rowsOn('shard-b'))).toEqual(expected(acked, (k) => subOf(k) === `${tenant}:1`));
        expect(await write(router, keys.find(inMoved)!, n++, acked)).toBe('shard-a');
        expect(
          await H.inUnitTx('shard-b', moved, splitEpoch + 1, `insert into ${schema}.lines(tenant_id, order_key, n) values ($1, $2, 7)`, [
            tenant,
            keys.find(inMoved)!,
          ]),
        ).toBe('SC421');
      } finally {
        await router.close();
      }
    },
  );

  it(
    'move plan of a sub-unit: planned with only its rows counted; refused while its tenant is still owned on the source (a split not complete there)',
    { timeout: 120_000 },
    async () => {
      const unit = `${tenant}:3`;
      const f = configFile(config);
      try {
        const env = { SHARDCTL_CONFIG: f.file };
        const ok = await runCli(['move', 'plan', '--unit', unit, '--to', 'shard-c', '--json'], { env });
        expect(ok.code, ok.stderr).toBe(0);
        const plan = JSON.parse(ok.stdout);
        const rows = (table: string) => plan.tables.find((x: { table: string }) => x.table === `${schema}.${table}`)?.rowsEstimated;
        const mine = [...acked].filter(([k]) => subOf(k) === unit);
        expect(rows('orders')).toBe(mine.length);
        expect(rows('lines')).toBe(mine.reduce((n, [, a]) => n + a.ns.length, 0));
        // The tenant's own fence owned again on shard-a, as if the split had stopped before its last step.
        const own = (await getUnitFence(shardPool('shard-a'), tenant))!;
        await setUnitFence(shardPool('shard-a'), { unit: tenant, epoch: own.epoch, owned: true, frozen: false });
        try {
          const refused = await runCli(['move', 'plan', '--unit', unit, '--to', 'shard-c'], { env });
          expect(refused.code).not.toBe(0);
          expect(refused.stdout + refused.stderr).toContain(`tenant ${tenant} is still owned on shard-a: its split is not complete there`);
        } finally {
          await setUnitFence(shardPool('shard-a'), { unit: tenant, epoch: own.epoch, owned: false, frozen: false });
        }
      } finally {
        f.remove();
      }
    },
  );
});
