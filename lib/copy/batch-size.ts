// How many rows the next copy batch takes, so that a batch is about `targetBytes` on the wire
// whatever the table's row width: tens of MB amortise the per-batch round trips and commit, and
// stay far from memory limits (a batch streams through, it is never held whole). Pure: no I/O.

/** Default bytes per batch (binary or text COPY stream). */
export const DEFAULT_BATCH_BYTES = 32 * 1024 * 1024;
/** Default upper bound on rows per batch (the batch's key lookup walks this many index entries). */
export const DEFAULT_MAX_BATCH_ROWS = 1_000_000;
/** The first batch, before any row width is known: small enough to be cheap on any table. */
export const FIRST_BATCH_ROWS = 1000;
/** A batch grows at most this many times over the previous one (a narrow head says little of the rest). */
export const MAX_GROWTH = 4;

export interface BatchSample {
  rows: number;
  bytes: number;
}

/**
 * Rows for the next batch: from the last batch's bytes per row (or, on resume, the checkpoint's
 * totals), capped by `maxRows` and by MAX_GROWTH × the last batch; at least 1.
 */
export function nextBatchRows(last: BatchSample | null, targetBytes: number, maxRows: number): number {
  const cap = Math.max(1, Math.trunc(maxRows));
  if (!last || last.rows <= 0 || last.bytes <= 0) return Math.min(cap, FIRST_BATCH_ROWS);
  const fit = Math.floor(targetBytes / (last.bytes / last.rows));
  return Math.max(1, Math.min(cap, fit, last.rows * MAX_GROWTH));
}
