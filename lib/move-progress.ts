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
  if (s.cutoverPauseMs !== null) return `write pause ${s.cutoverPauseMs} ms (attempt ${s.cutoverAttempts}${abortedText})`;
  return s.cutoverAttempts ? `attempts ${s.cutoverAttempts}${abortedText}` : '';
}
