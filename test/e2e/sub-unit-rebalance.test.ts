// A split tenant's hot sub-unit is planned and moved by the rebalancer (issue 13: the planner and
// drain see sub-units; docs/architecture.md, "Splitting a tenant"), on the real stack, in a fleet
// of its own (test/helpers/fleet.ts) whose tenant tables are loadgen's (accounts, documents,
// events) in a schema of this file, each split by its id. A tenant on shard-a is split 4 ways;
// loadgen writes every sub-unit (each row routed by its id as split key) while a hot writer
// inserts rows of T:1 only. `rebalance plan` (with a rate window) measures each sub-unit on its
// own, sees T:1 hot and shard-a over its headroom, and plans T:1 off shard-a to a shard none of
// its siblings ends on (a small sibling may be shed too), never naming T; `rebalance apply
// --plan` moves them through the move workflow while both writers go on. Asserts: every
// acknowledged write of loadgen is on its sub-unit's owner now (`loadgen verify`, per sub-unit),
// every acknowledged hot row is on T:1's new owner and none on shard-a, T:1's writes landed on
// both shards and its siblings' on shard-a or their planned shard only, nothing failed. Then
// `shards drain shard-a` moves the sub-units left there, each on its own, under loadgen again,
// and closes it: loadgen verify clean per sub-unit, none of the tenant's rows left on shard-a.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { closePools, shardPool } from '../helpers/stack';
import { configFile, runCli } from '../helpers/cli';
import { prepareAllShards } from '../../lib/shard/prepare';
import { splitTenant } from '../../lib/tenant-split';
import { getShard, setShardCapacity } from '../../lib/directory/shards';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import { getPlacement } from '../../lib/directory/placements';
import { tenantUnitForRow } from '../../lib/buckets/route';
import { Router } from '../../lib/router';
import { startLoadgen, verifyLog, readLog } from '../../lib/loadgen';
import type { RebalanceStatus } from '../../workflows/rebalance-messages';

const WAYS = 4;
const SHARDS = ['shard-a', 'shard-b', 'shard-c'];
const schema = `sr_${randomBytes(4).toString('hex')}`;
const TABLES = ['accounts', 'documents', 'events'];
let fleet: Fleet;
let tenant: string;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'surb-'));

beforeAll(async () => {
  fleet = await ownFleet('surb', {
    configure: (c) => ({
      ...c,
      tenant: {
        ...c.tenant,
        schemas: [schema],
        tables: TABLES.map((t) => `${schema}.${t}`),
        splitColumns: Object.fromEntries(TABLES.map((t) => [`${schema}.${t}`, 'id'])),
      },
    }),
  });
  // loadgen's tables (the demo schema's columns), each keyed by (tenant_id, id): the split column is in the primary key.
  for (const s of SHARDS) {
    await shardPool(s).query(`create schema ${schema};
      create table ${schema}.accounts (tenant_id text not null, id uuid not null, name text not null, balance numeric(14,2) not null default 0,
        updated_at timestamptz not null default now(), primary key (tenant_id, id));
      create table ${schema}.documents (tenant_id text not null, id uuid not null, title text not null, body text, blob_key text,
        version int not null default 1, updated_at timestamptz not null default now(), primary key (tenant_id, id));
      create table ${schema}.events (tenant_id text not null, id uuid not null, kind text not null, payload jsonb not null default '{}',
        at timestamptz not null default now(), primary key (tenant_id, id))`);
  }
  const res = await prepareAllShards(fleet.config, shardPool, {});
  expect(res.filter((r) => r.error)).toEqual([]);
  tenant = await fleet.tenant('shard-a', { load: 4, prefix: 'surb' });
  await splitTenant({ directory: fleet.directory, shardPool, config: fleet.config }, { tenant, ways: WAYS, actor: 'test' });
  // shard-a holds 21 load units under the 0.3 headroom: the hot sub-unit's measured rate puts it over.
  await setShardCapacity(fleet.directory, 'shard-a', 30, { actor: 'test' });
}, 180_000);

