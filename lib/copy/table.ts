// Copies one tenant table's rows of a unit from source to target in primary-key order, in
// COPY-based batches of about `batchBytes` each, resumable from the checkpoint committed with each
// batch (checkpoint.ts).
//
// One batch:
//   target: BEGIN; replica role; lock the checkpoint row (resume point = what is committed)
//   source: BEGIN REPEATABLE READ READ ONLY; the key N rows past the checkpoint (or the unit's
//           last key: the final batch), read off the primary key index;
//           COPY (SELECT ... WHERE unit AND key in (lastKey, endKey] ORDER BY key) TO STDOUT
//   target: COPY ... FROM STDIN straight into the table (piped, never buffered whole in memory);
//           advance the checkpoint; COMMIT — the rows and the checkpoint in one transaction.
// Direct path: no row of the batch can be on the target yet, because every row up to the
// checkpoint came with it and none past it was ever committed without it. That holds unless
// something else wrote the unit there (a re-copy after the checkpoint was cleared, a copy over an
// earlier move's leftovers): the copy checks at its start and then takes the upsert path — COPY
// into a temp staging table, INSERT ... ON CONFLICT (pk) DO UPDATE — and a unique violation on the
// direct path (a row the check could not see) redoes that batch, and the rest, by upsert.
// The batch bounds come from the source, in the source's own key order, so nothing depends on
// the target's collation and no binary row is ever parsed here. Rows committed after the move's
// slot was created are the change stream's job, which is why the final, short batch marks the
// table done.
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
  SOURCE_PLAN_SQL,
  assertCopyable,
  batchKeyQuery,
  copyIntoStageSql,
  copyIntoTableSql,
  copyOutSql,
  copyStreamName,
  createStageSql,
  targetRowsPastQuery,
  upsertFromStageSql,
} from './sql';
import { CopyCheckpoint, lockCheckpoint, readCheckpoint, writeCheckpoint } from './checkpoint';
import { chooseCopyFormat } from './format';
import { BatchSample, DEFAULT_BATCH_BYTES, DEFAULT_MAX_BATCH_ROWS, nextBatchRows } from './batch-size';
import { DEFAULT_MAX_SOURCE_ACTIVE, rateDelayMs, sleep, waitForSourceCapacity } from './throttle';

export interface CopyBatchProgress {
  /** `schema.table` */
  table: string;
  /** Total rows copied for this table by the move so far (across resumes). */
  rowsCopied: number;
  /** Total COPY stream bytes of those rows. */
  bytesCopied: number;
  lastKey: Key;
}

/** 'direct': COPY into the table; 'upsert': COPY into staging, then INSERT ... ON CONFLICT. */
export type CopyPath = 'direct' | 'upsert';

export interface CopyTableInput {
  source: Pool;
  target: Pool;
  table: TenantTable;
  tenantColumn: string;
  unit: string;
  moveId: string;
  /** At most this many rows per batch (default 1,000,000); batches are sized by `batchBytes`. */
  batchRows?: number;
  /** About this many COPY stream bytes per batch (default 32 MiB). */
  batchBytes?: number;
  /** 0 or absent = unlimited. */
  rowsPerSecond?: number;
  /** Pause while the source has more active client backends than this (0 = never). Default 32. */
  maxSourceActive?: number;
  signal?: AbortSignal;
  /** Called after each batch commits; a throw stops the copy (the batch stays committed). */
  onBatch?: (p: CopyBatchProgress) => Promise<void> | void;
  /** Called while the copy waits for the source to calm down (a chance to heartbeat). */
  onWait?: (reason: string) => void;
  /** Called at most once a second while a batch streams (a chance to heartbeat mid-batch). */
  onStreaming?: (p: { table: string; rowsCopied: number; bytesInBatch: number }) => void;
}

const STREAMING_REPORT_MS = 1000;

export interface CopyTableResult {
  table: string;
  /** Total rows copied by the move for this table, including before a resume. */
  rowsCopied: number;
  /** Total COPY stream bytes of those rows. */
  bytesCopied: number;
  /** Batches committed by this call. */
  batches: number;
  format: 'binary' | 'text';
  /** The path this call ended on (upsert when target rows were found past the checkpoint). */
  path: CopyPath;
  done: true;
}

