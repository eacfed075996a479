// copy, catch-up and validate: the data-moving activities. Each resumes from the checkpoint
// committed next to the data on the receiving shard, so a redelivery or a kill loses at most
// one batch of work and never applies anything twice.
import { randomUUID } from 'node:crypto';
import { shardByName } from '../../lib/config';
import { z } from 'zod';
import type { Deps } from '../deps';
import {
  moveRef,
  rowsOf,
  subUnitStream,
  unitTables,
  beat,
  activitySignal,
  parse,
  typed,
  typedByProgress,
  priorHeartbeat,
  syncUnitBlobs,
  compareUnitBlobs,
  unitIndex,
} from './context';
import { replicationNames } from '../../lib/ids';
import { ensurePublicationAndSlot, applyChangesUntil, currentWalLsn, slotLagBytes } from '../../lib/cdc';
import { copyTenantTable, copyProgress } from '../../lib/copy';
import { recordReverseStart, hasStreamProgress } from '../../lib/cdc/progress';
import { deltaTokenOf, readValidated, saveValidated, startDelta } from '../../lib/cdc/delta';
import { switchDetail } from '../../lib/directory/moves';
import { validateTenant, formatMismatch, persistentMismatches, type TenantValidation, type ValidationProgress } from '../../lib/validate';
import { recordedValidation, rowsIn, type RecordedValidation } from '../../lib/validate/progress';
import { recordManifest, ensureManifestTable } from '../../lib/blobs';
import { activityLog } from '../../lib/obs/log';

const direction = z.enum(['forward', 'reverse']);

/** The (from, to) shards of a replication direction. */
export function ends(ref: { source: string; target: string }, dir: 'forward' | 'reverse') {
  return dir === 'forward' ? { from: ref.source, to: ref.target } : { from: ref.target, to: ref.source };
}

/** `shard-a → shard-b` in the direction of the stream: the heartbeat's words for where data flows. */
const flow = (ref: { source: string; target: string }, dir: 'forward' | 'reverse') => {
  const { from, to } = ends(ref, dir);
  return `${from} → ${to}`;
};

const setupInput = moveRef.extend({ direction });
/** `validation` names the move's request (v1, v2, ...): its attempts resume the ranges it recorded. Absent from older workflows. */
const validateInput = setupInput.extend({ validation: z.string().min(1).max(40).optional() });
const copyInput = moveRef.extend({
  table: z.string().min(1),
  /** At most this many rows per batch; absent: batches sized in bytes only (lib/copy/batch-size.ts). */
  batchRows: z.number().int().positive().optional(),
  rowsPerSecond: z.number().int().nonnegative(),
});
const catchUpInput = moveRef.extend({
  direction,
  maxDurationMs: z.number().int().positive(),
  idleStopMs: z.number().int().positive().optional(),
  /** 'now': apply up to the sender's WAL position at the start of the call (a catch-up round);
   *  'continuous': keep applying until the time budget ends (soak). */
  mode: z.enum(['now', 'continuous']).default('now'),
  /** Apply throttle (0 = unlimited); the cutover's final apply is never throttled. */
  rowsPerSecond: z.number().int().nonnegative().default(0),
});

