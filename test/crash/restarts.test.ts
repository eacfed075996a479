// Server restarts mid-move (issue 5): the source Postgres during copy and during catch-up, the
// target during apply, and the Temporal dev server (persistent SQLite) during the move. The move
// waits visibly, resumes, and DESIGN.md §5 holds. Runs after the rest of the suite (it restarts
// shared servers).
import { describe, it, expect } from 'vitest';
import { testConfig, uniq, shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';
import { stackAt, restartPostgres, restartTemporal } from '../../lib/dev/stack';
import { projectRoot } from '../../lib/config';
import { Router } from '../../lib/router';
import * as M from '../../workflows/messages';
import type { PgServerName } from '../../lib/dev/topology';
import { addAcked, UnitBaseline } from '../../lib/loadgen';

const rows: C.CaseRow[] = [];
let worker: C.ChildWorker;
let tq: string;
const stack = stackAt(projectRoot());

const suite = C.crashSuite({
  before: async () => {
    tq = uniq('restart');
    worker = C.spawnWorker(tq);
    await worker.ready;
  },
  keep: () => [worker],
  report: async () => {
    C.writeReport(rows, `${C.ARTIFACTS}/crash-restarts-report.md`);
    await C.stopWorker(worker);
  },
});

/** A burst of small write transactions on the tenant, so the next catch-up has a backlog; returns the ids (all acknowledged). */
async function burst(tenant: string, n: number): Promise<string[]> {
  const router = await Router.create(testConfig());
  const ids: string[] = [];
  try {
    for (let i = 0; i < n; i += 50) {
      const r = await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
        tx.query(
          `insert into public.events(tenant_id, kind, payload) select $1, 'burst', jsonb_build_object('i', g) from generate_series($2::int, $2::int + 49) g returning id::text`,
          [tenant, i],
        ),
      );
      ids.push(...r.rows.map((x: { id: string }) => x.id));
    }
  } finally {
    await router.close();
  }
  return ids;
}

/** How many of the tenant's burst rows the target holds now. */
async function burstRowsOn(shard: string, tenant: string): Promise<number> {
  const r = await shardPool(shard).query(`select count(*)::int as n from public.events where tenant_id = $1 and kind = 'burst'`, [tenant]);
  return r.rows[0].n;
}

/**
 * On the target: an ALWAYS trigger (it fires in the replica apply session too) logs every insert
 * or update of the tenant's events, so a change applied twice shows as a second entry for its
 * id (an upsert alone would hide it).
 */
async function countApplications(shard: string, tenant: string) {
  const schema = `applylog_${Math.random().toString(36).slice(2, 10)}`;
  const pool = shardPool(shard);
  const lit = tenant.replace(/'/g, "''");
  await pool.query(`
    create schema ${schema};
    create table ${schema}.log (id uuid not null, op text not null);
    create function ${schema}.log() returns trigger language plpgsql as $$
      begin insert into ${schema}.log values (new.id, tg_op); return new; end $$;
    create trigger ${schema} after insert or update on public.events for each row
      when (new.tenant_id = '${lit}') execute function ${schema}.log();
    alter table public.events enable always trigger ${schema};`);
  return {
    async perId(ids: string[]): Promise<Map<string, string[]>> {
      const r = await pool.query(`select id::text, array_agg(op) as ops from ${schema}.log where id = any($1::uuid[]) group by id`, [ids]);
      return new Map(r.rows.map((x: { id: string; ops: string[] }) => [x.id, x.ops]));
    },
    async drop() {
      await pool.query(`drop trigger if exists ${schema} on public.events; drop schema if exists ${schema} cascade`);
    },
  };
}

/** Activities that ran more than once (a retry after the restart), from the workflow history. */
async function retriedActivities(h: C.Handle): Promise<{ name: string; attempt: number }[]> {
  const history = await h.fetchHistory();
  const names = new Map<string, string>();
  const out: { name: string; attempt: number }[] = [];
  for (const e of history.events ?? []) {
    const id = String(e.eventId);
    if (e.activityTaskScheduledEventAttributes) names.set(id, e.activityTaskScheduledEventAttributes.activityType?.name ?? '?');
    const st = e.activityTaskStartedEventAttributes;
    if (st && (st.attempt ?? 1) > 1) out.push({ name: names.get(String(st.scheduledEventId)) ?? '?', attempt: st.attempt! });
  }
  return out;
}

/** Waits until the copy has put some but not all of the tenant's rows on the target. */
async function midCopy(target: string, tenant: string, total: number): Promise<number> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const n = await H.rowCount(target, tenant);
    if (n > 0) {
      expect(n, 'the copy finished before the restart: it cannot land mid-copy').toBeLessThan(total);
      return n;
    }
    if (Date.now() > deadline) throw new Error('the copy never started');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Waits until the apply has put some but not all of the burst on the target. */
async function midApply(target: string, tenant: string, total: number): Promise<number> {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const n = await burstRowsOn(target, tenant);
    if (n > 0) {
      expect(n, 'the apply finished before the restart: it cannot land mid-apply').toBeLessThan(total);
      return n;
    }
    if (Date.now() > deadline) throw new Error('the apply never started');
    await new Promise((r) => setTimeout(r, 50));
  }
}

