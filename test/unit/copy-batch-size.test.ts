// Batch sizing of the bulk copy (lib/copy/batch-size.ts): batches aim at a byte size whatever the
// row width, within the row cap, growing gradually from a cheap first batch.
import { describe, it, expect } from 'vitest';
import { FIRST_BATCH_ROWS, MAX_GROWTH, nextBatchRows } from '../../lib/copy/batch-size';

const MB = 1024 * 1024;

describe('nextBatchRows', () => {
  it('starts with a small batch when no row width is known yet', () => {
    expect(nextBatchRows(null, 32 * MB, 1_000_000)).toBe(FIRST_BATCH_ROWS);
    expect(nextBatchRows({ rows: 0, bytes: 0 }, 32 * MB, 1_000_000)).toBe(FIRST_BATCH_ROWS);
    expect(nextBatchRows(null, 32 * MB, 25)).toBe(25);
  });

  it('fits the target bytes from the last batch width: wide rows take few, narrow rows many', () => {
    // 4 KiB rows: 32 MiB is 8192 rows.
    expect(nextBatchRows({ rows: 4000, bytes: 4000 * 4096 }, 32 * MB, 1_000_000)).toBe(8192);
    // 64-byte rows: 524288 rows, capped by the growth limit first, then by the row cap.
    expect(nextBatchRows({ rows: 1000, bytes: 64_000 }, 32 * MB, 1_000_000)).toBe(1000 * MAX_GROWTH);
    expect(nextBatchRows({ rows: 400_000, bytes: 400_000 * 64 }, 32 * MB, 1_000_000)).toBe(524_288);
    expect(nextBatchRows({ rows: 400_000, bytes: 400_000 * 64 }, 32 * MB, 100_000)).toBe(100_000);
  });

  it('shrinks at once when rows turn out wider than the target', () => {
    expect(nextBatchRows({ rows: 1000, bytes: 200 * MB }, 32 * MB, 1_000_000)).toBe(160);
    // A single row bigger than the target still makes progress.
    expect(nextBatchRows({ rows: 1, bytes: 100 * MB }, 32 * MB, 1_000_000)).toBe(1);
  });
});