export function validateCopyInput(i: Pick<CopyTableInput, 'unit' | 'moveId' | 'batchRows' | 'batchBytes' | 'table' | 'tenantColumn'>): void {
  validateTenantId(i.unit);
  if (typeof i.moveId !== 'string' || i.moveId.length === 0) throw invalidInput('move id is empty');
  if (i.batchRows !== undefined && (!Number.isInteger(i.batchRows) || i.batchRows < 1)) {
    throw invalidInput(`batchRows must be a positive integer, got ${i.batchRows}`);
  }
  if (i.batchBytes !== undefined && (!Number.isInteger(i.batchBytes) || i.batchBytes < 1)) {
    throw invalidInput(`batchBytes must be a positive integer, got ${i.batchBytes}`);
  }
  assertCopyable(i.table, i.tenantColumn);
}

/** A unique violation on the direct path: some row of the batch was on the target already. */
class RowAlreadyOnTarget extends Error {}

export async function copyTenantTable(input: CopyTableInput): Promise<CopyTableResult> {
  validateCopyInput(input);
  const { table, signal } = input;
  const name = `${table.schema}.${table.name}`;
  const stream = copyStreamName(table);
  // A throttled copy takes at most one second's worth per batch, so the pace stays even.
  const maxRows = Math.min(input.batchRows ?? DEFAULT_MAX_BATCH_ROWS, input.rowsPerSecond ? Math.max(1, input.rowsPerSecond) : Infinity);
  const batchBytes = input.batchBytes ?? DEFAULT_BATCH_BYTES;
  signal?.throwIfAborted();

  let src: PoolClient | undefined = await input.source.connect();
  let tgt: PoolClient | undefined;
  let broken: Error | undefined;
  try {
    tgt = await input.target.connect();
    const { format } = await chooseCopyFormat(src, table);
    let path = await choosePath(tgt, input, stream);
    const startedAt = Date.now();
    let batches = 0;
    let rowsThisCall = 0;
    let last: BatchSample | null = null;
    for (;;) {
      signal?.throwIfAborted();
      await sleep(rateDelayMs(rowsThisCall, startedAt, input.rowsPerSecond ?? 0), signal);
      await waitForSourceCapacity(src, input.maxSourceActive ?? DEFAULT_MAX_SOURCE_ACTIVE, signal, input.onWait);

      let step: BatchStep;
      try {
        step = await copyOneBatch(src, tgt, input, stream, format, path, (cp) => nextBatchRows(last ?? resumeSample(cp), batchBytes, maxRows));
      } catch (err) {
        if (!(err instanceof RowAlreadyOnTarget)) throw err;
        // The source connection was mid-COPY when the target refused: replace it (the target
        // rolled back cleanly). This batch and the rest take the upsert path.
        src.release(err);
        src = undefined;
        src = await input.source.connect();
        path = 'upsert';
        continue;
      }
      const cp = step.checkpoint;
      const result = (): CopyTableResult => ({ table: name, rowsCopied: cp.rowsCopied, bytesCopied: cp.bytesCopied, batches, format, path, done: true });
      if (step.kind === 'done') return result();
      batches++;
      rowsThisCall += step.rows;
      last = { rows: step.rows, bytes: step.bytes };
      await input.onBatch?.({ table: name, rowsCopied: cp.rowsCopied, bytesCopied: cp.bytesCopied, lastKey: cp.lastKey! });
      if (cp.done) return result();
    }
  } catch (err) {
    broken = err as Error;
    throw err;
  } finally {
    // After a failure mid-COPY the protocol state is not worth trusting: drop the connections.
    src?.release(broken);
    tgt?.release(broken);
  }
}

/** The direct path unless the target already holds a row of the unit past the checkpoint. */
async function choosePath(tgt: PoolClient, input: CopyTableInput, stream: string): Promise<CopyPath> {
  const cp = await readCheckpoint(tgt, input.moveId, stream);
  if (cp.done) return 'direct';
  const r = await tgt.query(targetRowsPastQuery(input.table, input.tenantColumn, cp.lastKey !== null), [input.unit, ...(cp.lastKey ?? [])]);
  return (r.rowCount ?? 0) > 0 ? 'upsert' : 'direct';
}

/** On resume, the checkpoint's own bytes per row size the first batch. */
function resumeSample(cp: CopyCheckpoint): BatchSample | null {
  return cp.rowsCopied > 0 && cp.bytesCopied > 0 ? { rows: cp.rowsCopied, bytes: cp.bytesCopied } : null;
}

