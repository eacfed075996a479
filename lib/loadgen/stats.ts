// Latency and outcome statistics of a loadgen run, and their text report. Pure.
import { renderTable } from '../text-table';

export interface LatencySummary {
  count: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
}

export class LatencyRecorder {
  private samples: number[] = [];

  add(ms: number): void {
    this.samples.push(ms);
  }

  get count(): number {
    return this.samples.length;
  }

  summary(): LatencySummary {
    const s = [...this.samples].sort((a, b) => a - b);
    const sum = s.reduce((a, b) => a + b, 0);
    return {
      count: s.length,
      p50: percentile(s, 50),
      p90: percentile(s, 90),
      p99: percentile(s, 99),
      max: s.length ? round(s[s.length - 1]) : 0,
      mean: s.length ? round(sum / s.length) : 0,
    };
  }

  /** Counts per power-of-two bucket in ms: [upper bound, count], empty buckets trimmed. */
  histogram(): Array<[number, number]> {
    return latencyHistogram(this.samples);
  }
}

/** Nearest-rank percentile of ascending samples; 0 for no samples. */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.ceil((p / 100) * sorted.length);
  return round(sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]);
}

export function latencyHistogram(samples: number[]): Array<[number, number]> {
  if (samples.length === 0) return [];
  const buckets = new Map<number, number>();
  for (const ms of samples) {
    let ub = 1;
    while (ub < ms) ub *= 2;
    buckets.set(ub, (buckets.get(ub) ?? 0) + 1);
  }
  const bounds = [...buckets.keys()].sort((a, b) => a - b);
  const out: Array<[number, number]> = [];
  for (let ub = bounds[0]; ub <= bounds[bounds.length - 1]; ub *= 2) out.push([ub, buckets.get(ub) ?? 0]);
  return out;
}

const round = (x: number) => Math.round(x * 10) / 10;

export interface OutcomeCounts {
  ack: number;
  refused: number;
  unknown: number;
}

export const zeroOutcomes = (): OutcomeCounts => ({ ack: 0, refused: 0, unknown: 0 });

export interface LoadgenStats {
  run: string;
  logFile: string;
  tenants: string[];
  rate: number;
  durationMs: number;
  elapsedMs: number;
  /** Operations started (reads + writes). */
  ops: number;
  reads: { ok: number; failed: number };
  /** Reads that saw a different row than the writer knows it committed. */
  readMismatches: number;
  readMismatchSamples: Array<{ tenant: string; table: string; key: string; expected: unknown; actual: unknown }>;
  writes: OutcomeCounts;
  byOp: Record<'insert' | 'update' | 'delete' | 'blob_put' | 'blob_delete', OutcomeCounts>;
  /** Failed attempts by error type (refused writes, unknown outcomes, failed reads). */
  errorsByType: Record<string, number>;
  latency: { read: LatencySummary; write: LatencySummary };
  stopped: 'duration' | 'aborted';
}

/** The run's report for a person: counts, a table per operation, a latency table (boxed when `tty`), histograms. */
export function formatStats(s: LoadgenStats, hist?: { read: Array<[number, number]>; write: Array<[number, number]> }, tty = false): string {
  const lines: string[] = [];
  const rate = s.elapsedMs > 0 ? ((s.ops * 1000) / s.elapsedMs).toFixed(1) : '0';
  lines.push(
    `loadgen run ${s.run}: ${s.ops} ops in ${(s.elapsedMs / 1000).toFixed(1)}s (${rate}/s, target ${s.rate}/s) on ${s.tenants.join(', ')}${s.stopped === 'aborted' ? ' — stopped early' : ''}`,
  );
  lines.push(`  writes: ${s.writes.ack} ack, ${s.writes.refused} refused, ${s.writes.unknown} unknown`);
  const ops = Object.entries(s.byOp).filter(([, c]) => c.ack + c.refused + c.unknown);
  if (ops.length)
    lines.push(
      ...renderTable(
        {
          head: ['op', 'ack', 'refused', 'unknown'],
          rows: ops.map(([op, c]) => [op, c.ack, c.refused, c.unknown]),
          align: ['left', 'right', 'right', 'right'],
          indent: '    ',
        },
        tty,
      ),
    );
  lines.push(`  reads: ${s.reads.ok} ok, ${s.reads.failed} failed, ${s.readMismatches} mismatched`);
  lines.push(
    ...renderTable(
      {
        head: ['latency ms', 'count', 'p50', 'p90', 'p99', 'max'],
        rows: (['read', 'write'] as const).map((kind) => [kind, ...(['count', 'p50', 'p90', 'p99', 'max'] as const).map((k) => s.latency[kind][k])]),
        align: ['left', 'right', 'right', 'right', 'right', 'right'],
        indent: '  ',
      },
      tty,
    ),
  );
  if (hist) {
    for (const kind of ['read', 'write'] as const) {
      const h = hist[kind];
      if (!h.length) continue;
      const peak = Math.max(...h.map(([, c]) => c));
      lines.push(`  ${kind} latency histogram`);
      for (const [ub, c] of h) lines.push(`    ≤${String(ub).padStart(6)} ms ${String(c).padStart(6)} ${'#'.repeat(Math.ceil((c / peak) * 40))}`);
    }
  }
  const errs = Object.entries(s.errorsByType).sort((a, b) => b[1] - a[1]);
  lines.push(errs.length ? `  errors: ${errs.map(([t, n]) => `${t}=${n}`).join(', ')}` : '  errors: none');
  return lines.join('\n');
}
