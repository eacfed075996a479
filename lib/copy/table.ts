// Copies one tenant table's rows of a unit from source to target in primary-key order, in
// COPY-based batches, resumable from the checkpoint committed with each batch (checkpoint.ts).
//
// One batch:
//   target: BEGIN; replica role; lock the checkpoint row (resume point = what is committed)
//   source: BEGIN REPEATABLE READ READ ONLY; find the batch's last key and row count;
//           COPY (SELECT ... WHERE unit AND key in (lastKey, endKey] ORDER BY key) TO STDOUT
//   target: COPY into a temp staging table FROM STDIN (piped, never buffered whole in memory);
//           INSERT ... SELECT FROM staging ON CONFLICT (pk) DO UPDATE; advance checkpoint; COMMIT
// The batch bounds come from the source, in the source's own key order, so nothing depends on
// the target's collation and no binary row is ever parsed here. Upserts make a batch that is
// re-run after a crash harmless. Rows committed after the move's slot was created are the change
// stream's job, which is why a short batch may mark the table done.
import type { Pool, PoolClient } from 'pg';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';
import { pipeline } from 'node:stream/promises';
import type { TenantTable } from '../shard/tables';
import { validateTenantId } from '../ids';
import { invalidInput } from '../errors';
import {
  Key,
  STABLE_TEXT_SETTINGS_SQL,
  REPLICA_ROLE_SQL,
  assertCopyable,
  batchEndQuery,
  copyInSql,
  copyOutSql,
  copyStreamName,
  createStageSql,
  upsertFromStageSql,
} from './sql';
import { CopyCheckpoint, lockCheckpoint, writeCheckpoint } from './checkpoint';
import { chooseCopyFormat } from './format';
import { DEFAULT_MAX_SOURCE_ACTIVE, rateDelayMs, sleep, waitForSourceCapacity } from './throttle';

export interface CopyBatchProgress {
  /** `schema.table` */
  table: string;
  /** Total rows copied for this table by the move so far (across resumes). */
  rowsCopied: number;
  lastKey: Key;
}

export interface CopyTableInput {
  source: Pool;
  target: Pool;
  table: TenantTable;
  tenantColumn: string;
  unit: string;
  moveId: string;
  batchRows: number;
  /** 0 or absent = unlimited. */
  rowsPerSecond?: number;
  /** Pause while the source has more active client backends than this (0 = never). Default 32. */
  maxSourceActive?: number;
  signal?: AbortSignal;
  /** Called after each batch commits; a throw stops the copy (the batch stays committed). */
  onBatch?: (p: CopyBatchProgress) => Promise<void> | void;
  /** Called while the copy waits for the source to calm down (a chance to heartbeat). */
  onWait?: (reason: string) => void;
}

export interface CopyTableResult {
  table: string;
  /** Total rows copied by the move for this table, including before a resume. */
  rowsCopied: number;
  /** Batches committed by this call. */
  batches: number;
  format: 'binary' | 'text';
  done: true;
}

export function validateCopyInput(i: Pick<CopyTableInput, 'unit' | 'moveId' | 'batchRows' | 'table' | 'tenantColumn'>): void {
  validateTenantId(i.unit);
  if (typeof i.moveId !== 'string' || i.moveId.length === 0) throw invalidInput('move id is empty');
  if (!Number.isInteger(i.batchRows) || i.batchRows < 1) throw invalidInput(`batchRows must be a positive integer, got ${i.batchRows}`);
  assertCopyable(i.table, i.tenantColumn);
}

