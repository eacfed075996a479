// Where a new unit goes: the open, shared (not dedicated) shard with the most headroom after adding its expected load,
// keeping limits.headroomFraction of each shard's capacity free. Pure (no I/O).
import { ShardctlError } from '../errors';

export interface ShardLoad {
  name: string;
  capacity: number;
  load: number;
  status: string;
  /** Dedicated to one tenant (`tenant isolate`): no new unit goes there. */
  dedicatedTo?: string | null;
}

/** Capacity usable for placement: capacity minus the reserved headroom fraction. */
export function usableCapacity(capacity: number, headroomFraction: number): number {
  return capacity * (1 - headroomFraction);
}

/** Headroom left on the shard if `expectedLoad` were added (negative: does not fit). */
export function headroomAfter(s: ShardLoad, expectedLoad: number, headroomFraction: number): number {
  return usableCapacity(s.capacity, headroomFraction) - s.load - expectedLoad;
}

/**
 * Why `unit` (expected load `expectedLoad`) may not move onto shard `s`: not open, dedicated to
 * another tenant, or short of headroom. Empty when it may.
 */
export function moveTargetProblems(s: ShardLoad, unit: string, expectedLoad: number, headroomFraction: number): string[] {
  const reasons: string[] = [];
  if (s.status !== 'open') reasons.push(`target ${s.name} is ${s.status}, not open`);
  if (s.dedicatedTo && s.dedicatedTo !== unit) reasons.push(`target ${s.name} is dedicated to tenant ${s.dedicatedTo}: no other unit moves there`);
  const usable = usableCapacity(s.capacity, headroomFraction);
  if (s.load + expectedLoad > usable) {
    reasons.push(`target ${s.name} lacks headroom: load ${s.load} + ${expectedLoad} > usable ${usable.toFixed(0)} of capacity ${s.capacity}`);
  }
  return reasons;
}

export function chooseShardForNewUnit(shards: readonly ShardLoad[], expectedLoad: number, headroomFraction: number): string {
  let best: { name: string; room: number } | undefined;
  for (const s of shards) {
    if (s.status !== 'open' || s.dedicatedTo) continue;
    const room = headroomAfter(s, expectedLoad, headroomFraction);
    if (room < 0) continue;
    if (!best || room > best.room || (room === best.room && s.name < best.name)) best = { name: s.name, room };
  }
  if (!best) {
    throw new ShardctlError('NoCapacity', `no open shard has room for ${expectedLoad}: add a shard or raise capacity`, {
      expectedLoad,
      headroomFraction,
      shards: shards.map((s) => ({ name: s.name, status: s.status, capacity: s.capacity, load: s.load })),
    });
  }
  return best.name;
}
