// The live progress of `move wait` / `move watch` (cli/progress.ts), fed a move's status samples:
// plain lines for a pipe, and cli-progress bars on a terminal (a fake TTY stream that records what
// is written). A real move's piped and pseudo-terminal output is tested in test/e2e/cli-ops.test.ts.
import { describe, it, expect } from 'vitest';
import { jsonLinesRenderer, plainRenderer, ttyRenderer, RateTracker, etaSeconds, phaseTimeline, type OutStream } from '../../cli/progress';
import { withCopyProgress } from '../../lib/move-progress';
import type { MoveInput, MoveStatus } from '../../workflows/messages';
import { initialStatus } from '../../workflows/move-state';

const T0 = Date.parse('2026-01-01T10:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

const input: MoveInput = {
  moveId: 'acme.m1',
  unit: 'acme',
  tenant: 'acme',
  target: 'shard-b',
  soakSeconds: 3600,
  approveCutover: 'auto',
  requestedBy: 'sre',
  lagThresholdMs: 1000,
  fenceBudgetMs: 2000,
  rowsPerSecond: 0,
};

function status(o: Partial<MoveStatus>): MoveStatus {
  return {
    ...initialStatus(input),
    source: 'shard-a',
    phase: 'copy',
    epoch: 1,
    blobs: { copied: 0, total: 2, bytes: 0 },
    phaseTimes: { plan: iso(T0), copy: iso(T0 + 500) },
    ...o,
  };
}

const tables = (a: number, b: number, aDone = false) => [
  { table: 'accounts', rowsCopied: a, rowsEstimated: 300, done: aDone },
  { table: 'orders', rowsCopied: b, rowsEstimated: 200, done: false },
];

function sink(tty: boolean): OutStream & { text: () => string } {
  let buf = '';
  return {
    isTTY: tty,
    columns: 140,
    write(chunk: string) {
      buf += chunk;
      return true;
    },
    text: () => buf,
  };
}

// eslint-disable-next-line no-control-regex
const strip = (s: string) => s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '');

describe('rates and ETA', () => {
  it('measures rows per second over the recent samples and gives none before a second has passed', () => {
    const r = new RateTracker();
    r.add('t', 0, T0);
    r.add('t', 10, T0 + 500);
    expect(r.rate('t')).toBeNull();
    r.add('t', 100, T0 + 2000);
    expect(r.rate('t')).toBe(50);
    expect(etaSeconds(100, 300, 50)).toBe(4);
    expect(etaSeconds(300, 300, null)).toBe(0);
    expect(etaSeconds(100, 300, 0)).toBeNull();
  });

  it('lists the phases in the order entered, each with the time since the one before', () => {
    expect(phaseTimeline({ copy: iso(T0 + 500), plan: iso(T0), catchup: iso(T0 + 12_800) })).toBe('plan 10:00:00 · copy +0.5s · catchup +12.3s');
  });
});

describe('plain lines (piped)', () => {
  it('prints a line per phase entered, per table finished, and per change of the summary, with the rate and ETA while copying', () => {
    const out = sink(false);
    const r = plainRenderer(out, 'acme');
    r.update(status({ phase: 'plan', tables: [] }), T0);
    r.update(status({ tables: tables(0, 0) }), T0 + 1000);
    r.update(status({ tables: tables(100, 0) }), T0 + 3000);
    r.update(status({ tables: tables(100, 0) }), T0 + 3500); // nothing changed: no line
    r.update(status({ tables: tables(300, 50, true) }), T0 + 5000);
    r.update(
      status({
        phase: 'soak',
        tables: tables(300, 200, true).map((t) => ({ ...t, done: true })),
        cutoverPauseMs: 123,
        phaseTimes: { copy: iso(T0 + 500), soak: iso(T0 + 9000) },
      }),
      T0 + 9000,
    );
    r.stop();
    const lines = out.text().trimEnd().split('\n');
    expect(lines).toEqual([
      '10:00:00.000 acme: phase plan',
      '10:00:00.000 acme: plan 0/0 rows 100% blobs 0/2 lag 0s',
      '10:00:01.000 acme: phase copy after plan 1s',
      '10:00:01.000 acme: copy 0/500 rows 0% 0.0 rows/s ETA - blobs 0/2 lag 0s',
      '10:00:03.000 acme: copy 100/500 rows 20% 33.3 rows/s ETA 12s blobs 0/2 lag 0s',
      '10:00:05.000 acme: table accounts copied 300 rows (75.0 rows/s)',
      '10:00:05.000 acme: copy 350/500 rows 70% 70.0 rows/s ETA 3s blobs 0/2 lag 0s',
      '10:00:09.000 acme: phase soak after copy 9s',
      '10:00:09.000 acme: table orders copied 200 rows (25.0 rows/s)',
      '10:00:09.000 acme: soak 500/500 rows 100% blobs 0/2 lag 0s pause 123ms',
    ]);
  });
});