interface CaseContext {
  h: C.Handle;
  tenant: string;
  baseline: UnitBaseline;
}

async function runCase(
  name: string,
  o: { source: string; target: string; bystanderClean: boolean; trigger: (c: CaseContext) => Promise<void>; after?: (c: CaseContext) => Promise<void> },
) {
  const t0 = Date.now();
  const tenant = await H.newTenant(o.source, 'r');
  const bystander = await H.newTenant(o.source, 'rb');
  await H.seed(tenant, SEEDED, 3);
  await H.seed(bystander, 60, 1);
  const baselines = [await C.baselineOf(tenant), await C.baselineOf(bystander)];
  const traffic = await C.startTraffic(`${name}-${tenant}`, [tenant, bystander], 30);
  try {
    const h = await H.startMove(
      suite.client,
      tq,
      H.moveInput(tenant, o.target, { soakSeconds: 3, copyBatchRows: 40, rowsPerSecond: 150, approveCutover: 'manual' }),
    );
    const ctx = { h, tenant, baseline: baselines[0] };
    await o.trigger(ctx);
    const status = await H.waitPhase(h, 'done', 240_000);
    await new Promise((r) => setTimeout(r, 1000));
    await traffic.stop();
    const counts = await assertAfter(tenant, bystander, o, status, traffic, baselines);
    await o.after?.(ctx);
    rows.push({
      faultPoint: name,
      killed: false,
      outcome: status.phase,
      pauseMs: status.cutoverPauseMs,
      writesAcked: counts.acked,
      writesRefused: counts.refused,
      unknown: counts.unknown,
      reads: counts.reads,
      verified: 'whole unit',
      seconds: Math.round((Date.now() - t0) / 1000),
    });
  } catch (e) {
    rows.push(C.failedRow(name, false, e, t0));
    throw e;
  } finally {
    await traffic.stop();
  }
}

// A restarted server drops every connection: writes in flight then may end unknown and reads
// may fail, within these bounds (measured: 0 unknown in every case, up to 16 failed reads of
// about 350 when the restarted server is the source; see the report).
const RESTART_BOUNDS = { maxUnknown: 3, maxFailedReads: 40 };

async function assertAfter(
  tenant: string,
  bystander: string,
  o: { source: string; target: string; bystanderClean: boolean },
  status: M.MoveStatus,
  traffic: C.Traffic,
  baselines: UnitBaseline[],
) {
  if (o.bystanderClean) {
    return C.assertInvariants({
      tenant,
      bystanders: [bystander],
      source: o.source,
      target: o.target,
      status,
      expectOwner: o.target,
      expectEpoch: 2,
      traffic,
      baselines,
      ...RESTART_BOUNDS,
    });
  }
  // The bystander shares the restarted server: its writes may fail during the restart (and are
  // logged refused/unknown), so only the loss and ownership invariants are asserted for it.
  const { verifyLog, readLog } = await import('../../lib/loadgen');
  const report = await verifyLog({ logFile: traffic.logFile, config: testConfig(), baselines });
  expect({
    missing: report.missing,
    wrong: report.wrongValue,
    refused: report.presentButRefused,
    deleted: report.presentButDeleted,
    blobs: report.blobMissing,
    unit: report.unit,
  }).toEqual({ missing: [], wrong: [], refused: [], deleted: [], blobs: [], unit: [] });
  C.assertTraffic(traffic, report.unknownOutcomes, RESTART_BOUNDS);
  expect(await H.placement(tenant)).toMatchObject({ shard: o.target, epoch: 2, state: 'active' });
  expect(await H.tryWrite(o.source, tenant, 1)).toBe('SC421');
  expect(await H.tryWrite(o.target, tenant, 2)).toBe('ok');
  expect(await H.replicationLeftovers(status.moveId)).toEqual([]);
  expect(await C.leftoversOn(o.source, tenant, [status.moveId])).toEqual([]);
  const mine = readLog(traffic.logFile).filter((r) => r.tenant === tenant);
  return {
    acked: mine.filter((r) => r.status === 'ack').length,
    refused: mine.filter((r) => r.status === 'refused').length,
    unknown: report.unknownOutcomes,
    reads: C.readsOf(traffic),
  };
}

