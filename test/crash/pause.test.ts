// The pause nemesis (Jepsen-style): a worker is frozen with SIGSTOP inside the cutover, past its
// heartbeat timeout; a second worker takes the attempt over (a new freeze token) and finishes the
// move; then the first is resumed with SIGCONT. Nothing it does afterwards may change the
// outcome: one owner, no lost or stale write, no frozen unit, no new directory change.
import { describe, it, expect } from 'vitest';
import path from 'node:path';
import fs from 'node:fs';
import { uniq, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';

const rows: string[] = [];
const suite = C.crashSuite({
  report: () => {
    const file = path.join(C.ARTIFACTS, 'crash-pause-report.md');
    const table = `| paused at | outcome | cutover pause ms | writes acked | refused | verify | directory changes after SIGCONT |\n|---|---|---|---|---|---|---|\n${rows.join('\n')}\n`;
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, table);
    process.stdout.write(`\npause nemesis report (${path.relative(process.cwd(), file)}):\n${table}\n`);
  },
});

async function auditCount(unit: string): Promise<number> {
  return (await directoryPool().query('select count(*)::int as n from shardctl.audit where unit = $1', [unit])).rows[0].n;
}

describe('pause nemesis: SIGSTOP a worker inside the cutover, let another take over, then SIGCONT it', () => {
  for (const point of ['after-fence-raised', 'before-switch']) {
    it(`paused at ${point}: the resumed stale attempt changes nothing`, { timeout: 300_000 }, async () => {
      const tenant = await H.newTenant('shard-a', 'p');
      const bystander = await H.newTenant('shard-a', 'pb');
      await H.seed(tenant, 200, 2);
      await H.seed(bystander, 40, 1);
      const baselines = [await C.baselineOf(tenant), await C.baselineOf(bystander)];
      const tq = uniq('pause');
      const faultLog = path.join(C.ARTIFACTS, 'crash', `pause-${point}-${tenant}.faults.jsonl`);
      fs.mkdirSync(path.dirname(faultLog), { recursive: true });
      const traffic = await C.startTraffic(`pause-${point}-${tenant}`, [tenant, bystander]);
      let w1: C.ChildWorker | undefined;
      let w2: C.ChildWorker | undefined;
      try {
        w1 = C.spawnWorker(tq, { faultPoint: point, faultLog, faultAction: 'stop' });
        await w1.ready;
        const h = await H.startMove(suite.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 2, copyBatchRows: 40, fenceBudgetMs: 5000 }));
        // Wait until the first worker has stopped itself at the point.
        for (let i = 0; !(fs.existsSync(faultLog) && fs.readFileSync(faultLog, 'utf8').includes(point)); i++) {
          if (i > 1200) throw new Error(`worker never reached ${point}`);
          await new Promise((r) => setTimeout(r, 100));
        }
        w2 = C.spawnWorker(tq);
        await w2.ready;
        const status = await H.waitPhase(h, 'done', 200_000);
        const changes = await auditCount(tenant);
        // The stale attempt wakes up and runs on.
        w1.proc.kill('SIGCONT');
        await new Promise((r) => setTimeout(r, 8000));
        const after = await auditCount(tenant);
        await traffic.stop();
        expect(after - changes).toBe(0);
        const switches = await directoryPool().query(`select detail->>'freezeToken' as token from shardctl.audit where unit = $1 and action = 'switch'`, [
          tenant,
        ]);
        expect(switches.rowCount).toBe(1);
        const counts = await C.assertInvariants({
          tenant,
          bystanders: [bystander],
          source: 'shard-a',
          target: 'shard-b',
          status,
          expectOwner: 'shard-b',
          expectEpoch: 2,
          traffic,
          baselines,
        });
        rows.push(`| ${point} | ${status.phase} | ${C.pauseOf(status)} | ${counts.acked} | ${counts.refused} | whole unit | ${after - changes} |`);
      } catch (e) {
        rows.push(
          `| ${point} | FAILED: ${String((e as Error).message)
            .split('\n')[0]
            .slice(0, 120)} | - | - | - | - | - |`,
        );
        throw e;
      } finally {
        w1?.proc.kill('SIGCONT');
        await C.stopWorker(w1);
        await C.stopWorker(w2);
        await traffic.stop().catch(() => {});
      }
    });
  }
});