afterAll(async () => {
  await fleet?.close();
  for (const s of SHARDS)
    await shardPool(s)
      .query(`drop schema if exists ${schema} cascade`)
      .catch(() => {});
  fs.rmSync(dir, { recursive: true, force: true });
  await closePools();
});

const splits = () => new Map([[tenant, WAYS]]);

/** `n` fresh ids whose rows fall in sub-unit `unit`. */
function idsIn(unit: string, n: number): string[] {
  const out: string[] = [];
  while (out.length < n) {
    const id = randomUUID();
    if (tenantUnitForRow(tenant, id, splits()) === unit) out.push(id);
  }
  return out;
}

/**
 * Inserts 10 rows of sub-unit `hot` per transaction, one transaction after another, each routed
 * by its first id as split key: at most about 40 rows/s, well over shard-a's usable 21 (the other
 * shards keep the default capacity, 1000). Inserts, not updates: a row's xmin then stays the one
 * the planner's window saw (an update after the window closed would hide it). Keeps every
 * acknowledged id (and counts the calls that failed, which must be none).
 */
function hotWriter(router: Router, hot: string) {
  let stop = false;
  const acked: string[] = [];
  let failed = 0;
  const errors: string[] = [];
  const landed = new Set<string>();
  const done = (async () => {
    while (!stop) {
      const ids = idsIn(hot, 10);
      await router
        .withTenant(
          tenant,
          { tenants: [tenant] },
          'write',
          async (tx, route) => {
            await tx.query(`insert into ${schema}.accounts(tenant_id, id, name) select $1, id, 'hot' from unnest($2::uuid[]) id`, [tenant, ids]);
            return route.shard;
          },
          { splitKey: ids[0] },
        )
        .then((shard) => {
          acked.push(...ids);
          landed.add(shard);
        })
        .catch((e) => {
          failed++;
          if (errors.length < 5) errors.push(String(e?.message ?? e));
        });
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  return {
    landed,
    async stop() {
      stop = true;
      await done;
      return { acked, failed, errors };
    },
  };
}

describe("the rebalancer moves a split tenant's hot sub-unit", () => {
  it(
    'rebalance plan measures each sub-unit and plans the hot T:1 off its shard apart from its siblings (never T); rebalance apply moves it under loadgen writes to every sub-unit and a hot writer: loadgen verify is clean per sub-unit, every hot write is on the new owner',
    { timeout: 600_000 },
    async () => {
      const hot = `${tenant}:1`;
      const router = await Router.create(fleet.config);
      const logFile = path.join(dir, 'load.jsonl');
      const cfg = configFile({ ...fleet.config, temporal: { ...fleet.config.temporal, taskQueue: fleet.tq } });
      const cli = (args: string[]) => runCli(['--config', cfg.file, ...args], { env: { SHARDCTL_ACTOR: 'cli-test' }, timeoutMs: 500_000 });
      try {
        const load = startLoadgen({
          config: fleet.config,
          tenants: [tenant],
          rate: 20,
          durationMs: 550_000,
          logFile,
          concurrency: 3,
          schema,
          blobOps: false,
          bodyBytes: 4000,
        });
        const writer = hotWriter(router, hot);
        let stopped = false;
        const stopAll = async () => {
          if (stopped) return undefined;
          stopped = true;
          load.stop();
          const [stats, w] = await Promise.all([load.done, writer.stop()]);
          return { stats, w };
        };
        try {
          await new Promise((r) => setTimeout(r, 2000));
          const planned = await cli(['rebalance', 'plan', '--headroom', '0.3', '--tolerance', '10', '--rate-window', '3s', '--json']);
          expect(planned.code, planned.stderr).toBe(0);
          const plan = JSON.parse(planned.stdout);
          const measured = new Map<string, { load: number; loadSource: string; writesPerSecond: number; rows: number }>(
            plan.measurement.units.map((u: { unit: string }) => [u.unit, u]),
          );
          console.log(
            `sub-unit plan: ${JSON.stringify(plan.moves.map((m: { unit: string; to: string; load: number; reason: string }) => [m.unit, m.to, m.load, m.reason]))}; measured ${JSON.stringify(
              [...measured].filter(([u]) => u.startsWith(tenant)).map(([u, m]) => [u, m.writesPerSecond, m.load, m.rows]),
            )}`,
          );
          expect(measured.has(tenant)).toBe(false);
          for (let k = 0; k < WAYS; k++) expect(measured.has(`${tenant}:${k}`), `${tenant}:${k} measured`).toBe(true);
          expect(measured.get(hot)).toMatchObject({ loadSource: 'measured' });
          for (const k of [0, 2, 3]) expect(measured.get(`${tenant}:${k}`)!.writesPerSecond).toBeLessThan(measured.get(hot)!.writesPerSecond);
          // The hot sub-unit leaves shard-a, and lands where none of its siblings ends up; the plan
          // moves only sub-units of T off shard-a (the planner may shed a small sibling as well).
          const moves = plan.moves as { unit: string; from: string; to: string }[];
          expect(moves.every((m) => m.from === 'shard-a' && m.unit.startsWith(`${tenant}:`))).toBe(true);
          const to = moves.find((m) => m.unit === hot)?.to as string;
          expect(to, 'the hot sub-unit is planned').toBeDefined();
          const siblings = [0, 2, 3].map((k) => `${tenant}:${k}`);
          const ends = new Map(siblings.map((u) => [u, moves.find((m) => m.unit === u)?.to ?? 'shard-a']));
          expect([...ends.values()]).not.toContain(to);
          const planFile = path.join(dir, 'plan.json');
          fs.writeFileSync(planFile, planned.stdout);

          const applied = await cli(['rebalance', 'apply', '--plan', planFile, '--concurrency', '1', '--soak', '1s', '--yes', '--wait', '--json']);
          expect(applied.code, applied.stderr).toBe(0);
          const st = JSON.parse(applied.stdout).status as RebalanceStatus;
          expect(st.moves.map((m) => [m.unit, m.from, m.to, m.state])).toEqual(moves.map((m) => [m.unit, m.from, m.to, 'done']));
          expect(await getPlacement(fleet.directory, hot)).toMatchObject({ shard: to, state: 'active' });
          for (const u of siblings) expect(await getPlacement(fleet.directory, u)).toMatchObject({ shard: ends.get(u), state: 'active' });
          // Both writers go on a moment on the new placement.
          await new Promise((r) => setTimeout(r, 2000));
          const ended = (await stopAll())!;
          expect(ended.w).toMatchObject({ failed: 0, errors: [] });
          expect([...writer.landed].sort()).toEqual(['shard-a', to].sort());
          expect(ended.stats.writes.ack).toBeGreaterThan(50);
          expect(ended.stats.writes.refused + ended.stats.writes.unknown, JSON.stringify(ended.stats.errorsByType)).toBe(0);

          // Every acknowledged loadgen write is on its sub-unit's owner now, each sub-unit checked.
          const report = await verifyLog({ logFile, config: fleet.config, schema });
          expect(
            { ok: report.ok, missing: report.missing, wrongValue: report.wrongValue, presentButRefused: report.presentButRefused },
            JSON.stringify(report).slice(0, 2000),
          ).toEqual({ ok: true, missing: [], wrongValue: [], presentButRefused: [] });
          for (let k = 0; k < WAYS; k++) expect(report.checkedByUnit[`${tenant}:${k}`], `${tenant}:${k} checked`).toBeGreaterThan(0);
          expect(report.owners[hot]).toMatchObject({ shard: to });
          // loadgen's own record of where each write landed: T:1 on both shards, its siblings on shard-a only.
          const landed = new Map<string, Set<string>>();
          for (const r of readLog(logFile).filter((x) => x.status === 'ack')) landed.set(r.unit!, (landed.get(r.unit!) ?? new Set()).add(r.shard!));
          expect([...landed.get(hot)!].sort()).toEqual(['shard-a', to].sort());
          for (const u of siblings) for (const s of landed.get(u)!) expect(['shard-a', ends.get(u)], u).toContain(s);
          // Every acknowledged hot row is on the new owner; retire left none of T:1's on shard-a.
          const hotRows = async (shard: string) =>
            (await shardPool(shard).query(`select id::text from ${schema}.accounts where tenant_id = $1 and name = 'hot'`, [tenant])).rows
              .map((r) => r.id)
              .sort();
          expect(ended.w.acked.length).toBeGreaterThan(100);
          expect(await hotRows(to)).toEqual([...ended.w.acked].sort());
          expect(await hotRows('shard-a')).toEqual([]);
        } finally {
          await stopAll();
        }
      } finally {
        cfg.remove();
        await router.close();
      }
    },
  );

  it(
    'shards drain moves every sub-unit left on shard-a off it, each on its own (never T), under loadgen writes to every sub-unit, and closes shard-a: loadgen verify clean per sub-unit',
    { timeout: 400_000 },
    async () => {
      const left = Array.from({ length: WAYS }, (_, k) => `${tenant}:${k}`);
      const before = new Map<string, string>();
      for (const u of left) before.set(u, (await getPlacement(fleet.directory, u))!.shard);
      const onA = left.filter((u) => before.get(u) === 'shard-a');
      expect(onA.length, 'the first case left siblings on shard-a').toBeGreaterThan(0);
      const logFile = path.join(dir, 'drain.jsonl');
      const load = startLoadgen({
        config: fleet.config,
        tenants: [tenant],
        rate: 20,
        durationMs: 380_000,
        logFile,
        concurrency: 3,
        schema,
        blobOps: false,
        bodyBytes: 4000,
      });
      try {
        await new Promise((r) => setTimeout(r, 1500));
        const input = rebalanceInputFor(fleet.config, { scope: { kind: 'drain', shard: 'shard-a' }, requestedBy: 'test', soakSeconds: 1 });
        const h = await startRebalance(fleet.t.client, fleet.tq, input, fleet.config.temporal.rebalanceWorkflowId);
        const st: RebalanceStatus = await h.result();
        expect(st.problems).toEqual([]);
        expect(st.phase).toBe('done');
        expect(st.moves.map((m) => [m.unit, m.from, m.state]).sort()).toEqual(onA.map((u) => [u, 'shard-a', 'done']).sort());
        expect(st.drain).toEqual({ shard: 'shard-a', closed: true, reasons: [] });
        for (const u of left) expect((await getPlacement(fleet.directory, u))!.shard).not.toBe('shard-a');
        expect(await getShard(fleet.directory, 'shard-a')).toMatchObject({ status: 'closed', units: 0 });
        await new Promise((r) => setTimeout(r, 1500));
      } finally {
        load.stop();
      }
      const stats = await load.done;
      expect(stats.writes.ack).toBeGreaterThan(30);
      expect(stats.writes.refused + stats.writes.unknown, JSON.stringify(stats.errorsByType)).toBe(0);
      const report = await verifyLog({ logFile, config: fleet.config, schema });
      expect({ ok: report.ok, missing: report.missing, wrongValue: report.wrongValue }, JSON.stringify(report).slice(0, 2000)).toEqual({
        ok: true,
        missing: [],
        wrongValue: [],
      });
      for (const u of left) expect(report.checkedByUnit[u], `${u} checked`).toBeGreaterThan(0);
      for (const u of left) expect(report.owners[u].shard).not.toBe('shard-a');
      // No row of the tenant is left on the closed shard (each move's retire deleted its sub-unit's).
      for (const t of TABLES)
        expect((await shardPool('shard-a').query(`select count(*)::int as n from ${schema}.${t} where tenant_id = $1`, [tenant])).rows[0].n, t).toBe(0);
    },
  );
});
