import { describe, it, expect } from 'vitest';
import {
  copyEtaSeconds,
  copyProgress,
  estimateCopy,
  formatBytes,
  formatCopyEstimate,
  formatCopyProgress,
  formatCutoverPauses,
  formatTableProgress,
  withCopyProgress,
  tableTotal,
} from '../../lib/move-progress';
import { ABORTED_PAUSES_KEPT, noteAbortedPause } from '../../workflows/move-state';

// The case of issue 17: 2024 rows counted at plan time, 2027 copied because the tenant kept
// inserting while the copy ran.
const grown = { rowsCopied: 2027, rowsEstimated: 2024, done: true };

describe('copy progress', () => {
  it('never shows more rows copied than the total, when the source grew during the copy', () => {
    const p = copyProgress([grown]);
    expect(p).toEqual({ rowsCopied: 2027, rowsTotal: 2027, rowsEstimated: 2024, rowsAddedDuringCopy: 3, percent: 100, done: true });
    expect(formatCopyProgress(p)).toBe('2027/2027 rows 100% (+3 written during the copy)');
    expect(formatTableProgress(grown)).toBe('    2027 / 2027 rows ✓ (+3 written during the copy)');
  });

  it('reaches 100 % when the source shrank during the copy (a finished table counts what it copied)', () => {
    const p = copyProgress([{ rowsCopied: 1990, rowsEstimated: 2000, done: true }]);
    expect(p.rowsTotal).toBe(1990);
    expect(p.percent).toBe(100);
    expect(p.rowsAddedDuringCopy).toBe(0);
    expect(formatCopyProgress(p)).toBe('1990/1990 rows 100%');
  });

  it('counts an unfinished table at its start-time estimate, raised to what it already copied', () => {
    expect(tableTotal({ rowsCopied: 0, rowsEstimated: 500, done: false })).toBe(500);
    expect(tableTotal({ rowsCopied: 650, rowsEstimated: 500, done: false })).toBe(650);
    const p = copyProgress([grown, { rowsCopied: 0, rowsEstimated: 1000, done: false }]);
    expect(p.rowsTotal).toBe(3027);
    expect(p.percent).toBe(66);
    expect(p.done).toBe(false);
  });

  it('shows 100 % only when every table is done, even when the rest rounds up to it', () => {
    const p = copyProgress([
      { rowsCopied: 999_999, rowsEstimated: 999_999, done: true },
      { rowsCopied: 0, rowsEstimated: 1, done: false },
    ]);
    expect(p.percent).toBe(99);
    expect(copyProgress([{ rowsCopied: 0, rowsEstimated: 0, done: false }]).percent).toBe(0);
    expect(copyProgress([{ rowsCopied: 0, rowsEstimated: 0, done: true }]).percent).toBe(100);
  });

  it('keeps copied ≤ total and percent within 0..100 for any mix of grown, shrunk and pending tables', () => {
    let seed = 17;
    const rnd = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    for (let i = 0; i < 2000; i++) {
      const tables = Array.from({ length: 1 + rnd(4) }, () => {
        const est = rnd(3000);
        const done = rnd(2) === 0;
        return { rowsEstimated: est, rowsCopied: done ? Math.max(0, est + rnd(200) - 100) : 0, done };
      });
      const p = copyProgress(tables);
      expect(p.rowsCopied).toBeLessThanOrEqual(p.rowsTotal);
      expect(p.percent).toBeGreaterThanOrEqual(0);
      expect(p.percent).toBeLessThanOrEqual(100);
      expect(p.percent === 100).toBe(p.done);
      expect(copyEtaSeconds(p, 10) ?? 0).toBeGreaterThanOrEqual(0);
    }
  });

  it('estimates the time left from the rate so far, and never a negative ETA', () => {
    const half = copyProgress([
      { rowsCopied: 1000, rowsEstimated: 1000, done: true },
      { rowsCopied: 0, rowsEstimated: 1000, done: false },
    ]);
    expect(copyEtaSeconds(half, 10)).toBe(10);
    expect(copyEtaSeconds(copyProgress([{ rowsCopied: 0, rowsEstimated: 10, done: false }]), 5)).toBeNull();
    // The old arithmetic (estimated − copied) said −3 rows left here.
    expect(copyEtaSeconds(copyProgress([grown, { rowsCopied: 0, rowsEstimated: 0, done: false }]), 4)).toBe(0);
  });

  it('gives --json the same numbers as the text: rowsTotal per table and a copy summary', () => {
    const s = withCopyProgress({ phase: 'catchup', tables: [{ table: 'public.orders', ...grown }] });
    expect(s.phase).toBe('catchup');
    expect(s.tables[0]).toEqual({ table: 'public.orders', rowsCopied: 2027, rowsEstimated: 2024, done: true, rowsTotal: 2027 });
    expect(s.copy).toEqual(copyProgress([grown]));
  });
});

