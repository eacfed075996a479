// Live progress of one move for `move wait` and `move watch`, drawn from its status query. On a
// terminal: per-table bars (cli-progress) with rate and ETA under a header of phase, lag, blobs,
// the phase timeline and the cutover pause. Piped: plain lines, one when something changes.
// Rates are measured here, from successive samples of the status; nothing is sent to the move.
import { MultiBar, type SingleBar } from 'cli-progress';
import type { MoveStatus } from '../workflows/messages';
import type { Phase } from '../workflows/phases';
import { copyProgress, formatCopyProgress, formatCutoverPauses, tableTotal, withCopyProgress } from '../lib/move-progress';
import { formatDurationSeconds } from '../lib/duration';
import { isTerminalStream } from '../lib/text-table';

/** What the renderer writes to: process.stdout / process.stderr, or a test's fake. */
export interface OutStream {
  write(chunk: string): boolean;
  isTTY?: boolean;
  columns?: number;
}

export interface ProgressRenderer {
  /** Shows a new sample of the status, taken at `at` (ms since the epoch). */
  update(s: MoveStatus, at?: number): void;
  /** Draws the last state once more and releases the terminal (cursor, line wrapping); idempotent. */
  stop(): void;
}

const WINDOW_MS = 15_000;

/** Rows per second of each table over the last 15 s of samples. */
export class RateTracker {
  private readonly samples = new Map<string, { at: number; rows: number }[]>();

  add(table: string, rows: number, at: number): void {
    const list = this.samples.get(table) ?? [];
    list.push({ at, rows });
    while (list.length > 2 && at - list[0].at > WINDOW_MS) list.shift();
    this.samples.set(table, list);
  }

  /** null until two samples at least 1 s apart exist. */
  rate(table: string): number | null {
    const list = this.samples.get(table);
    if (!list || list.length < 2) return null;
    const first = list[0];
    const last = list[list.length - 1];
    const dt = (last.at - first.at) / 1000;
    return dt >= 1 ? Math.max(0, (last.rows - first.rows) / dt) : null;
  }
}

/** Seconds left at `rate`, or null when there is no rate to go by. */
export function etaSeconds(copied: number, total: number, rate: number | null): number | null {
  if (copied >= total) return 0;
  return rate && rate > 0 ? Math.ceil((total - copied) / rate) : null;
}

const fmtRate = (r: number | null) => (r === null ? '-' : r >= 100 ? `${Math.round(r)}` : r.toFixed(1));
const fmtEta = (s: number | null) => (s === null ? '-' : formatDurationSeconds(s));
const clock = (ms: number) => new Date(ms).toISOString().slice(11, 23);

/** `plan 20:01:02 · copy +0.4s · catchup +12.3s`: each phase entered, with the time since the one before. */
export function phaseTimeline(times: MoveStatus['phaseTimes']): string {
  const entered = (Object.entries(times) as [Phase, string][]).map(([p, t]) => ({ p, t: Date.parse(t) })).sort((a, b) => a.t - b.t);
  return entered
    .map((e, i) => (i === 0 ? `${e.p} ${new Date(e.t).toISOString().slice(11, 19)}` : `${e.p} +${((e.t - entered[i - 1].t) / 1000).toFixed(1)}s`))
    .join(' · ');
}

/** The status line `move wait` has always printed, with the copy's rate and ETA while it copies. */
export function summaryLine(s: MoveStatus, rate: number | null): string {
  const copy = copyProgress(s.tables);
  const pace = s.phase === 'copy' && !copy.done ? ` ${fmtRate(rate)} rows/s ETA ${fmtEta(etaSeconds(copy.rowsCopied, copy.rowsTotal, rate))}` : '';
  return (
    `${s.phase}${s.paused ? ' (paused)' : ''} ${formatCopyProgress(copy)}${pace} blobs ${s.blobs.copied}/${s.blobs.total} lag ${s.lagSeconds}s` +
    `${s.cutoverPauseMs !== null ? ` pause ${s.cutoverPauseMs}ms` : ''}${s.blockedReason ? ` blocked: ${s.blockedReason}` : ''}`
  );
}

function headerLines(s: MoveStatus): [string, string, string] {
  const lag = `lag ${s.lagBytes} B / ${s.lagSeconds}s`;
  const blobs = `blobs ${s.blobs.copied}/${s.blobs.total}`;
  const first = `${s.tenant}  ${s.source || '?'} → ${s.target}  phase ${s.phase}${s.paused ? ' (paused)' : ''}${s.awaitingApproval ? ' (awaiting approval)' : ''}  epoch ${s.epoch}  ${lag}  ${blobs}`;
  const pauses = formatCutoverPauses(s);
  const pause = pauses ? `cutover ${pauses}` : '';
  const third = [pause, s.blockedReason ? `blocked: ${s.blockedReason}` : '', s.soakEndsAt ? `soak ends ${s.soakEndsAt}` : ''].filter(Boolean).join('  ');
  return [first, `timeline ${phaseTimeline(s.phaseTimes) || '-'}`, third];
}

