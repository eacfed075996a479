// Timing and interleaving for the bench: every figure runs its baseline and ours alternately,
// round after round (baseline, ours, baseline, ours, ...), so both see the same machine load on a
// machine shared with others.

export async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; seconds: number }> {
  const t0 = process.hrtime.bigint();
  const value = await fn();
  return { value, seconds: Number(process.hrtime.bigint() - t0) / 1e9 };
}

/** Runs each side once per round, in the given order; returns each side's samples in run order. */
export async function interleave<K extends string, T>(rounds: number, sides: [K, () => Promise<T>][]): Promise<Record<K, T[]>> {
  const out = Object.fromEntries(sides.map(([k]) => [k, [] as T[]])) as Record<K, T[]>;
  for (let r = 0; r < rounds; r++) {
    for (const [k, run] of sides) out[k].push(await run());
  }
  return out;
}

/**
 * Paired rounds for a figure judged on its per-round ratios: every round runs each side once, the
 * order reversed every other round (a, b, b, a, …) so neither side always runs first, after the
 * other's dirty buffers or in its wake. Each side's samples come back in round order: sample i of
 * every side ran in round i.
 */
export async function interleavePaired<K extends string, T>(rounds: number, sides: [K, () => Promise<T>][]): Promise<Record<K, T[]>> {
  const out = Object.fromEntries(sides.map(([k]) => [k, [] as T[]])) as Record<K, T[]>;
  for (let r = 0; r < rounds; r++) {
    for (const [k, run] of r % 2 ? [...sides].reverse() : sides) out[k].push(await run());
  }
  return out;
}

export function log(msg: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
}