describe('cutover pauses', () => {
  it("names every aborted attempt's write pause beside the switching one, and nothing before the first attempt", () => {
    expect(formatCutoverPauses({ cutoverPauseMs: null, cutoverAttempts: 0 })).toBe('');
    expect(formatCutoverPauses({ cutoverPauseMs: 187, cutoverAttempts: 1, cutoverAbortedPausesMs: [] })).toBe('write pause 187 ms (attempt 1)');
    expect(formatCutoverPauses({ cutoverPauseMs: 187, cutoverAttempts: 3, cutoverAbortedPausesMs: [2104, 1980] })).toBe(
      'write pause 187 ms (attempt 3; 2 aborted attempts paused writes 2104 + 1980 ms)',
    );
    expect(formatCutoverPauses({ cutoverPauseMs: null, cutoverAttempts: 1, cutoverAbortedPausesMs: [2050] })).toBe(
      'attempts 1; 1 aborted attempt paused writes 2050 ms',
    );
    expect(formatCutoverPauses({ cutoverPauseMs: 120, cutoverAttempts: 1, cutoverAbortedPausesMs: [158], cutoverWritersWaitedMs: 1210 })).toBe(
      'write pause 120 ms (attempt 1; 1 aborted attempt paused writes 158 ms; waited 1210 ms for long writers before freezing)',
    );
  });

  it('keeps the last 20 aborted pauses on the status', () => {
    const st = { cutoverAbortedPausesMs: undefined } as unknown as Parameters<typeof noteAbortedPause>[0];
    for (let i = 1; i <= 25; i++) noteAbortedPause(st, i);
    expect(st.cutoverAbortedPausesMs).toEqual(Array.from({ length: ABORTED_PAUSES_KEPT }, (_, i) => i + 6));
  });
});

describe("move plan's copy estimate", () => {
  const fmt = (x: number) => `${x}s`;

  it('is the slower of rows and bytes at the measured rates, rounded up', () => {
    // Measured: 1000 rows/s and 1 MB/s. 5000 rows take 5 s by rows; 8 MB take 8 s by bytes.
    const e = estimateCopy({ rows: 5000, bytes: 8_000_000 }, { moves: 2, rows: 20_000, bytes: 20_000_000, seconds: 20 });
    expect(e).toEqual({ seconds: 8, rowsPerSecond: 1000, bytesPerSecond: 1_000_000, fromMoves: 2 });
    expect(estimateCopy({ rows: 5001, bytes: 10 }, { moves: 1, rows: 1000, bytes: 1000, seconds: 1 }).seconds).toBe(6);
    expect(formatCopyEstimate(e, fmt)).toBe('copy ≈ 8s (measured by 2 earlier move(s): 1000 rows/s, 1.0 MB/s)');
  });

  it('is held to the configured throttle when that is slower, and names it', () => {
    const e = estimateCopy({ rows: 5000, bytes: 0 }, { moves: 1, rows: 1000, bytes: 0, seconds: 1 }, 100);
    expect(e).toEqual({ seconds: 50, rowsPerSecond: 1000, bytesPerSecond: null, fromMoves: 1, throttledTo: 100 });
    expect(formatCopyEstimate(e, fmt)).toBe('copy ≈ 50s (measured by 1 earlier move(s): 1000 rows/s; held to the throttle, limits.rowsPerSecond 100)');
    // A throttle faster than the measured rate does not bound it.
    expect(estimateCopy({ rows: 5000, bytes: 0 }, { moves: 1, rows: 1000, bytes: 0, seconds: 1 }, 10_000).throttledTo).toBeUndefined();
  });

  it('says there is no estimate when nothing was measured, rather than guessing', () => {
    const e = estimateCopy({ rows: 5000, bytes: 1 }, { moves: 0, rows: 0, bytes: 0, seconds: 0 }, 100);
    expect(e).toEqual({ seconds: null, rowsPerSecond: null, bytesPerSecond: null, fromMoves: 0 });
    expect(formatCopyEstimate(e, fmt)).toMatch(/^copy duration: not estimated \(no unthrottled copy measured yet/);
  });

  it('prints bytes in powers of 1000', () => {
    expect([0, 950, 1000, 12_345, 4_500_000, 1.2e9].map(formatBytes)).toEqual(['0 B', '950 B', '1.0 kB', '12.3 kB', '4.5 MB', '1.2 GB']);
  });
});
