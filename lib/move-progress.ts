// Copy progress as operators see it: rows copied against a total that follows the source.
// The plan counts each table once, at the start; rows the tenant writes during the copy sort
// after the copy's cursor and are copied too, so copied/estimated alone can pass 100 %. Pure
// (no I/O, no Node imports): the workflow's ETA and the CLI's status and wait lines share it.

export interface TableCounts {
  rowsCopied: number;
  /** The plan's count of the unit's rows in this table, taken once when the move started. */
  rowsEstimated: number;
  done: boolean;
}

export interface CopyProgress {
  rowsCopied: number;
  /**
   * What the copy has to reach: a finished table counts what it really copied, an unfinished
   * one its start-time estimate, raised to what it copied so far. Never below rowsCopied.
   */
  rowsTotal: number;
  /** Sum of the start-time estimates. */
  rowsEstimated: number;
  /** Rows copied beyond the start-time estimates: written by the tenant while the copy ran. */
  rowsAddedDuringCopy: number;
  /** floor(100 · copied / total), held at 99 until every table is done: 100 means finished. */
  percent: number;
  done: boolean;
}

export function tableTotal(t: TableCounts): number {
  // A finished table's own count is the truth, whether the source grew or shrank meanwhile.
  return t.done ? t.rowsCopied : Math.max(t.rowsEstimated, t.rowsCopied);
}

export function copyProgress(tables: readonly TableCounts[]): CopyProgress {
  let rowsCopied = 0;
  let rowsTotal = 0;
  let rowsEstimated = 0;
  let rowsAddedDuringCopy = 0;
  for (const t of tables) {
    rowsCopied += t.rowsCopied;
    rowsTotal += tableTotal(t);
    rowsEstimated += t.rowsEstimated;
    rowsAddedDuringCopy += Math.max(0, t.rowsCopied - t.rowsEstimated);
  }
  const done = tables.every((t) => t.done);
  const percent = done ? 100 : rowsTotal === 0 ? 0 : Math.min(99, Math.floor((100 * rowsCopied) / rowsTotal));
  return { rowsCopied, rowsTotal, rowsEstimated, rowsAddedDuringCopy, percent, done };
}

/** Seconds left at the copy's rate so far; null before any row was copied, never negative. */
export function copyEtaSeconds(p: CopyProgress, elapsedSeconds: number): number | null {
  if (p.done) return 0;
  const rate = p.rowsCopied / Math.max(1, elapsedSeconds);
  return rate > 0 ? Math.round((p.rowsTotal - p.rowsCopied) / rate) : null;
}

/** `2027/2027 rows 100%`, with `(+3 written during the copy)` when the source grew. */
export function formatCopyProgress(p: CopyProgress): string {
  return `${p.rowsCopied}/${p.rowsTotal} rows ${p.percent}%${addedNote(p.rowsAddedDuringCopy)}`;
}

/** One table of `move status`: `    2027 / 2027 rows ✓ (+3 written during the copy)`. */
export function formatTableProgress(t: TableCounts): string {
  return `${String(t.rowsCopied).padStart(8)} / ${tableTotal(t)} rows${t.done ? ' ✓' : ''}${addedNote(t.rowsCopied - t.rowsEstimated)}`;
}

function addedNote(added: number): string {
  return added > 0 ? ` (+${added} written during the copy)` : '';
}

/**
 * `move status --json` adds these to the workflow's status: `rowsTotal` on each table and a
 * `copy` summary, so scripts read the same numbers the text shows.
 */
export function withCopyProgress<S extends { tables: readonly TableCounts[] }>(s: S) {
  return { ...s, tables: s.tables.map((t) => ({ ...t, rowsTotal: tableTotal(t) })), copy: copyProgress(s.tables) };
}

/** What a move's cutover attempts cost the tenant's writes (the status fields, as in MoveStatus). */
export interface CutoverPauses {
  cutoverPauseMs: number | null;
  cutoverAttempts: number;
  cutoverAbortedPausesMs?: number[];
  cutoverWritersWaitedMs?: number;
}