/** Plain lines for a pipe: a line per phase entered, per table finished, and whenever the summary changes. */
export function plainRenderer(out: OutStream, tenant: string): ProgressRenderer {
  const rates = new RateTracker();
  let lastLine = '';
  let lastPhase: Phase | undefined;
  const finished = new Set<string>();
  const say = (at: number, text: string) => out.write(`${clock(at)} ${tenant}: ${text}\n`);
  return {
    update(s, at = Date.now()) {
      const copy = copyProgress(s.tables);
      rates.add('*', copy.rowsCopied, at);
      for (const t of s.tables) rates.add(t.table, t.rowsCopied, at);
      if (s.phase !== lastPhase) {
        const since =
          lastPhase && s.phaseTimes[lastPhase] ? ` after ${lastPhase} ${formatDurationSeconds((at - Date.parse(s.phaseTimes[lastPhase]!)) / 1000)}` : '';
        say(at, `phase ${s.phase}${since}`);
        lastPhase = s.phase;
      }
      for (const t of s.tables) {
        if (t.done && !finished.has(t.table)) {
          finished.add(t.table);
          const r = rates.rate(t.table);
          say(at, `table ${t.table} copied ${t.rowsCopied} rows${r !== null ? ` (${fmtRate(r)} rows/s)` : ''}`);
        }
      }
      // A new line when the move's own numbers change, not each time the measured rate moves.
      const key = summaryLine(s, null);
      if (key !== lastLine) {
        say(at, summaryLine(s, rates.rate('*')));
        lastLine = key;
      }
    },
    stop() {},
  };
}

/** Bars on a terminal: the header (three lines of text) above one bar per table. */
export function ttyRenderer(out: OutStream): ProgressRenderer & { redraw(): void } {
  const rates = new RateTracker();
  const multi = new MultiBar(
    {
      stream: out as unknown as NodeJS.WritableStream,
      // {eta} is cli-progress's own estimate: ours (from the measured rate) is `left`.
      format: ' {table} [{bar}] {percentage}% {value}/{total} rows {speed} rows/s ETA {left}{done}',
      barsize: 30,
      hideCursor: true,
      clearOnComplete: false,
      stopOnComplete: false,
      autopadding: true,
      fps: 5,
    },
    { barCompleteChar: '█', barIncompleteChar: '░', format: '' },
  );
  const text = [0, 1, 2].map(() => multi.create(1, 0, { line: '' }, { format: '{line}' }));
  const bars = new Map<string, SingleBar>();
  let stopped = false;
  return {
    update(s, at = Date.now()) {
      if (stopped) return;
      headerLines(s).forEach((line, i) => text[i].update(0, { line }));
      const width = Math.min(28, Math.max(0, ...s.tables.map((t) => t.table.length)));
      for (const t of s.tables) {
        rates.add(t.table, t.rowsCopied, at);
        const total = Math.max(1, tableTotal(t));
        const rate = t.done ? null : rates.rate(t.table);
        const payload = {
          table: t.table.slice(0, 28).padEnd(width),
          speed: t.done ? '-' : fmtRate(rate),
          left: t.done ? '0s' : fmtEta(etaSeconds(t.rowsCopied, tableTotal(t), rate)),
          done: t.done ? ' ✓' : '',
        };
        let bar = bars.get(t.table);
        if (!bar) {
          bar = multi.create(total, t.rowsCopied, payload);
          bars.set(t.table, bar);
        }
        bar.setTotal(total);
        bar.update(t.rowsCopied, payload);
      }
    },
    redraw() {
      if (!stopped) multi.update();
    },
    stop() {
      if (stopped) return;
      multi.update();
      multi.stop();
      stopped = true;
    },
  };
}

/**
 * `move watch --json`: the status, in the shape of `move status --json`, as one JSON line each time
 * it differs from the last line written, so a script reads a stream of changes (`jq -c`, `while read`)
 * and never a repeat of what it has already seen.
 */
export function jsonLinesRenderer(out: OutStream): ProgressRenderer {
  let last = '';
  return {
    update(s) {
      const line = JSON.stringify(withCopyProgress(s));
      if (line === last) return;
      out.write(`${line}\n`);
      last = line;
    },
    stop() {},
  };
}

/** Bars when `out` is a terminal (TERM=dumb asks for plain lines there too), plain lines when piped. */
export function progressRenderer(out: OutStream, tenant: string): ProgressRenderer {
  return isTerminalStream(out) ? ttyRenderer(out) : plainRenderer(out, tenant);
}