type BatchStep = { kind: 'done'; checkpoint: CopyCheckpoint } | { kind: 'copied'; rows: number; bytes: number; checkpoint: CopyCheckpoint };

/** Read on the source inside a batch's snapshot, after its reads: later commits were seen by no batch. */
const DONE_AT_LSN_SQL = 'select pg_catalog.pg_current_wal_insert_lsn()::text as lsn';

async function copyOneBatch(
  src: PoolClient,
  tgt: PoolClient,
  input: CopyTableInput,
  stream: string,
  format: 'binary' | 'text',
  path: CopyPath,
  batchRowsFor: (cp: CopyCheckpoint) => number,
): Promise<BatchStep> {
  const { table, tenantColumn, unit, moveId } = input;
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
    await src.query(SOURCE_PLAN_SQL);
    const rows = batchRowsFor(cp);
    const bound = [unit, ...(cp.lastKey ?? [])];
    const keyOf = (r: { rows: unknown[] }) => (r.rows.length ? (r.rows[0] as unknown[]).map(String) : null);
    const hasBound = cp.lastKey !== null;
    let endKey = keyOf(await src.query({ text: batchKeyQuery(table, tenantColumn, hasBound, { offset: rows - 1 }), values: bound, rowMode: 'array' }));
    // Fewer than `rows` rows left: this is the final batch, up to the unit's last key.
    const final = endKey === null;
    endKey ??= keyOf(await src.query({ text: batchKeyQuery(table, tenantColumn, hasBound, 'last'), values: bound, rowMode: 'array' }));
    if (endKey === null) {
      // After this snapshot, the table's last: see CopyCheckpoint.doneAtLsn.
      const at = await src.query<{ lsn: string }>(DONE_AT_LSN_SQL);
      await src.query('commit');
      srcOpen = false;
      const finished = { ...cp, done: true, doneAtLsn: at.rows[0].lsn };
      await writeCheckpoint(tgt, moveId, stream, finished);
      await tgt.query('commit');
      return { kind: 'done', checkpoint: finished };
    }

    if (path === 'upsert') await tgt.query(createStageSql(table));
    const out = src.query(copyTo(copyOutSql(table, tenantColumn, unit, cp.lastKey, endKey, format)));
    let bytes = 0;
    let reportedAt = Date.now();
    out.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (input.onStreaming && Date.now() - reportedAt >= STREAMING_REPORT_MS) {
        reportedAt = Date.now();
        input.onStreaming({ table: `${table.schema}.${table.name}`, rowsCopied: cp.rowsCopied, bytesInBatch: bytes });
      }
    });
    const into = tgt.query(copyFrom(path === 'upsert' ? copyIntoStageSql(table, format) : copyIntoTableSql(table, format)));
    try {
      await pipeline(out, into);
    } catch (err: any) {
      // An interrupted COPY OUT leaves the source connection unusable: no rollback there, the
      // caller drops it (the read-only snapshot goes with it).
      srcOpen = false;
      if (path === 'direct' && err?.code === '23505') throw new RowAlreadyOnTarget(`${table.qualified}: ${err.message}`);
      throw err;
    }
    // The table's last source snapshot: see CopyCheckpoint.doneAtLsn.
    const doneAtLsn = final ? (await src.query<{ lsn: string }>(DONE_AT_LSN_SQL)).rows[0].lsn : null;
    await src.query('commit');
    srcOpen = false;
    const copied = into.rowCount;
    // Cannot happen in one snapshot; if it does, refuse to checkpoint a guess.
    if (copied !== out.rowCount || (!final && copied !== rows) || copied === 0) {
      throw new Error(`copy of ${table.qualified}: batch wrote ${copied} rows, source sent ${out.rowCount}${final ? '' : ` of ${rows} counted`}`);
    }

    if (path === 'upsert') await tgt.query(upsertFromStageSql(table));
    const next: CopyCheckpoint = {
      lastKey: endKey,
      rowsCopied: cp.rowsCopied + copied,
      bytesCopied: cp.bytesCopied + bytes,
      batches: cp.batches + 1,
      done: final,
      ...(final ? { doneAtLsn } : {}),
    };
    await writeCheckpoint(tgt, moveId, stream, next);
    await tgt.query('commit');
    return { kind: 'copied', rows: copied, bytes, checkpoint: next };
  } catch (err) {
    if (srcOpen) await src.query('rollback').catch(() => {});
    await tgt.query('rollback').catch(() => {});
    throw err;
  }
}
