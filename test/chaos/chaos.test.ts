// The nightly chaos variant (`npm run test:chaos -- --seed S --iterations N`): each iteration
// draws, from a seeded PRNG, a shard pair, a fault point or a random kill time, and the path
// (complete / cancel / rollback); kills the real worker there, finishes with a fresh one, and
// asserts DESIGN.md §5. The same seed replays the same draws.
import { describe, it, expect } from 'vitest';
import path from 'node:path';
import fs from 'node:fs';
import { uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';
import { prng } from '../../lib/loadgen/plan';
import { driveToEnd } from '../helpers/chaos';
import { ownerAfter, SHARD_PAIRS, type ChaosPath } from '../helpers/chaos-draws';

const SEED = Number(process.env.CHAOS_SEED ?? Date.now() % 1_000_000);
const ITERATIONS = Number(process.env.CHAOS_ITERATIONS ?? 5);
const POINTS = [
  'after-slot-created',
  'mid-copy',
  'after-copy',
  'mid-catch-up',
  'after-validate',
  'after-fence-raised',
  'before-switch',
  'after-accept-epoch',
  'after-switch-committed',
  'after-reverse-slot-created',
  'mid-soak',
  'mid-retire',
];

const rand = prng(SEED);
const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)];
const rows: C.CaseRow[] = [];
/** Iterations whose first worker really died by SIGKILL (a fault point on another path kills nothing). */
const kills = { atPoint: 0, byTime: 0, none: 0 };
const suite = C.crashSuite({
  before: async () => {
    process.stdout.write(`chaos: seed ${SEED}, ${ITERATIONS} iterations (replay with --seed ${SEED})\n`);
  },
  report: () => {
    const summary = `chaos seed ${SEED}: ${kills.atPoint + kills.byTime} of ${rows.length} iterations killed a worker (${kills.atPoint} at a fault point, ${kills.byTime} at a random time); ${kills.none} had no kill\n`;
    process.stdout.write(C.writeReport(rows, path.join(C.ARTIFACTS, `chaos-${SEED}.md`)) + summary);
    fs.appendFileSync(path.join(C.ARTIFACTS, `chaos-${SEED}.md`), `\n${summary}`);
  },
});

describe(`chaos (seed ${SEED})`, () => {
  for (let i = 0; i < ITERATIONS; i++) {
    const [source, target] = pick(SHARD_PAIRS);
    const byTime = rand() < 0.4;
    const point = pick(POINTS);
    const killAfterMs = Math.round(500 + rand() * 12_000);
    const path_: ChaosPath = rand() < 0.7 ? 'complete' : rand() < 0.5 ? 'cancel' : 'rollback';
    const label = `#${i} ${source}->${target} ${path_} ${byTime ? `kill after ${killAfterMs} ms` : `kill at ${point}`}`;
    it(label, { timeout: 400_000 }, async () => {
      const t0 = Date.now();
      const tenant = await H.newTenant(source, 'x');
      const bystander = await H.newTenant(source, 'xb');
      const bystanderOnTarget = await H.newTenant(target, 'xt');
      await H.seed(tenant, 200 + Math.floor(rand() * 400), 1 + Math.floor(rand() * 4));
      await H.seed(bystander, 50, 1);
      await H.seed(bystanderOnTarget, 50, 1);
      const baselines = await Promise.all([tenant, bystander, bystanderOnTarget].map((x) => C.baselineOf(x)));
      const tq = uniq('chaos');
      const faultLog = path.join(C.ARTIFACTS, 'crash', `chaos-${SEED}-${i}.faults.jsonl`);
      fs.mkdirSync(path.dirname(faultLog), { recursive: true });
      fs.writeFileSync(faultLog, '');
      const traffic = await C.startTraffic(`chaos-${SEED}-${i}`, [tenant, bystander, bystanderOnTarget], 20 + Math.floor(rand() * 40));
      let w1: C.ChildWorker | undefined;
      let w2: C.ChildWorker | undefined = undefined as C.ChildWorker | undefined;
      try {
        w1 = C.spawnWorker(tq, byTime ? {} : { faultPoint: point, faultLog });
        await w1.ready;
        const h = await H.startMove(
          suite.client,
          tq,
          H.moveInput(tenant, target, {
            soakSeconds: path_ === 'rollback' ? 600 : 2,
            approveCutover: path_ === 'cancel' ? 'manual' : 'auto',
            copyBatchRows: 20 + Math.floor(rand() * 100),
          }),
        );
        // Whenever the first worker dies (at its fault point or by the timed kill), a fresh one
        // takes over the same task queue.
        const takeover = w1.exited.then(async () => {
          w2 = C.spawnWorker(tq);
          await w2.ready;
        });
        if (byTime) {
          await new Promise((r) => setTimeout(r, killAfterMs));
          w1.proc.kill('SIGKILL');
          await takeover;
        }
        // If the armed point lies on another path, the first worker simply finishes the move.
        const status = await driveToEnd(h, path_, { actor: 'chaos', timeoutMs: 360_000 });
        await new Promise((r) => setTimeout(r, 500));
        await traffic.stop();
        const { owner, epoch } = ownerAfter(path_, source, target);
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
        // Only a real kill counts: SIGKILL, and for an armed point its hit in the fault log. A
        // worker that died any other way crashed; one that lived never reached its point.
        const died = w1.proc.exitCode !== null || w1.proc.signalCode !== null;
        if (died) expect(w1.proc.signalCode, `first worker died by ${w1.proc.signalCode ?? `exit ${w1.proc.exitCode}`}; log ${w1.log}`).toBe('SIGKILL');
        const hit =
          !byTime &&
          fs
            .readFileSync(faultLog, 'utf8')
            .split('\n')
            .some((l) => l && JSON.parse(l).point === point);
        if (died && !byTime) expect(hit, `killed without a hit of ${point} in ${faultLog}`).toBe(true);
        const how = !died ? 'none' : byTime ? 'byTime' : 'atPoint';
        kills[how]++;
        const outcome = died
          ? status.phase
          : `${status.phase} (no kill: ${byTime ? 'the move ended before the timed kill' : `${point} is not on the ${path_} path`})`;
        rows.push({
          faultPoint: label,
          killed: died,
          outcome,
          pause: C.pauseOf(status),
          writesAcked: counts.acked,
          writesRefused: counts.refused,
          unknown: counts.unknown,
          reads: counts.reads,
          verified: 'whole unit',
          seconds: Math.round((Date.now() - t0) / 1000),
        });
      } catch (e) {
        rows.push(C.failedRow(label, w1?.proc.signalCode === 'SIGKILL', e, t0));
        throw e;
      } finally {
        await traffic.stop();
        await C.stopWorker(w1);
        await C.stopWorker(w2);
      }
    });
  }
});
