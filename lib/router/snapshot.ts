// The router's cached view of the directory: unit → (shard, epoch, state), each entry tagged
// with the directory generation it was learned at, so late answers never overwrite newer ones.
// Pure (no I/O). The cache is only ever a hint: shards enforce ownership with the fence.

import type { PlacementState } from '../directory/placements';
export type { PlacementState };

export interface Placement {
  unit: string;
  shard: string;
  epoch: number;
  state: PlacementState;
}

interface Entry extends Placement {
  /** Directory generation this entry was read or announced at. */
  generation: number;
}

/** A directory read or announcement about one unit; `placement` undefined = unit absent. */
export interface UnitObservation {
  unit: string;
  placement: Placement | undefined;
  generation: number;
}

export class PlacementCache {
  private entries = new Map<string, Entry>();
  /** Generation of the last full snapshot. */
  private snapshotGeneration = -1;

  get generation(): number {
    return this.snapshotGeneration;
  }

  get size(): number {
    return this.entries.size;
  }

  get(unit: string): Placement | undefined {
    const e = this.entries.get(unit);
    return e && { unit: e.unit, shard: e.shard, epoch: e.epoch, state: e.state };
  }

  /**
   * Replaces the cache with a full snapshot taken at `generation`, keeping any entry that was
   * learned at a later generation (a notification that raced the load).
   */
  replaceAll(placements: Placement[], generation: number): void {
    const next = new Map<string, Entry>();
    for (const p of placements) next.set(p.unit, { ...p, generation });
    for (const [unit, e] of this.entries) {
      if (e.generation > generation) next.set(unit, e);
    }
    this.entries = next;
    this.snapshotGeneration = generation;
  }

  /**
   * Applies one observation unless the cache already holds something learned at a later
   * generation. Equal generations apply (a direct re-read is at least as fresh as what we had).
   * Returns true when the entry changed.
   */
  observe(o: UnitObservation): boolean {
    const cur = this.entries.get(o.unit);
    if (cur && cur.generation > o.generation) return false;
    if (!o.placement) {
      return this.entries.delete(o.unit);
    }
    const changed = !cur || cur.shard !== o.placement.shard || cur.epoch !== o.placement.epoch || cur.state !== o.placement.state;
    this.entries.set(o.unit, { ...o.placement, unit: o.unit, generation: o.generation });
    return changed;
  }
}

const STATES: ReadonlySet<string> = new Set(['active', 'moving']);

/**
 * Parses a `shardctl_placement` NOTIFY payload `{unit, shard, epoch, state, generation}`.
 * Anything malformed returns undefined (the caller falls back to a full refresh).
 */
export function parsePlacementNotification(payload: string | undefined): UnitObservation | undefined {
  if (!payload) return undefined;
  let v: any;
  try {
    v = JSON.parse(payload);
  } catch {
    return undefined;
  }
  if (!v || typeof v !== 'object' || typeof v.unit !== 'string' || v.unit.length === 0) return undefined;
  const generation = toSafeInt(v.generation);
  if (generation === undefined) return undefined;
  // A notification for a deleted unit carries no shard.
  if (v.shard === null || v.shard === undefined) return { unit: v.unit, placement: undefined, generation };
  const epoch = toSafeInt(v.epoch);
  if (typeof v.shard !== 'string' || epoch === undefined || typeof v.state !== 'string' || !STATES.has(v.state)) return undefined;
  return { unit: v.unit, generation, placement: { unit: v.unit, shard: v.shard, epoch, state: v.state as PlacementState } };
}

/** bigint columns arrive as strings from node-pg and as numbers or strings in JSON. */
export function toSafeInt(v: unknown): number | undefined {
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : NaN;
  return Number.isSafeInteger(n) ? n : undefined;
}
