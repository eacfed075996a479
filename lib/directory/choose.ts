// Where a new unit goes: the open, shared (not dedicated) shard with the most headroom after adding its expected load,
// keeping limits.headroomFraction of each shard's capacity free. Pure (no I/O). A shard's committed load is what
// its units weigh plus what moves in flight reserve on it (lib/directory/reservations.ts): every check counts both.
import { ShardctlError } from '../errors';
import { residencyProblem, withinResidency, type Residency } from './residency';
import { isUnitOfTenant } from '../buckets/units';

export interface ShardLoad {
  name: string;
  capacity: number;
  load: number;
  status: string;
  /** Dedicated to one tenant (`tenant isolate`): no new unit goes there. */
  dedicatedTo?: string | null;
  /** `dedicated` (`shards add --class dedicated`): reserved for an isolated tenant, no shared unit goes there. */
  class?: 'shared' | 'dedicated';
  /** Load reserved on the shard by moves in flight (not yet counted in `load`). */
  reserved?: number;
  /** Its region (`shards add --region`); null or absent: none recorded. */
  region?: string | null;
  /** The reservations behind `reserved`, named in a refusal. */
  reservations?: readonly HeldReservation[];
}

/** A reservation counted on a shard: the move holding it, its unit and the load it holds. */
export interface HeldReservation {
  moveId: string;
  unit: string;
  load: number;
}

/** What the shard holds now: its units' load plus what moves in flight reserve on it. */
export function committedLoad(s: ShardLoad): number {
  return s.load + (s.reserved ?? 0);
}

function reservedText(s: ShardLoad): string {
  if (!s.reserved) return '';
  const named = (s.reservations ?? [])
    .slice(0, 3)
    .map((r) => `${r.load} by move ${r.moveId} of ${r.unit}`)
    .join(', ');
  const more = (s.reservations?.length ?? 0) > 3 ? `, and ${s.reservations!.length - 3} more` : '';
  return ` + reserved ${s.reserved}${named ? ` (reservation ${named}${more})` : ''}`;
}

/** Capacity usable for placement: capacity minus the reserved headroom fraction. */
export function usableCapacity(capacity: number, headroomFraction: number): number {
  return capacity * (1 - headroomFraction);
}

/** Headroom left on the shard if `expectedLoad` were added (negative: does not fit). */
export function headroomAfter(s: ShardLoad, expectedLoad: number, headroomFraction: number): number {
  return usableCapacity(s.capacity, headroomFraction) - committedLoad(s) - expectedLoad;
}

/**
 * Why `unit` (expected load `expectedLoad`) may not move onto shard `s`: not open, dedicated to
 * another tenant, outside the unit's residency, or short of headroom. Empty when it may.
 */
export function moveTargetProblems(s: ShardLoad, unit: string, expectedLoad: number, headroomFraction: number, residency: Residency = null): string[] {
  const reasons: string[] = [];
  if (s.status !== 'open') reasons.push(`target ${s.name} is ${s.status}, not open`);
  const outside = residencyProblem(s, unit, residency);
  if (outside) reasons.push(outside);
  if (s.dedicatedTo && !isUnitOfTenant(unit, s.dedicatedTo))
    reasons.push(`target ${s.name} is dedicated to tenant ${s.dedicatedTo}: no other unit moves there`);
  else if (s.class === 'dedicated' && !s.dedicatedTo)
    reasons.push(`target ${s.name} is a dedicated-class shard, kept for an isolated tenant: use \`shardctl tenant isolate --tenant ${unit}\``);
  const usable = usableCapacity(s.capacity, headroomFraction);
  if (committedLoad(s) + expectedLoad > usable) {
    reasons.push(`target ${s.name} lacks headroom: load ${s.load}${reservedText(s)} + ${expectedLoad} > usable ${usable.toFixed(0)} of capacity ${s.capacity}`);
  }
  return reasons;
}

export function chooseShardForNewUnit(shards: readonly ShardLoad[], expectedLoad: number, headroomFraction: number, residency: Residency = null): string {
  let best: { name: string; room: number } | undefined;
  for (const s of shards) {
    if (s.status !== 'open' || s.dedicatedTo || s.class === 'dedicated') continue;
    if (!withinResidency(s.region, residency)) continue;
    const room = headroomAfter(s, expectedLoad, headroomFraction);
    if (room < 0) continue;
    if (!best || room > best.room || (room === best.room && s.name < best.name)) best = { name: s.name, room };
  }
  if (!best) {
    const where = residency ? ` in region ${residency.join(' or ')}` : '';
    throw new ShardctlError('NoCapacity', `no open shard${where} has room for ${expectedLoad}: add a shard or raise capacity`, {
      expectedLoad,
      headroomFraction,
      shards: shards.map((s) => ({ name: s.name, status: s.status, capacity: s.capacity, load: s.load, reserved: s.reserved ?? 0 })),
    });
  }
  return best.name;
}
