// The draws of the seeded chaos runs (test/chaos/), pure: the shard pairs and paths both use, and
// the network-fault variant's iterations (test/chaos/network-chaos.test.ts). One network
// iteration takes a fixed count of numbers from prng(seed), so the same seed replays the same
// iterations, and iteration i is the same whatever the iterations count. Every draw is a
// combination the harness can run (a fault point only on a worker's link and on the drawn path).
import { prng } from '../../lib/loadgen/plan';
import type { Phase } from '../../workflows/phases';

export const NET_LINKS = ['worker-source', 'worker-target', 'worker-temporal', 'router-directory'] as const;
export type NetLinkName = (typeof NET_LINKS)[number];
export const TOXICS = ['down', 'blackhole', 'latency', 'reset_peer', 'limit_data', 'bandwidth'] as const;
export type ToxicKind = (typeof TOXICS)[number];
export const CHAOS_PATHS = ['complete', 'cancel', 'rollback'] as const;
export type ChaosPath = (typeof CHAOS_PATHS)[number];

/** Toxics that cut the link (no progress through it): the first worker gets a second beside it. */
export const SEVERING: readonly ToxicKind[] = ['down', 'blackhole', 'reset_peer', 'limit_data'];

/** Source and target shards a chaos move runs between. */
export const SHARD_PAIRS: [string, string][] = [
  ['shard-a', 'shard-b'],
  ['shard-b', 'shard-c'],
  ['shard-c', 'shard-a'],
  ['shard-b', 'shard-a'],
];

export const END_PHASE: Record<ChaosPath, Phase> = { complete: 'done', cancel: 'cancelled', rollback: 'rolled-back' };

/** Who owns the unit once a move on `path` ended, at which epoch (DESIGN.md §5: one owner, epochs only rise, one per switch). */
export function ownerAfter(path: ChaosPath, source: string, target: string): { owner: string; epoch: number } {
  if (path === 'complete') return { owner: target, epoch: 2 };
  return { owner: source, epoch: path === 'rollback' ? 3 : 1 };
}

/** Fault points on each path where the first worker stops itself (action 'stop') while its link is cut. */
export const POINTS_BY_PATH: Record<ChaosPath, readonly string[]> = {
  complete: ['mid-copy', 'mid-catch-up', 'after-fence-raised', 'before-switch', 'after-switch-committed'],
  // The cancel comes at the approval gate (fence): its undo runs on whichever worker is left.
  cancel: ['mid-copy', 'mid-catch-up', 'mid-cancel'],
  rollback: ['mid-copy', 'after-fence-raised', 'mid-soak', 'mid-rollback', 'rollback-before-switch'],
};

/** Phases reached on each path, at which a fault may start (cancel: `fence` is the approval gate; rollback: `soak` is when it is asked for). */
export const PHASES_BY_PATH: Record<ChaosPath, readonly Phase[]> = {
  complete: ['copy', 'catchup', 'validate', 'fence', 'soak'],
  cancel: ['copy', 'catchup', 'validate', 'fence'],
  rollback: ['copy', 'catchup', 'fence', 'soak'],
};

export type Trigger = { kind: 'point'; point: string } | { kind: 'phase'; phase: Phase } | { kind: 'delay'; ms: number };

export interface ToxicParams {
  latencyMs: number;
  jitterMs: number;
  resetAfterMs: number;
  toxicity: number;
  bytes: number;
  kbPerSecond: number;
}

export interface NetDraw {
  source: string;
  target: string;
  link: NetLinkName;
  toxic: ToxicKind;
  params: ToxicParams;
  trigger: Trigger;
  /** How long the fault lasts before the heal. */
  durationMs: number;
  path: ChaosPath;
  rows: number;
  blobs: number;
  /** Loadgen operations per second over the moving tenant and its bystanders. */
  rate: number;
  copyBatchRows: number;
  /** The copy's pace (0: unpaced), so a fault drawn for the copy or catch-up can land there. */
  rowsPerSecond: number;
}

