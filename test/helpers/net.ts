// What the network-fault suites share (test/crash/network.test.ts, test/chaos/network-chaos.test.ts):
// the frozen-window watch of invariant 8 and its bound, a worker stopped at a fault point, and
// the report table (fault, outcome, pause, frozen, acked, refused, verify).
import fs from 'node:fs';
import path from 'node:path';
import { shardPool } from './stack';
import { pauseOf, type ChildWorker, type assertInvariants } from './crash';
import type { MoveStatus } from '../../workflows/messages';
import { sleep } from '../../lib/dev/proc';
import { readLog } from '../../lib/loadgen';
import { FROZEN_NOW_SQL } from '../../lib/shard/fence-sql';

/** The fence budget the network-fault moves run with. */
export const FENCE_BUDGET_MS = 2000;
/** The cutover activity's heartbeat timeout (workflows/move.ts): how long a dead worker takes to notice. */
export const CUTOVER_HEARTBEAT_MS = 5000;
/** The longest the tenant may stay frozen: the fence budget plus the time to notice a dead worker, plus slack for a loaded machine. */
export const FROZEN_BOUND_MS = FENCE_BUDGET_MS + CUTOVER_HEARTBEAT_MS + 3000;

export interface NetRow {
  fault: string;
  outcome: string;
  /** The switching attempt's write pause, and each aborted attempt's (pauseOf). */
  pause: string;
  /** Longest stretch a fence held the tenant frozen, as polled every 50 ms. */
  frozenMs: number | null;
  acked: number;
  refused: number;
  unknown: number | null;
  reads: string | null;
  verified: string;
  seconds: number;
  notes: string;
}

/** The row of a case whose invariants held (`counts` from assertInvariants); `notes` are filled in at its end. */
export function netRow(fault: string, status: MoveStatus, frozenMs: number | null, counts: Awaited<ReturnType<typeof assertInvariants>>, t0: number): NetRow {
  return {
    fault,
    outcome: status.phase,
    pause: pauseOf(status),
    frozenMs,
    acked: counts.acked,
    refused: counts.refused,
    unknown: counts.unknown,
    reads: counts.reads,
    verified: 'whole unit',
    seconds: Math.round((Date.now() - t0) / 1000),
    notes: '',
  };
}

/** A row whose invariants held, failed by a check after them: it keeps their numbers and says why. */
export function failAfter(row: NetRow, e: unknown): void {
  row.outcome = `${row.outcome}, then FAILED: ${String((e as Error)?.message ?? e)
    .split('\n')[0]
    .slice(0, 160)}`;
}

/** Writes the rows as the network report's markdown table to `file`; returns the text. */
export function writeNetReport(rows: NetRow[], file: string): string {
  const head =
    '| fault | outcome | cutover pause ms | longest frozen ms | writes acked (moving tenant) | refused | unknown (all tenants) | reads | verify | seconds | notes |\n|---|---|---|---|---|---|---|---|---|---|---|';
  const body = rows.map(
    (r) =>
      `| ${r.fault} | ${r.outcome} | ${r.pause} | ${r.frozenMs ?? '-'} | ${r.acked} | ${r.refused} | ${r.unknown ?? '-'} | ${r.reads ?? '-'} | ${r.verified} | ${r.seconds} | ${r.notes} |`,
  );
  const text = `${head}\n${body.join('\n')}\n`;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return text;
}

export type FrozenWatch = ReturnType<typeof watchFrozen>;

/** Polls a shard's fence row of the unit (frozen as its route check sees it: lease included); remembers the longest frozen stretch. */
export function watchFrozen(shard: string, unit: string) {
  const pool = shardPool(shard);
  let since: number | undefined;
  let longest = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const r = await pool.query(`select ${FROZEN_NOW_SQL} as frozen from shardctl.fence where unit = $1`, [unit]).catch(() => undefined);
      const now = Date.now();
      if (r?.rows[0]?.frozen) since ??= now;
      else if (r && since !== undefined) {
        longest = Math.max(longest, now - since);
        since = undefined;
      }
      await sleep(50);
    }
  })();
  return {
    /** Longest frozen stretch so far, the current one included. */
    longest: () => Math.max(longest, since !== undefined ? Date.now() - since : 0),
    async stop() {
      stopped = true;
      await loop;
      return this.longest();
    },
  };
}

/** True once the worker, which armed `point` with action 'stop', has logged its hit and stopped itself there. */
export function isStoppedAt(w: ChildWorker, faultLog: string, point: string): boolean {
  const hit = fs.existsSync(faultLog) && fs.readFileSync(faultLog, 'utf8').includes(`"point":"${point}"`);
  if (!hit || exited(w)) return false;
  const stat = fs.readFileSync(`/proc/${w.proc.pid}/stat`, 'utf8');
  return stat[stat.lastIndexOf(')') + 2] === 'T';
}

export function exited(w: ChildWorker): boolean {
  return w.proc.exitCode !== null || w.proc.signalCode !== null;
}

/** Resolves once the worker, which armed a fault point with action 'stop', has stopped itself there. */
export async function stoppedAt(w: ChildWorker, faultLog: string, point: string, timeoutMs = 120_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (isStoppedAt(w, faultLog, point)) return;
    if (exited(w)) throw new Error(`worker exited before ${point}; log ${w.log}`);
    if (Date.now() > deadline) throw new Error(`worker did not reach ${point} within ${timeoutMs} ms; log ${w.log}`);
    await sleep(20);
  }
}

/** Waits for a write of `tenant` acknowledged by `shard` after `since` in the traffic log; returns how long after `since` it came, or throws after `timeoutMs`. */
export async function firstAckAfter(logFile: string, tenant: string, shard: string, since: number, timeoutMs = 30_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ack = readLog(logFile).find((r) => r.tenant === tenant && r.status === 'ack' && r.shard === shard && Date.parse(r.ts) > since);
    if (ack) return Date.parse(ack.ts) - since;
    if (Date.now() > deadline) throw new Error(`no write of ${tenant} was acked on ${shard} within ${timeoutMs} ms of the heal`);
    await sleep(200);
  }
}