describe('bars (terminal)', () => {
  it('draws a bar per table with rate and ETA under the phase, lag, timeline and cutover pause, and gives the cursor back when stopped', () => {
    const out = sink(true);
    const r = ttyRenderer(out);
    r.update(status({ tables: tables(0, 0) }), T0 + 1000);
    r.update(status({ tables: tables(150, 0), lagBytes: 4096, lagSeconds: 1.5 }), T0 + 3000);
    r.redraw();
    const copying = strip(out.text());
    expect(copying).toContain('acme  shard-a → shard-b  phase copy  epoch 1  lag 4096 B / 1.5s  blobs 0/2');
    expect(copying).toContain('timeline plan 10:00:00 · copy +0.5s');
    expect(copying).toMatch(/accounts \[█{15}░{15}\] +50% 150\/300 rows 75\.0 rows\/s ETA 2s/);
    expect(copying).toMatch(/orders +\[░{30}\] +0% +0\/200 rows 0\.0 rows\/s ETA -/);
    expect(out.text()).toContain('\x1b[?25l'); // cursor hidden while drawing

    r.update(
      status({
        phase: 'soak',
        tables: tables(300, 200, true).map((t) => ({ ...t, done: true })),
        cutoverPauseMs: 87,
        cutoverAttempts: 1,
        phaseTimes: { plan: iso(T0), copy: iso(T0 + 500), switch: iso(T0 + 20_000), soak: iso(T0 + 20_100) },
      }),
      T0 + 21_000,
    );
    r.stop();
    r.stop(); // idempotent
    const ended = strip(out.text());
    expect(ended).toContain('cutover write pause 87 ms (attempt 1)');
    expect(ended).toContain('timeline plan 10:00:00 · copy +0.5s · switch +19.5s · soak +0.1s');
    expect(ended).toMatch(/accounts \[█{30}\] +100% 300\/300 rows - rows\/s ETA 0s ✓/);
    expect(out.text().lastIndexOf('\x1b[?25h')).toBeGreaterThan(out.text().lastIndexOf('\x1b[?25l')); // cursor shown again
  });
});

describe('JSON lines (move watch --json)', () => {
  it('writes each sample as one line holding what move status --json prints for it', () => {
    const out = sink(false);
    const s = status({ tables: tables(100, 0) });
    jsonLinesRenderer(out).update(s);
    expect(out.text().endsWith('\n')).toBe(true);
    expect(out.text().trimEnd().split('\n')).toHaveLength(1);
    expect(JSON.parse(out.text())).toEqual(JSON.parse(JSON.stringify(withCopyProgress(s))));
  });

  it('writes nothing for a sample equal to the last one written, a line for each change', () => {
    const out = sink(false);
    const r = jsonLinesRenderer(out);
    r.update(status({ tables: tables(100, 0) }), T0);
    r.update(status({ tables: tables(100, 0) }), T0 + 500);
    r.update(status({ tables: tables(150, 0) }), T0 + 1000);
    r.update(status({ phase: 'catchup', tables: tables(300, 200, true) }), T0 + 1500);
    const lines = out
      .text()
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => [l.phase, l.copy.rowsCopied])).toEqual([
      ['copy', 100],
      ['copy', 150],
      ['catchup', 500],
    ]);
  });
});