export const isWorkerLink = (l: NetLinkName) => l !== 'router-directory';

/** The draws of iterations 0 .. n-1 of `seed`. */
export function drawNetChaos(seed: number, n: number): NetDraw[] {
  const rand = prng(seed);
  const out: NetDraw[] = [];
  for (let i = 0; i < n; i++) {
    // Exactly 20 numbers per iteration, whatever is drawn: iteration i never depends on the ones before.
    const u = Array.from({ length: 20 }, rand);
    const int = (k: number, lo: number, hi: number) => lo + Math.floor(u[k] * (hi - lo + 1));
    const pick = <T>(k: number, xs: readonly T[]) => xs[Math.floor(u[k] * xs.length)];
    const [source, target] = pick(0, SHARD_PAIRS);
    const link = pick(1, NET_LINKS);
    const toxic = pick(2, TOXICS);
    const path: ChaosPath = u[3] < 0.6 ? 'complete' : u[3] < 0.8 ? 'cancel' : 'rollback';
    const latencyMs = int(4, 100, 500);
    const params: ToxicParams = {
      latencyMs,
      jitterMs: Math.floor(u[5] * (latencyMs / 4)),
      resetAfterMs: int(6, 0, 2000),
      toxicity: Math.round((0.2 + u[7] * 0.8) * 20) / 20,
      bytes: int(8, 2048, 65_536),
      kbPerSecond: int(9, 4, 64),
    };
    // A fault point needs the first worker's own link; the router's link starts at a phase or a delay.
    const kind = isWorkerLink(link) ? (u[10] < 0.4 ? 'point' : u[10] < 0.75 ? 'phase' : 'delay') : u[10] < 0.6 ? 'phase' : 'delay';
    const trigger: Trigger =
      kind === 'point'
        ? { kind, point: pick(11, POINTS_BY_PATH[path]) }
        : kind === 'phase'
          ? { kind, phase: pick(12, PHASES_BY_PATH[path]) }
          : { kind, ms: int(13, 500, 10_000) };
    out.push({
      source,
      target,
      link,
      toxic,
      params,
      trigger,
      durationMs: int(14, 3000, 20_000),
      path,
      rows: int(15, 200, 500),
      blobs: int(16, 1, 4),
      rate: int(17, 20, 50),
      copyBatchRows: int(18, 20, 100),
      // Half unpaced; the other half 40-160 rows/s (u[19] in [0.5, 1) stretched over the range).
      rowsPerSecond: u[19] < 0.5 ? 0 : 40 + Math.floor((u[19] - 0.5) * 2 * 121),
    });
  }
  return out;
}

export function toxicLabel(d: Pick<NetDraw, 'toxic' | 'params'>): string {
  const p = d.params;
  switch (d.toxic) {
    case 'latency':
      return `latency ${p.latencyMs}±${p.jitterMs} ms`;
    case 'reset_peer':
      return `reset_peer after ${p.resetAfterMs} ms (toxicity ${p.toxicity})`;
    case 'limit_data':
      return `limit_data ${p.bytes} B`;
    case 'bandwidth':
      return `bandwidth ${p.kbPerSecond} KB/s`;
    default:
      return d.toxic;
  }
}

export function triggerLabel(t: Trigger): string {
  return t.kind === 'point' ? `at ${t.point}` : t.kind === 'phase' ? `in ${t.phase}` : `${t.ms} ms after start`;
}

/** The iteration's name: everything drawn that shapes the fault. */
export function netDrawLabel(d: NetDraw, i: number): string {
  const pace = d.rowsPerSecond ? `, copy at ${d.rowsPerSecond} rows/s` : '';
  return `#${i} ${d.source}->${d.target} ${d.path}${pace}: ${d.link} ${toxicLabel(d)} ${triggerLabel(d.trigger)} for ${d.durationMs} ms`;
}