export async function copyTenantTable(input: CopyTableInput): Promise<CopyTableResult> {
  validateCopyInput(input);
  const { table, tenantColumn, unit, moveId, batchRows, signal } = input;
  const name = `${table.schema}.${table.name}`;
  const stream = copyStreamName(table);
  signal?.throwIfAborted();

  const src = await input.source.connect();
  let tgt: PoolClient | undefined;
  let broken: Error | undefined;
  try {
    tgt = await input.target.connect();
    const { format } = await chooseCopyFormat(src, table);
    const startedAt = Date.now();
    let batches = 0;
    let rowsThisCall = 0;
    for (;;) {
      signal?.throwIfAborted();
      await sleep(rateDelayMs(rowsThisCall, startedAt, input.rowsPerSecond ?? 0), signal);
      await waitForSourceCapacity(src, input.maxSourceActive ?? DEFAULT_MAX_SOURCE_ACTIVE, signal, input.onWait);

      const step = await copyOneBatch(src, tgt, input, stream, format);
      if (step.kind === 'done') return { table: name, rowsCopied: step.checkpoint.rowsCopied, batches, format, done: true };
      batches++;
      rowsThisCall += step.rows;
      await input.onBatch?.({ table: name, rowsCopied: step.checkpoint.rowsCopied, lastKey: step.checkpoint.lastKey! });
      if (step.checkpoint.done) return { table: name, rowsCopied: step.checkpoint.rowsCopied, batches, format, done: true };
    }
  } catch (err) {
    broken = err as Error;
    throw err;
  } finally {
    // After a failure mid-COPY the protocol state is not worth trusting: drop the connections.
    src.release(broken);
    tgt?.release(broken);
  }
}

type BatchStep = { kind: 'done'; checkpoint: CopyCheckpoint } | { kind: 'copied'; rows: number; checkpoint: CopyCheckpoint };

async function copyOneBatch(src: PoolClient, tgt: PoolClient, input: CopyTableInput, stream: string, format: 'binary' | 'text'): Promise<BatchStep> {
  const { table, tenantColumn, unit, moveId, batchRows } = input;
  await tgt.query('begin');
  let srcOpen = false;
  try {
    await tgt.query(REPLICA_ROLE_SQL);
    await tgt.query(STABLE_TEXT_SETTINGS_SQL);
    const cp = await lockCheckpoint(tgt, moveId, stream);
    if (cp.done) {
      await tgt.query('commit');
      return { kind: 'done', checkpoint: cp };
    }

    await src.query('begin isolation level repeatable read read only');
    srcOpen = true;
    await src.query(STABLE_TEXT_SETTINGS_SQL);
    const ends = await src.query({
      text: batchEndQuery(table, tenantColumn, cp.lastKey !== null, batchRows),
      values: [unit, ...(cp.lastKey ?? [])],
      rowMode: 'array',
    });
    if (ends.rows.length === 0) {
      await src.query('commit');
      srcOpen = false;
      const finished = { ...cp, done: true };
      await writeCheckpoint(tgt, moveId, stream, finished);
      await tgt.query('commit');
      return { kind: 'done', checkpoint: finished };
    }
    const row = ends.rows[0] as (string | null)[];
    const endKey = row.slice(0, table.primaryKey.length).map(String);
    const expected = Number(row[table.primaryKey.length]);

    await tgt.query(createStageSql(table));
    const out = src.query(copyTo(copyOutSql(table, tenantColumn, unit, cp.lastKey, endKey, format)));
    const into = tgt.query(copyFrom(copyInSql(table, format)));
    await pipeline(out, into);
    await src.query('commit');
    srcOpen = false;
    if (into.rowCount !== expected) {
      // Cannot happen in one snapshot; if it does, refuse to checkpoint a guess.
      throw new Error(`copy of ${table.qualified}: batch staged ${into.rowCount} rows, source counted ${expected}`);
    }

    await tgt.query(upsertFromStageSql(table));
    const next: CopyCheckpoint = {
      lastKey: endKey,
      rowsCopied: cp.rowsCopied + expected,
      batches: cp.batches + 1,
      done: expected < batchRows,
    };
    await writeCheckpoint(tgt, moveId, stream, next);
    await tgt.query('commit');
    return { kind: 'copied', rows: expected, checkpoint: next };
  } catch (err) {
    if (srcOpen) await src.query('rollback').catch(() => {});
    await tgt.query('rollback').catch(() => {});
    throw err;
  }
}
