// Server restarts mid-move (issue 5): the source Postgres during copy and during catch-up, the
// target during apply, and the Temporal dev server (persistent SQLite) during the move. The move
// waits visibly, resumes, and DESIGN.md §5 holds. Runs after the rest of the suite (it restarts
// shared servers).
import { describe, it, expect, beforeAll, afterAll, afterEach } from 'vitest';
import { testConfig, uniq, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';
import { buildWorkflowBundle } from '../../worker';
import { stackAt, restartPostgres, restartTemporal } from '../../lib/dev/stack';
import { projectRoot } from '../../lib/config';
import { Router } from '../../lib/router';
import * as M from '../../workflows/messages';
import type { PgServerName } from '../../lib/dev/topology';

const rows: C.CaseRow[] = [];
let t: Awaited<ReturnType<typeof H.temporal>>;
let worker: C.ChildWorker;
let tq: string;
const stack = stackAt(projectRoot());

beforeAll(async () => {
  await H.prepareStack();
  await buildWorkflowBundle(C.BUNDLE);
  t = await H.temporal();
  tq = uniq('restart');
  worker = C.spawnWorker(tq);
  await worker.ready;
});
// A case that timed out keeps running in the background: its workers and traffic must not.
afterEach(async () => {
  const stopped = await C.stopStragglers([worker]);
  if (stopped.length) process.stderr.write(`stopped after the case: ${stopped.join(', ')}\n`);
});
afterAll(async () => {
  C.writeReport(rows, `${C.ARTIFACTS}/crash-restarts-report.md`);
  await C.stopWorker(worker);
  await C.stopStragglers();
  await t?.close();
  await closePools();
});

/** A burst of small write transactions on the tenant, so the next catch-up has a backlog. */
async function burst(tenant: string, n: number) {
  const router = await Router.create(testConfig());
  try {
    for (let i = 0; i < n; i += 50) {
      await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
        tx.query(`insert into public.events(tenant_id, kind, payload) select $1, 'burst', jsonb_build_object('i', g) from generate_series($2::int, $2::int + 49) g`, [tenant, i]));
    }
  } finally {
    await router.close();
  }
}

async function runCase(name: string, o: { source: string; target: string; bystanderClean: boolean; trigger: (h: C.Handle, tenant: string) => Promise<void> }) {
  const t0 = Date.now();
  const tenant = await H.newTenant(o.source, 'r');
  const bystander = await H.newTenant(o.source, 'rb');
  await H.seed(tenant, 600, 3);
  await H.seed(bystander, 60, 1);
  const traffic = await C.startTraffic(`${name}-${tenant}`, [tenant, bystander], 30);
  try {
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, o.target, { soakSeconds: 3, copyBatchRows: 40, rowsPerSecond: 150, approveCutover: 'manual' }));
    await o.trigger(h, tenant);
    const status = await H.waitPhase(h, 'done', 240_000);
    await new Promise((r) => setTimeout(r, 1000));
    await traffic.stop();
    const counts = await assertAfter(tenant, bystander, o, status, traffic);
    rows.push({ faultPoint: name, killed: false, outcome: status.phase, pauseMs: status.cutoverPauseMs, writesAcked: counts.acked, writesRefused: counts.refused, verified: 'clean', seconds: Math.round((Date.now() - t0) / 1000) });
  } catch (e) {
    rows.push({ faultPoint: name, killed: false, outcome: `FAILED: ${String((e as Error).message).split('\n')[0].slice(0, 120)}`, pauseMs: null, writesAcked: 0, writesRefused: 0, verified: '-', seconds: Math.round((Date.now() - t0) / 1000) });
    throw e;
  } finally {
    await traffic.stop();
  }
}