export function createDataActivities(deps: Deps) {
  /**
   * Rows and COPY bytes of each (move, table) this worker has counted in `shardctl_rows_copied_total`
   * and `shardctl_copy_bytes_total`: the checkpoint's committed totals, so a counter reflects rows
   * committed. A retried or overlapping copyTable on this worker counts only past it; a copy this
   * worker has not seen starts from the checkpoint committed before it (another worker's batches
   * are theirs). Forgotten when the table's copy completes here (a copy that never completes here
   * keeps its entry: two numbers per table of a move this worker failed or was cancelled on).
   */
  const copyCounted = new Map<string, { rows: number; bytes: number }>();
  /** The shards' names for error messages, and the bounds that keep a round from hanging on a silent link. */
  const linkBounds = (from: string, to: string) => ({
    sourceName: from,
    targetName: to,
    receiveTimeoutMs: deps.config.limits.replicationReceiveTimeoutMs,
    applyQueryTimeoutMs: deps.config.limits.applyStatementTimeoutMs,
  });

  /**
   * Reverse replication starts where the winning switch said (its audit entry). The switch's
   * winner records it at once; if it died first, the soak's first round records it here. Only
   * the live workflow's activities write it, never a late cutover attempt.
   */
  async function ensureReverseStart(ref: { moveId: string; unit: string; source: string }) {
    const pool = deps.shardPool(ref.source);
    if (await hasStreamProgress(pool, ref.moveId, 'reverse')) return;
    const d = await switchDetail(deps.directoryPool(), ref.unit, ref.moveId, 'switch');
    if (typeof d?.reverseStartLsn === 'string') await recordReverseStart(pool, ref.moveId, d.reverseStartLsn);
  }

  return {
    /** Publication + slot on the sending side before any copy: every later change is in the stream. */
    async setupReplication(input: z.infer<typeof setupInput>): Promise<{ slot: string; publication: string; consistentLsn: string }> {
      const ref = parse(setupInput, input);
      return typed(
        async () => {
          const { from, to } = ends(ref, ref.direction);
          const names = replicationNames(ref.moveId, ref.direction);
          void to; // the receiving side was prepared by `shards prepare` (checked at plan)
          const rows = await rowsOf(deps, ref.unit);
          const tables = await unitTables(deps, from, rows);
          // The row filter is the unit's predicate (lib/unit-rows.ts): `<column> = <value>`.
          const r = await ensurePublicationAndSlot(deps.shardPool(from), { ...names, tables, tenantColumn: rows.column, unit: rows.value });
          await deps.faultPoint(ref.direction === 'forward' ? 'after-slot-created' : 'after-reverse-slot-created');
          return { ...names, consistentLsn: r.consistentLsn };
        },
        { doing: `create the ${ref.direction} slot and publication on ${ends(ref, ref.direction).from}` },
      );
    },

    async copyTable(input: z.infer<typeof copyInput>): Promise<{ table: string; rowsCopied: number; bytesCopied: number }> {
      const ref = parse(copyInput, input);
      return typed(
        async () => {
          const rows = await rowsOf(deps, ref.unit);
          const tables = await unitTables(deps, ref.source, rows);
          const table = tables.find((t) => `${t.schema}.${t.name}` === ref.table);
          if (!table) throw new Error(`table ${ref.table} vanished from ${ref.source}`);
          let batches = 0;
          const m = deps.metrics;
          const series = { unit: ref.unit, move_id: ref.moveId, table: ref.table };
          const pair = { source: ref.source, target: ref.target };
          // A resumed copy reports the checkpoint's totals at each batch: count only past what was counted.
          const countedKey = `${ref.moveId}|${ref.table}`;
          if (m && !copyCounted.has(countedKey)) {
            const cp = (await copyProgress(deps.shardPool(ref.target), ref.moveId)).find((x) => x.table === ref.table);
            // An overlapping delivery may have started counting while this one read the checkpoint.
            if (!copyCounted.has(countedKey)) copyCounted.set(countedKey, { rows: cp?.rowsCopied ?? 0, bytes: cp?.bytesCopied ?? 0 });
          }
          const countCopied = (total: { rows: number; bytes: number }) => {
            // Gone: an overlapping delivery finished the table and counted it to the end.
            const counted = copyCounted.get(countedKey);
            if (counted === undefined) return;
            if (total.rows > counted.rows) m?.rowsCopied.inc(pair, total.rows - counted.rows);
            if (total.bytes > counted.bytes) m?.bytesCopied.inc(pair, total.bytes - counted.bytes);
            copyCounted.set(countedKey, { rows: Math.max(counted.rows, total.rows), bytes: Math.max(counted.bytes, total.bytes) });
          };
          const r = await copyTenantTable({
            source: deps.shardPool(ref.source),
            target: deps.shardPool(ref.target),
            table,
            tenantColumn: rows.column,
            unit: rows.value,
            moveId: ref.moveId,
            batchRows: ref.batchRows,
            rowsPerSecond: ref.rowsPerSecond,
            signal: activitySignal(),
            onBatch: async (p: { rowsCopied: number; bytesCopied: number }) => {
              beat({ table: ref.table, rowsCopied: p.rowsCopied, bytesCopied: p.bytesCopied });
              m?.tableRowsCopied.set(series, p.rowsCopied);
              if (m) countCopied({ rows: p.rowsCopied, bytes: p.bytesCopied });
              activityLog().debug({ table: ref.table, rowsCopied: p.rowsCopied, bytesCopied: p.bytesCopied }, 'copy batch committed');
              batches++;
              if (batches === 2) await deps.faultPoint('mid-copy');
            },
            // A batch of tens of MB can outlast the heartbeat timeout on a slow link.
            onStreaming: (p) => beat({ table: ref.table, rowsCopied: p.rowsCopied, bytesInBatch: p.bytesInBatch }),
          });
          m?.tableRowsCopied.set(series, r.rowsCopied);
          if (m) countCopied({ rows: r.rowsCopied, bytes: r.bytesCopied });
          copyCounted.delete(countedKey);
          return { table: ref.table, rowsCopied: r.rowsCopied, bytesCopied: r.bytesCopied };
        },
        { doing: `copy table ${ref.table} ${ref.source} → ${ref.target}` },
      );
    },

    /**
     * Syncs the unit's blobs in a direction. Objects written behind shardctl's back in the receiving
     * bucket (a late upload to the old owner) are left there and named in `outOfBand`; retire refuses while they exist.
     */
    async copyBlobs(
      input: z.infer<typeof setupInput>,
    ): Promise<{ copied: number; total: number; bytes: number; deleted: number; outOfBand: { key: string; change: string }[] }> {
      const ref = parse(setupInput, input);
      return typed(
        async () => {
          const { from, to } = ends(ref, ref.direction);
          const r = await syncUnitBlobs(deps, from, to, ref.unit, { onProgress: (p: unknown) => beat(p), move: ref, index: true });
          await ensureManifestTable(deps.shardPool(to));
          await recordManifest(deps.shardPool(to), ref.moveId, r.manifest);
          if (ref.direction === 'forward') await deps.faultPoint('after-copy');
          return { copied: r.copied, total: r.manifest.length, bytes: r.bytes, deleted: r.deleted, outOfBand: r.outOfBand.slice(0, 20) };
        },
        { doing: `sync blobs ${flow(ref, ref.direction)}` },
      );
    },

    /**
     * One catch-up round. In 'now' mode its apply time is the replication lag in time: how long it
     * took to stream and apply everything the sender had written when the round started. Its
     * sessions' set-up and tear-down are left out (lagMs): on a link of 200 ms they alone took
     * 8-11 s a round, so a lag measured by the round's duration never fell under the threshold.
     */
    async catchUp(input: z.input<typeof catchUpInput>): Promise<{
      appliedLsn: string;
      lagBytes: number;
      caughtUp: boolean;
      transactionsApplied: number;
      durationMs: number;
      /** The lag in time: how long the round took to stream and apply its backlog (ApplyResult.streamingMs), its set-up and tear-down left out. */
      lagMs: number;
      retentionWarning: string;
    }> {
      const ref = parse(catchUpInput, input);
      // Heartbeats from the round's own progress (applyChangesUntil's onAlive and onProgress), not
      // a timer: a round stuck on a silent shard must stop heartbeating, not hide the hang.
      return typedByProgress(
        async () => {
          const { from, to } = ends(ref, ref.direction);
          const t0 = Date.now();
          if (ref.direction === 'reverse') await ensureReverseStart(ref);
          const names = replicationNames(ref.moveId, ref.direction);
          const fromShard = shardByName(deps.config, from);
          let beats = 0;
          let rowsCounted = 0;
          const subUnit = subUnitStream(deps, await rowsOf(deps, ref.unit));
          const r = await applyChangesUntil({
            sourceDsn: fromShard.dsn,
            target: deps.shardPool(to),
            ...linkBounds(from, to),
            ...names,
            moveId: ref.moveId,
            stream: ref.direction,
            subUnit,
            // The source's position now, asked on the round's own bounded session (a pool query could hang on a silent source).
            untilSourceNow: ref.mode === 'now',
            maxDurationMs: ref.maxDurationMs,
            idleStopMs: ref.idleStopMs,
            maxTxBytes: deps.config.limits.applyMaxTxBytes,
            rowsPerSecond: ref.rowsPerSecond,
            signal: activitySignal(),
            onAlive: () => beat(),
            onProgress: async (p: { transactionsApplied: number; rowsApplied: number }) => {
              beat(p);
              deps.metrics?.rowsApplied.inc({ direction: ref.direction }, Math.max(0, p.rowsApplied - rowsCounted));
              rowsCounted = Math.max(rowsCounted, p.rowsApplied);
              if (p.transactionsApplied > 0 && ++beats === 1) await deps.faultPoint(ref.direction === 'forward' ? 'mid-catch-up' : 'mid-soak');
            },
          });
          // A short round may end before its first progress report: the kill then lands after the
          // applied transactions committed but before the activity reports back.
          if (r.transactionsApplied > 0) await deps.faultPoint(ref.direction === 'forward' ? 'mid-catch-up' : 'mid-soak');
          const caughtUp = ref.mode === 'now' ? r.stopReason === 'until' || r.caughtUp : r.caughtUp;
          // The slot holds WAL on the sender until we acknowledge it: say so before the disk fills.
          const retained = await slotLagBytes(deps.shardPool(from), names.slot).catch(() => 0);
          const limit = deps.config.limits.slotRetentionWarnBytes;
          const retentionWarning = retained > limit ? `slot ${names.slot} on ${from} retains ${retained} bytes of WAL (> ${limit})` : '';
          const durationMs = Date.now() - t0;
          const m = deps.metrics;
          if (m) {
            const series = { unit: ref.unit, move_id: ref.moveId, direction: ref.direction };
            m.rowsApplied.inc({ direction: ref.direction }, Math.max(0, r.rowsApplied - rowsCounted));
            m.lagBytes.set(series, r.lagBytes);
            // A 'now' round's apply time is the lag in time (see above); a continuous round has none.
            if (ref.mode === 'now') m.lagSeconds.set(series, r.streamingMs / 1000);
          }
          if (retentionWarning)
            activityLog().warn({ slot: names.slot, shard: from, retainedBytes: retained, limitBytes: limit }, 'replication slot retains too much WAL');
          return {
            appliedLsn: r.appliedLsn,
            lagBytes: r.lagBytes,
            caughtUp,
            transactionsApplied: r.transactionsApplied,
            durationMs,
            lagMs: r.streamingMs,
            retentionWarning,
          };
        },
        { doing: `catch-up ${ref.direction} ${flow(ref, ref.direction)} (${ref.mode === 'now' ? 'to the source position now' : 'continuous'})` },
      );
    },

    async sourceWalLsn(input: { shard: string }): Promise<string> {
      return currentWalLsn(deps.shardPool(input.shard));
    },

    /**
     * Every row, every column, both directions, plus blob manifests. Never throws on a mismatch.
     * Under live writes a mismatch must persist identically across rounds separated by a catch-up.
     * Resumable: each key range found equal is recorded in the heartbeat with the delta token, and
     * the next attempt compares only the rest, if the delta still runs under that token (tracking
     * that started before the first range, so together they cover every row; lib/cdc/delta.ts).
     */
    async validateMove(
      input: z.infer<typeof validateInput>,
    ): Promise<{ ok: boolean; mismatches: string[]; rows: number; rounds: number; deltaToken: string; resumedRows: number }> {
      const ref = parse(validateInput, input);
      return typed(
        async () => {
          const { from, to } = ends(ref, ref.direction);
          const unitRowsSpec = await rowsOf(deps, ref.unit);
          const tables = await unitTables(deps, from, unitRowsSpec);
          const names = replicationNames(ref.moveId, ref.direction);
          const fromShard = shardByName(deps.config, from);
          // From here on the applier records every key it writes (lib/cdc/delta.ts): once this
          // comparison passes, the cutover compares only those under the fence. A resumed attempt
          // keeps the tracking its ranges were compared under: a restart would forget the keys
          // changed since them.
          // What an earlier attempt found equal: in this attempt's heartbeat details (a retry of the same
          // scheduling), or in the row beside the tracking (any attempt of the same named validation,
          // written at every range). Either counts only under the tracking that runs now; the larger wins.
          const targetPool = deps.shardPool(to);
          const running = await deltaTokenOf(targetPool, ref.moveId, ref.direction);
          const saved = ref.validation ? await readValidated(targetPool, ref.moveId, ref.direction, ref.validation) : undefined;
          const prior = [recordedValidation(priorHeartbeat()), saved && recordedValidation({ validated: saved })]
            .filter((p): p is RecordedValidation => p !== undefined && p.token === running)
            .sort((a, b) => rowsIn(b.tables) - rowsIn(a.tables))[0];
          const resume = prior !== undefined;
          const deltaToken = resume ? prior.token : randomUUID();
          if (!resume) await startDelta(targetPool, ref.moveId, ref.direction, deltaToken);
          const progress: ValidationProgress = resume ? prior.tables : {};
          const resumedRows = rowsIn(progress);
          if (resume)
            activityLog().info({ resumedRows, tables: Object.keys(progress).length }, 'validation resumes from the ranges the last attempt found equal');
          let rounds = 1;
          // The row is written after every range (one write in flight; the latest progress wins); a
          // failed write is logged only: it costs a later attempt time, never a row unchecked.
          let saving: Promise<void> | undefined;
          let unsaved = false;
          const saveProgress = () => {
            if (!ref.validation) return;
            unsaved = true;
            saving ??= (async () => {
              while (unsaved) {
                unsaved = false;
                await saveValidated(targetPool, ref.moveId, ref.direction, deltaToken, ref.validation!, progress).catch((err: Error) =>
                  activityLog().warn({ err: err.message }, 'validation could not record its progress on the target'),
                );
              }
              saving = undefined;
            })();
          };
          const beatProgress = () => {
            beat({ round: rounds, validated: { token: deltaToken, tables: progress } });
            saveProgress();
          };
          // Over every round of this attempt, for the log line below.
          const compared = { rangesHashed: 0, rangesRetried: 0 };
          const tally = (r: TenantValidation) => {
            for (const t of r.tables) {
              compared.rangesHashed += t.ranges?.hashed ?? 0;
              compared.rangesRetried += t.ranges?.retried ?? 0;
            }
            return r;
          };
          const check = () =>
            validateTenant({
              source: deps.shardPool(from),
              target: deps.shardPool(to),
              tables,
              tenantColumn: unitRowsSpec.column,
              unit: unitRowsSpec.value,
              maxReport: 500,
              progress,
              onProgress: beatProgress,
            }).then(tally);
          let report = await check();
          while (!report.ok && rounds < 5) {
            beatProgress();
            await applyChangesUntil({
              sourceDsn: fromShard.dsn,
              target: deps.shardPool(to),
              ...linkBounds(from, to),
              ...names,
              moveId: ref.moveId,
              stream: ref.direction,
              subUnit: subUnitStream(deps, unitRowsSpec),
              untilSourceNow: true,
              maxDurationMs: 15_000,
              maxTxBytes: deps.config.limits.applyMaxTxBytes,
            });
            rounds++;
            report = persistentMismatches(report, await check());
          }
          beat();
          await saving;
          activityLog().info({ rounds, ...compared, resumedRows }, 'validation compared the rows');
          const mismatches: string[] = report.ok ? [] : formatMismatch(report).split('\n').filter(Boolean).slice(0, 20);
          // Blobs: sync the delta first (new objects keep arriving before the fence), then compare;
          // like rows, only a difference that persists across rounds is reported.
          // Unchanged objects are not read: the ledgers prove them equal (lib/blobs/verify.ts).
          const blobDiff = async () => {
            // One read of the source's index for both: the sync brings exactly what it names, the
            // comparison checks exactly that (a row committed in between waits for the next round).
            const index = await unitIndex(deps, from, ref.unit);
            await syncUnitBlobs(deps, from, to, ref.unit, { move: ref, index });
            const d = await compareUnitBlobs(deps, from, to, ref.unit, index);
            return new Map<string, string>([
              ...d.missing.map((k): [string, string] => [`m|${k}`, `blob ${k}: missing on ${to}`]),
              ...d.extra.map((k): [string, string] => [`x|${k}`, `blob ${k}: extra on ${to}`]),
              ...d.different.map((x): [string, string] => [
                `d|${x.key}|${x.srcSha}|${x.dstSha}`,
                `blob ${x.key}: size ${x.srcSize} vs ${x.dstSize}, sha256 ${x.srcSha.slice(0, 12)} vs ${x.dstSha.slice(0, 12)}`,
              ]),
            ]);
          };
          let blobs = await blobDiff();
          for (let i = 0; i < 3 && blobs.size > 0; i++) {
            const next = await blobDiff();
            blobs = new Map([...next].filter(([k]) => blobs.has(k)));
          }
          mismatches.push(...[...blobs.values()].slice(0, 10));
          const rows = report.tables.reduce((n: number, t: { sourceRows: number }) => n + t.sourceRows, 0);
          deps.metrics?.validationMismatches.set({ unit: ref.unit, move_id: ref.moveId }, mismatches.length);
          if (mismatches.length) activityLog().warn({ mismatches: mismatches.length, first: mismatches[0] }, 'validation found differences');
          await deps.faultPoint('after-validate');
          return { ok: mismatches.length === 0, mismatches, rows, rounds, deltaToken, resumedRows };
        },
        { doing: `validate ${flow(ref, ref.direction)}: every row and blob, both directions` },
      );
    },
  };
}
