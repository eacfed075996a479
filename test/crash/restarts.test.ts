// Server restarts mid-move (issue 5): the source Postgres during copy and during catch-up, the
// target during apply, and the Temporal dev server (persistent SQLite) during the move. The move
// waits visibly, resumes, and DESIGN.md §5 holds. Runs after the rest of the suite (it restarts
// shared servers).
import { describe, it, expect } from 'vitest';
import { testConfig, uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';
import { stackAt, restartPostgres, restartTemporal } from '../../lib/dev/stack';
import { projectRoot } from '../../lib/config';
import * as M from '../../workflows/messages';
import type { PgServerName } from '../../lib/dev/topology';
import { addAcked, UnitBaseline } from '../../lib/loadgen';
import { burst, countApplications, expectAppliedOnce, midApply, retriedActivities } from '../helpers/backlog';

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
      pause: C.pauseOf(status),
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
  const { readLog } = await import('../../lib/loadgen');
  const report = await C.expectLogVerified({ logFile: traffic.logFile, config: testConfig(), baselines });
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
          await expectAppliedOnce(apps!, ids);
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
          await expectAppliedOnce(apps!, ids);
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