async function assertAfter(tenant: string, bystander: string, o: { source: string; target: string; bystanderClean: boolean }, status: M.MoveStatus, traffic: C.Traffic) {
  if (o.bystanderClean) {
    return C.assertInvariants({ tenant, bystander, source: o.source, target: o.target, status, expectOwner: o.target, expectEpoch: 2, traffic });
  }
  // The bystander shares the restarted server: its writes may fail during the restart (and are
  // logged refused/unknown), so only the loss and ownership invariants are asserted for it.
  const { verifyLog, readLog } = await import('../../lib/loadgen');
  const report = await verifyLog({ logFile: traffic.logFile, config: testConfig() });
  expect({ missing: report.missing, wrong: report.wrongValue, refused: report.presentButRefused, deleted: report.presentButDeleted, blobs: report.blobMissing })
    .toEqual({ missing: [], wrong: [], refused: [], deleted: [], blobs: [] });
  expect(await H.placement(tenant)).toMatchObject({ shard: o.target, epoch: 2, state: 'active' });
  expect(await H.tryWrite(o.source, tenant, 1)).toBe('SC421');
  expect(await H.tryWrite(o.target, tenant, 2)).toBe('ok');
  expect(await H.replicationLeftovers(status.moveId)).toEqual([]);
  expect(await H.rowCount(o.source, tenant)).toBe(0);
  const mine = readLog(traffic.logFile).filter((r) => r.tenant === tenant);
  return { acked: mine.filter((r) => r.status === 'ack').length, refused: mine.filter((r) => r.status === 'refused').length };
}

const approve = (h: C.Handle) => h.executeUpdate(M.approveUpdate, { args: [{ actor: 'crash-suite' }] });

describe('server restarts mid-move', () => {
  it('source Postgres restarted mid-copy: the move waits, resumes and loses nothing', { timeout: 300_000 }, async () => {
    await runCase('restart source mid-copy', {
      source: 'shard-a', target: 'shard-b', bystanderClean: false,
      trigger: async (h) => {
        await H.waitFor(h, (s) => s.phase === 'copy', 60_000);
        await new Promise((r) => setTimeout(r, 800));
        await restartPostgres(stack, 'shard-a' as PgServerName, 1500);
        await H.waitFor(h, (s) => s.awaitingApproval, 180_000);
        await approve(h);
      },
    });
  });

  it('source Postgres restarted mid-catch-up: the stream resumes from the target\'s progress', { timeout: 300_000 }, async () => {
    await runCase('restart source mid-catch-up', {
      source: 'shard-b', target: 'shard-c', bystanderClean: false,
      trigger: async (h, tenant) => {
        await H.waitFor(h, (s) => s.awaitingApproval, 180_000);
        await burst(tenant, 4000);
        await approve(h);
        await new Promise((r) => setTimeout(r, 300));
        await restartPostgres(stack, 'shard-b' as PgServerName, 1500);
      },
    });
  });

  it('target Postgres restarted mid-apply: applied transactions are not applied twice', { timeout: 300_000 }, async () => {
    await runCase('restart target mid-apply', {
      source: 'shard-c', target: 'shard-a', bystanderClean: true,
      trigger: async (h, tenant) => {
        await H.waitFor(h, (s) => s.awaitingApproval, 180_000);
        await burst(tenant, 4000);
        await approve(h);
        await new Promise((r) => setTimeout(r, 300));
        await restartPostgres(stack, 'shard-a' as PgServerName, 1500);
      },
    });
  });

  it('Temporal dev server restarted mid-move: the workflow survives (SQLite) and completes', { timeout: 300_000 }, async () => {
    await runCase('restart temporal mid-copy', {
      source: 'shard-a', target: 'shard-c', bystanderClean: true,
      trigger: async (h) => {
        await H.waitFor(h, (s) => s.phase === 'copy', 60_000);
        await new Promise((r) => setTimeout(r, 800));
        await restartTemporal(stack, 1000);
        // The client's connection reconnects; the worker's too.
        await H.waitFor(h, (s) => s.awaitingApproval, 180_000);
        await approve(h);
      },
    });
  });
});