/**
 * The cutover's write pauses in one phrase: the last attempt's pause, and what the aborted
 * attempts froze too (each froze the tenant's writes, though no switch came of it); '' before
 * the first attempt. E.g. `write pause 187 ms (attempt 3; 2 aborted attempts paused writes 2104 + 1980 ms)`.
 */
export function formatCutoverPauses(s: CutoverPauses): string {
  const aborted = s.cutoverAbortedPausesMs ?? [];
  const abortedText = aborted.length
    ? `; ${aborted.length} aborted attempt${aborted.length === 1 ? '' : 's'} paused writes ${aborted.map((ms) => `${ms}`).join(' + ')} ms`
    : '';
  const waited = s.cutoverWritersWaitedMs ? `; waited ${s.cutoverWritersWaitedMs} ms for long writers before freezing` : '';
  if (s.cutoverPauseMs !== null) return `write pause ${s.cutoverPauseMs} ms (attempt ${s.cutoverAttempts}${abortedText}${waited})`;
  return s.cutoverAttempts ? `attempts ${s.cutoverAttempts}${abortedText}${waited}` : '';
}

/** A copy's duration estimated from measured throughput (`move plan`). */
export interface CopyEstimate {
  /** Seconds the table copies should take; null when nothing was measured yet. */
  seconds: number | null;
  /** The measured rates it used (null: none measured), and from how many moves. */
  rowsPerSecond: number | null;
  bytesPerSecond: number | null;
  fromMoves: number;
  /** The configured throttle (limits.rowsPerSecond) when it, not the measured rate, bounds the copy. */
  throttledTo?: number;
}

/**
 * The copy's duration: its rows and bytes at the measured rates (the slower of the two decides),
 * and no faster than the configured throttle allows. Null seconds when no copy was measured.
 */
export function estimateCopy(
  total: { rows: number; bytes: number },
  measured: { moves: number; rows: number; bytes: number; seconds: number },
  rowsPerSecondLimit = 0,
): CopyEstimate {
  const has = measured.moves > 0 && measured.seconds > 0 && measured.rows > 0;
  const rowsPerSecond = has ? measured.rows / measured.seconds : null;
  const bytesPerSecond = has && measured.bytes > 0 ? measured.bytes / measured.seconds : null;
  let seconds: number | null = null;
  if (rowsPerSecond !== null) {
    seconds = Math.max(total.rows / rowsPerSecond, bytesPerSecond ? total.bytes / bytesPerSecond : 0);
  }
  const throttle = rowsPerSecondLimit > 0 ? total.rows / rowsPerSecondLimit : 0;
  const throttled = seconds !== null && rowsPerSecondLimit > 0 && throttle > seconds;
  if (throttled) seconds = throttle;
  return {
    seconds: seconds === null ? null : Math.ceil(seconds),
    rowsPerSecond: rowsPerSecond === null ? null : Math.round(rowsPerSecond),
    bytesPerSecond: bytesPerSecond === null ? null : Math.round(bytesPerSecond),
    fromMoves: measured.moves,
    ...(throttled ? { throttledTo: rowsPerSecondLimit } : {}),
  };
}

/** Bytes as an operator reads them: 950 B, 12.3 kB, 4.5 MB, 1.2 GB (powers of 1000). */
export function formatBytes(n: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let v = Math.max(0, n);
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(1)} ${units[i]}`;
}

/** The plan's copy line: `copy ≈ 2m10s (measured by 3 earlier moves: 1200 rows/s, 4.5 MB/s)`, or why there is none. */
export function formatCopyEstimate(e: CopyEstimate, formatSeconds: (s: number) => string): string {
  if (e.seconds === null) return 'copy duration: not estimated (no unthrottled copy measured yet: the `move.copied` audit entries of earlier moves)';
  const rates = `${e.rowsPerSecond} rows/s${e.bytesPerSecond !== null ? `, ${formatBytes(e.bytesPerSecond)}/s` : ''}`;
  const cap = e.throttledTo !== undefined ? `; held to the throttle, limits.rowsPerSecond ${e.throttledTo}` : '';
  return `copy ≈ ${formatSeconds(e.seconds)} (measured by ${e.fromMoves} earlier move(s): ${rates}${cap})`;
}
