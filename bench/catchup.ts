// Catch-up: how fast lib/cdc's applyChangesUntil applies a tenant's change stream, against the
// rate the source sustains writing it. Per workload and round:
//  - baseline: pgbench (8 clients, fenced transactions carrying unit and epoch, as the router's
//    do) writes to the tenant on the source for a fixed time: its transactions per second;
//  - ours: applyChangesUntil then applies what was written (to the WAL position at the end of the
//    writes, for at most --apply-seconds) onto the target, from the move's slot: applied
//    transactions per second;
//  - second baseline: native logical replication applies the same backlog from a slot of its own
//    (bench/catchup-native.ts), before or after ours, alternately.
// Workloads: 1-row transactions; mixed multi-table transactions (update a doc without touching its
// TOASTed body, update a comment, insert an event, delete an event); 100-row INSERT statements.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Pool } from 'pg';
import { applyChangesUntil, currentWalLsn, dropPublicationAndSlot, ensurePublicationAndSlot } from '../lib/cdc';
import { replicationNames } from '../lib/ids';
import type { TenantTable } from '../lib/shard/tables';
import { SCHEMA, RowCounts, truncateTarget } from './setup';
import { copyTenant } from '../lib/copy';
import { timed } from './measure';

export type Workload = '1-row tx' | 'mixed multi-table tx' | '100-row statements';
export const WORKLOADS: Workload[] = ['1-row tx', 'mixed multi-table tx', '100-row statements'];

export interface RateSample {
  transactions: number;
  seconds: number;
}

export interface CatchUpContext {
  source: Pool;
  target: Pool;
  sourceDsn: string;
  tables: TenantTable[];
  tenant: string;
  tenantColumn: string;
  counts: RowCounts;
  clients: number;
  writeSeconds: number;
}

const MOVE_ID = 'bench-catchup';

export function pgbenchScript(w: Workload, tenant: string, counts: RowCounts): string {
  const fence = `SELECT set_config('shardctl.unit', '${tenant}', true), set_config('shardctl.epoch', '1', true);`;
  const insertEvent = (kind: number, doc: string) =>
    `INSERT INTO ${SCHEMA}.events (tenant_id, id, kind, at, value, doc_id) VALUES ('${tenant}', nextval('${SCHEMA}.event_ids'), ${kind}, now(), random(), ${doc});`;
  switch (w) {
    case '1-row tx':
      return ['BEGIN;', fence, insertEvent(1, '1'), 'COMMIT;'].join('\n');
    case 'mixed multi-table tx':
      return [
        `\\set doc random(1, ${counts.docs})`,
        `\\set ev random(1, ${counts.events})`,
        'BEGIN;',
        fence,
        `UPDATE ${SCHEMA}.docs SET title = 'edited ' || :doc, version = version + 1, updated_at = now() WHERE tenant_id = '${tenant}' AND id = :doc;`,
        `UPDATE ${SCHEMA}.comments SET body = 'edited at ' || now() WHERE tenant_id = '${tenant}' AND doc_id = :doc AND n = 1;`,
        insertEvent(2, ':doc'),
        `DELETE FROM ${SCHEMA}.events WHERE tenant_id = '${tenant}' AND id = :ev;`,
        'COMMIT;',
      ].join('\n');
    case '100-row statements':
      return [
        'BEGIN;',
        fence,
        `INSERT INTO ${SCHEMA}.events (tenant_id, id, kind, at, value, doc_id) SELECT '${tenant}', nextval('${SCHEMA}.event_ids'), 3, now(), g, 1 FROM generate_series(1, 100) g;`,
        'COMMIT;',
      ].join('\n');
  }
}

/** pgbench's summary: transactions processed, failed, and tps (without connection time). */
export function parsePgbench(out: string): { transactions: number; failed: number; tps: number } {
  const n = /number of transactions actually processed: (\d+)/.exec(out);
  const failed = /number of failed transactions: (\d+)/.exec(out);
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(out);
  if (!n || !tps) throw new Error(`cannot read pgbench output:\n${out.slice(-2000)}`);
  return { transactions: Number(n[1]), failed: failed ? Number(failed[1]) : 0, tps: Number(tps[1]) };
}

export async function runPgbench(dsn: string, script: string, clients: number, seconds: number): Promise<RateSample> {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-bench-')), 'workload.sql');
  fs.writeFileSync(file, script + '\n');
  try {
    const out = await new Promise<string>((resolve, reject) => {
      const p = spawn('pgbench', ['-n', '-f', file, '-c', String(clients), '-j', String(Math.min(clients, 2)), '-T', String(seconds), dsn], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, PGAPPNAME: 'bench-pgbench' },
      });
      let text = '';
      p.stdout.on('data', (c) => (text += c));
      p.stderr.on('data', (c) => (text += c));
      p.on('error', reject);
      p.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`pgbench exited with ${code}:\n${text.slice(-2000)}`))));
    });
    const r = parsePgbench(out);
    if (r.failed > 0) throw new Error(`pgbench: ${r.failed} transactions failed`);
    return { transactions: r.transactions, seconds: r.transactions / r.tps };
  } finally {
    fs.rmSync(path.dirname(file), { recursive: true, force: true });
  }
}

/**
 * As a move starts its stream: the slot, then the move's own copy of the tenant (lib/copy, into
 * the emptied target), so the applier finds the copy's checkpoints as in a move (its inserts after
 * the copy's end go by COPY, lib/cdc/applier.ts InsertsByCopy).
 */
export async function setupCatchUp(ctx: CatchUpContext): Promise<void> {
  await teardownCatchUp(ctx);
  await ensurePublicationAndSlot(ctx.source, { ...replicationNames(MOVE_ID, 'forward'), tables: ctx.tables, tenantColumn: ctx.tenantColumn, unit: ctx.tenant });
  await truncateTarget(ctx.target, SCHEMA);
  await copyTenant({ source: ctx.source, target: ctx.target, tables: ctx.tables, tenantColumn: ctx.tenantColumn, unit: ctx.tenant, moveId: MOVE_ID });
}

/**
 * Applies what the source has written so far, for at most `maxSeconds` (a slow apply would
 * otherwise take the bench's whole budget; what it leaves stays in the slot for the next round):
 * the rate is applied transactions per second. `untilLsn` (default: the source's WAL position now)
 * is where the writes ended, when another side may have written to the source since.
 */
export async function applyBacklog(ctx: CatchUpContext, expected: number, maxSeconds: number, untilLsn?: string): Promise<RateSample> {
  untilLsn ??= await currentWalLsn(ctx.source);
  const { value, seconds } = await timed(() =>
    applyChangesUntil({
      sourceDsn: ctx.sourceDsn,
      target: ctx.target,
      ...replicationNames(MOVE_ID, 'forward'),
      moveId: MOVE_ID,
      stream: 'forward',
      untilLsn,
      maxDurationMs: maxSeconds * 1000,
    }),
  );
  const complete = value.stopReason === 'until' && value.transactionsApplied >= expected;
  if (!complete && !(value.stopReason === 'deadline' && value.transactionsApplied > 0)) {
    throw new Error(`catch-up stopped (${value.stopReason}) after ${value.transactionsApplied} of ${expected} transactions`);
  }
  return { transactions: value.transactionsApplied, seconds };
}

export async function teardownCatchUp(ctx: Pick<CatchUpContext, 'source' | 'target'>): Promise<void> {
  await dropPublicationAndSlot(ctx.source, replicationNames(MOVE_ID, 'forward'));
  await ctx.target.query(`delete from shardctl.move_progress where move_id = $1`, [MOVE_ID]);
}
