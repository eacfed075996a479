// The crash matrix (issue 5): for every named fault point, a real worker process is SIGKILLed
// when it reaches the point, a fresh worker finishes the move (or its cancel / rollback), and
// DESIGN.md §5 is asserted with live traffic on the moving tenant and a bystander.
import { describe, it, expect } from 'vitest';
import path from 'node:path';
import fs from 'node:fs';
import { testConfig, uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';
import { Router } from '../../lib/router';
import * as M from '../../workflows/messages';

type Path = 'complete' | 'rollback' | 'cancel';
const CASES: { point: string; path: Path }[] = [
  { point: 'after-slot-created', path: 'complete' },
  { point: 'mid-copy', path: 'complete' },
  { point: 'after-copy', path: 'complete' },
  { point: 'mid-catch-up', path: 'complete' },
  { point: 'after-validate', path: 'complete' },
  { point: 'after-final-apply-opened', path: 'complete' },
  { point: 'after-fence-raised', path: 'complete' },
  { point: 'before-switch', path: 'complete' },
  { point: 'after-reverse-slot-created', path: 'complete' },
  { point: 'after-accept-epoch', path: 'complete' },
  { point: 'after-switch-committed', path: 'complete' },
  { point: 'mid-soak', path: 'complete' },
  { point: 'mid-retire', path: 'complete' },
  { point: 'mid-rollback', path: 'rollback' },
  { point: 'rollback-before-switch', path: 'rollback' },
  { point: 'rollback-after-accept-epoch', path: 'rollback' },
  { point: 'rollback-after-switch-committed', path: 'rollback' },
  { point: 'mid-cancel', path: 'cancel' },
];
const PAIRS: [string, string][] = [
  ['shard-a', 'shard-b'],
  ['shard-b', 'shard-c'],
  ['shard-c', 'shard-a'],
];

const rows: C.CaseRow[] = [];
// Every case has its own tenants, task queue and workers: they run side by side (three at a
// time, `--maxConcurrency 3` in scripts/test.sh), each stopping its own in its finally.
const suite = C.crashSuite({
  concurrent: true,
  report: () => {
    const table = C.writeReport(rows);
    process.stdout.write(`\ncrash suite report (${path.join('test-results', 'crash-report.md')}):\n${table}\n`);
  },
});

describe.concurrent('crash matrix: SIGKILL the worker at every fault point', () => {
  CASES.forEach((c, i) => {
    it(
      `${c.point}: ${c.path === 'complete' ? 'the move completes' : c.path === 'rollback' ? 'the rollback completes' : 'the cancel completes'} and nothing is lost`,
      { timeout: 300_000 },
      async () => {
        const t0 = Date.now();
        const [source, target] = PAIRS[i % PAIRS.length];
        const tenant = await H.newTenant(source, 'k');
        const bystander = await H.newTenant(source, 'b');
        const bystanderOnTarget = await H.newTenant(target, 'bt');
        await H.seed(tenant, 300, 3);
        await H.seed(bystander, 60, 1);
        await H.seed(bystanderOnTarget, 60, 1);
        const baselines = await Promise.all([tenant, bystander, bystanderOnTarget].map((x) => C.baselineOf(x)));
        const tq = uniq('crash');
        const faultLog = path.join(C.ARTIFACTS, 'crash', `${c.point}-${tenant}.faults.jsonl`);
        fs.mkdirSync(path.dirname(faultLog), { recursive: true });
        const frozen = i === 0 ? await Router.create(testConfig(), { freezeCache: true }) : undefined;
        const traffic = await C.startTraffic(`${c.point}-${tenant}`, [tenant, bystander, bystanderOnTarget]);
        let w1: C.ChildWorker | undefined;
        let w2: C.ChildWorker | undefined;
        try {
          w1 = C.spawnWorker(tq, { faultPoint: c.point, faultLog });
          await w1.ready;
          const h = await H.startMove(
            suite.client,
            tq,
            H.moveInput(tenant, target, {
              soakSeconds: c.path === 'rollback' ? 600 : 3,
              approveCutover: c.path === 'cancel' ? 'manual' : 'auto',
              copyBatchRows: 40,
              fenceBudgetMs: 5000,
            }),
          );
          if (c.path === 'rollback') {
            await H.waitPhase(h, 'soak', 120_000);
            await new Promise((r) => setTimeout(r, 1000)); // writes land on the target first
            await h.executeUpdate(M.rollbackUpdate, { args: [{ actor: 'crash-suite' }] });
          }
          if (c.path === 'cancel') {
            await H.waitFor(h, (s) => s.awaitingApproval, 120_000);
            await h.executeUpdate(M.cancelUpdate, { args: [{ actor: 'crash-suite' }] });
          }
          await C.waitKilled(w1, faultLog, c.point);
          w2 = C.spawnWorker(tq);
          await w2.ready;
          const end = c.path === 'complete' ? 'done' : c.path === 'rollback' ? 'rolled-back' : 'cancelled';
          const status = await H.waitPhase(h, end, 180_000);
          await new Promise((r) => setTimeout(r, 1000)); // traffic continues on the final owner
          await traffic.stop();
          const owner = c.path === 'complete' ? target : source;
          const epoch = c.path === 'complete' ? 2 : c.path === 'rollback' ? 3 : 1;
          const counts = await C.assertInvariants({
            tenant,
            bystanders: [bystander, bystanderOnTarget],
            source,
            target,
            status,
            expectOwner: owner,
            expectEpoch: epoch,
            traffic,
            baselines,
          });
          expect(counts.acked).toBeGreaterThan(0);
          if (frozen) {
            // A router that never refreshes its cache keeps being refused after the switch.
            await expect(
              frozen.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
                tx.query(`insert into public.events(tenant_id, kind) values ($1, 'stale')`, [tenant]),
              ),
            ).rejects.toMatchObject({ type: 'StaleRoute' });
          }
          rows.push({
            faultPoint: c.point,
            killed: true,
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
          rows.push(C.failedRow(c.point, w1?.proc.signalCode === 'SIGKILL', e, t0));
          throw e;
        } finally {
          await traffic.stop();
          await frozen?.close();
          await C.stopWorker(w1);
          await C.stopWorker(w2);
        }
      },
    );
  });
});
