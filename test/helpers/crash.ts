// The crash suite's harness: real worker child processes (killed with SIGKILL at armed fault
// points), live loadgen on the moving tenant and a bystander, and the invariant checks of
// DESIGN.md §5 after each case. Each case returns a row of the suite's report table.
import { spawn, ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';
import type { WorkflowHandle } from '@temporalio/client';
import { testConfig, uniq, shardPool } from './stack';
import * as H from './move';
import { Router } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { startLoadgen, verifyLog, readLog, LoadgenHandle } from '../../lib/loadgen';
import type { MoveStatus } from '../../workflows/messages';

const ROOT = path.join(__dirname, '..', '..');
export const ARTIFACTS = path.join(ROOT, 'test-results');
export const BUNDLE = path.join(ROOT, '.dev', 'workflow-bundle.js');

export interface ChildWorker {
  proc: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  ready: Promise<void>;
  log: string;
}

export function spawnWorker(taskQueue: string, opts: { faultPoint?: string; faultLog?: string } = {}): ChildWorker {
  const log = path.join(ARTIFACTS, 'crash', `worker-${taskQueue}-${Date.now()}.log`);
  fs.mkdirSync(path.dirname(log), { recursive: true });
  const out = fs.openSync(log, 'a');
  const env: NodeJS.ProcessEnv = { ...process.env, SHARDCTL_WORKFLOW_BUNDLE: BUNDLE, SHARDCTL_FAULT_POINT: opts.faultPoint ?? '', SHARDCTL_FAULT_LOG: opts.faultLog ?? '' };
  const proc = spawn(process.execPath, [path.join(ROOT, 'cli', 'shardctl.js'), 'worker', '--task-queue', taskQueue], { cwd: ROOT, env, stdio: ['ignore', out, out] });
  fs.closeSync(out);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
  const ready = (async () => {
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      if (fs.readFileSync(log, 'utf8').includes('worker: polling')) return;
      if (proc.exitCode !== null) throw new Error(`worker exited early: ${fs.readFileSync(log, 'utf8').slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('worker did not start within 60s');
  })();
  return { proc, exited, ready, log };
}

export async function stopWorker(w: ChildWorker | undefined) {
  if (!w || w.proc.exitCode !== null || w.proc.signalCode !== null) return;
  w.proc.kill('SIGTERM');
  const t = setTimeout(() => w.proc.kill('SIGKILL'), 15_000);
  await w.exited;
  clearTimeout(t);
}

export interface Traffic {
  lg: LoadgenHandle;
  logFile: string;
  stop(): Promise<void>;
}

export async function startTraffic(name: string, tenants: string[], rate = 40): Promise<Traffic> {
  const config = testConfig();
  const router = await Router.create(config);
  const deps = createDeps(config);
  const logFile = path.join(ARTIFACTS, 'crash', `${name}.jsonl`);
  fs.rmSync(logFile, { force: true });
  const lg = startLoadgen({ config, router, s3For: (s) => deps.s3For(s), tenants, rate, durationMs: 600_000, logFile, concurrency: 4 });
  return {
    lg,
    logFile,
    async stop() {
      lg.stop();
      await lg.done.catch(() => {});
      await router.close();
      await deps.close();
    },
  };
}

export interface CaseRow {
  faultPoint: string;
  killed: boolean;
  outcome: string;
  pauseMs: number | null;
  writesAcked: number;
  writesRefused: number;
  verified: string;
  seconds: number;
}

/** DESIGN.md §5 after a case: verify, single owner, epochs, fences, leftovers, bystander. */
export async function assertInvariants(o: {
  tenant: string;
  bystander: string;
  source: string;
  target: string;
  status: MoveStatus;
  expectOwner: string;
  expectEpoch: number;
  traffic: Traffic;
}): Promise<{ acked: number; refused: number }> {
  const config = testConfig();
  const report = await verifyLog({ logFile: o.traffic.logFile, config });
  expect({ missing: report.missing, wrong: report.wrongValue, refused: report.presentButRefused, deleted: report.presentButDeleted, blobs: report.blobMissing })
    .toEqual({ missing: [], wrong: [], refused: [], deleted: [], blobs: [] });
  expect(report.ok).toBe(true);
  // Exactly one owner, epoch raised by exactly the number of switches.
  const p = await H.placement(o.tenant);
  expect(p).toMatchObject({ shard: o.expectOwner, epoch: o.expectEpoch, state: 'active', moveId: null });
  // The non-owner refuses writes under every epoch; the owner refuses every older one.
  const other = o.expectOwner === o.source ? o.target : o.source;
  for (let e = 1; e <= o.expectEpoch; e++) {
    expect(await H.tryWrite(other, o.tenant, e), `${other} epoch ${e}`).toBe('SC421');
    expect(await H.tryWrite(o.expectOwner, o.tenant, e), `${o.expectOwner} epoch ${e}`).toBe(e === o.expectEpoch ? 'ok' : 'SC421');
  }
  // Nothing of the move is left: slots, publications, progress rows, manifests.
  expect(await H.replicationLeftovers(o.status.moveId)).toEqual([]);
  for (const s of [o.source, o.target]) {
    const pr = await shardPool(s).query('select count(*)::int as n from shardctl.move_progress where move_id = $1', [o.status.moveId]);
    expect(pr.rows[0].n, `move_progress on ${s}`).toBe(0);
  }
  // The non-owner holds no rows of the tenant once the move is done, cancelled or rolled back.
  expect(await H.rowCount(other, o.tenant)).toBe(0);
  // The bystander never saw an error: every one of its writes was acknowledged.
  const records = readLog(o.traffic.logFile);
  const by = records.filter((r) => r.tenant === o.bystander && r.status !== 'pending');
  expect(by.length).toBeGreaterThan(0);
  expect(by.filter((r) => r.status !== 'ack').map((r) => `${r.status} ${r.error ?? ''}`)).toEqual([]);
  const mine = records.filter((r) => r.tenant === o.tenant);
  return { acked: mine.filter((r) => r.status === 'ack').length, refused: mine.filter((r) => r.status === 'refused').length };
}

export function writeReport(rows: CaseRow[], file = path.join(ARTIFACTS, 'crash-report.md')) {
  const head = '| fault point | worker killed | outcome | cutover pause ms | writes acked (moving tenant) | refused | verify | seconds |\n|---|---|---|---|---|---|---|---|';
  const body = rows.map((r) => `| ${r.faultPoint} | ${r.killed ? 'SIGKILL' : '-'} | ${r.outcome} | ${r.pauseMs ?? '-'} | ${r.writesAcked} | ${r.writesRefused} | ${r.verified} | ${r.seconds} |`);
  const text = `${head}\n${body.join('\n')}\n`;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
  return text;
}

export async function waitKilled(w: ChildWorker, faultLog: string, point: string, timeoutMs = 120_000): Promise<void> {
  const t = new Promise<never>((_, rej) => setTimeout(() => rej(new Error(`worker was not killed at ${point} within ${timeoutMs} ms; log ${w.log}`)), timeoutMs).unref());
  const r = await Promise.race([w.exited, t]);
  expect(r.signal).toBe('SIGKILL');
  const hits = fs.readFileSync(faultLog, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  expect(hits.map((h) => h.point)).toContain(point);
}

export type Handle = WorkflowHandle;
export { uniq };