const approve = (h: C.Handle) => h.executeUpdate(M.approveUpdate, { args: [{ actor: 'crash-suite' }] });
const SEEDED = 600;

describe('server restarts mid-move', () => {
  it('source Postgres restarted mid-copy: the copy is retried from its checkpoint and loses nothing', { timeout: 300_000 }, async () => {
    await runCase('restart source mid-copy', {
      source: 'shard-a',
      target: 'shard-b',
      bystanderClean: false,
      trigger: async ({ h, tenant }) => {
        await H.waitFor(h, (s) => s.phase === 'copy', 60_000);
        await midCopy('shard-b', tenant, SEEDED);
        await restartPostgres(stack, 'shard-a' as PgServerName, 1500);
        await H.waitFor(h, (s) => s.awaitingApproval, 180_000);
        await approve(h);
      },
      after: async ({ h }) => {
        expect((await retriedActivities(h)).map((a) => a.name)).toContain('copyTable');
      },
    });
  });

  it("source Postgres restarted mid-catch-up: the stream resumes from the target's progress, each change applied once", { timeout: 300_000 }, async () => {
    let apps: Awaited<ReturnType<typeof countApplications>> | undefined;
    let ids: string[] = [];
    try {
      await runCase('restart source mid-catch-up', {
        source: 'shard-b',
        target: 'shard-c',
        bystanderClean: false,
        trigger: async ({ h, tenant, baseline }) => {
          apps = await countApplications('shard-c', tenant);
          await H.waitFor(h, (s) => s.awaitingApproval, 180_000);
          ids = await burst(tenant, 4000);
          addAcked(baseline, 'public.events', ids);
          await approve(h);
          await midApply('shard-c', tenant, ids.length);
          await restartPostgres(stack, 'shard-b' as PgServerName, 1500);
        },
        after: async ({ h }) => {
          expect((await retriedActivities(h)).map((a) => a.name)).toEqual(expect.arrayContaining([expect.stringMatching(/^(catchUp|cutover)$/)]));
          const per = await apps!.perId(ids);
          expect(per.size).toBe(ids.length);
          expect([...per.entries()].filter(([, ops]) => ops.length !== 1 || ops[0] !== 'INSERT')).toEqual([]);
        },
      });
    } finally {
      await apps?.drop();
    }
  });

  it('target Postgres restarted mid-apply: applied transactions are not applied twice', { timeout: 300_000 }, async () => {
    let apps: Awaited<ReturnType<typeof countApplications>> | undefined;
    let ids: string[] = [];
    try {
      await runCase('restart target mid-apply', {
        source: 'shard-c',
        target: 'shard-a',
        bystanderClean: true,
        trigger: async ({ h, tenant, baseline }) => {
          apps = await countApplications('shard-a', tenant);
          await H.waitFor(h, (s) => s.awaitingApproval, 180_000);
          ids = await burst(tenant, 4000);
          addAcked(baseline, 'public.events', ids);
          await approve(h);
          await midApply('shard-a', tenant, ids.length);
          await restartPostgres(stack, 'shard-a' as PgServerName, 1500);
        },
        after: async ({ h }) => {
          expect((await retriedActivities(h)).map((a) => a.name)).toEqual(expect.arrayContaining([expect.stringMatching(/^(catchUp|cutover)$/)]));
          // Each burst row reached the target by exactly one application: one INSERT, no upsert.
          const per = await apps!.perId(ids);
          expect(per.size).toBe(ids.length);
          expect([...per.entries()].filter(([, ops]) => ops.length !== 1 || ops[0] !== 'INSERT')).toEqual([]);
        },
      });
    } finally {
      await apps?.drop();
    }
  });

  it('Temporal dev server restarted mid-copy: the workflow survives (SQLite) and completes', { timeout: 300_000 }, async () => {
    await runCase('restart temporal mid-copy', {
      source: 'shard-a',
      target: 'shard-c',
      bystanderClean: true,
      trigger: async ({ h, tenant }) => {
        await H.waitFor(h, (s) => s.phase === 'copy', 60_000);
        await midCopy('shard-c', tenant, SEEDED);
        await restartTemporal(stack, 1000);
        // The client's connection reconnects; the worker's too.
        await H.waitFor(h, (s) => s.awaitingApproval, 180_000);
        await approve(h);
      },
    });
  });
});
