// doctor's judgement of two resharding leftovers (lib/doctor/findings.ts), pure: a shard dedicated
// to a tenant placed elsewhere, and rows of a bucket on a shard that does not own it. Neither is
// judged while something could be on its way (an isolate run, a move of the unit) or unknown.
import { describe, it, expect } from 'vitest';
import { judge, type Facts, type PlacementFact, type ShardFacts, type RunningMove } from '../../lib/doctor/findings';

const at = (unit: string, shard: string): PlacementFact => ({ unit, shard, epoch: 1, state: 'active', moveId: null });
const shard = (name: string, bucketRows: ShardFacts['bucketRows'] = []): ShardFacts => ({
  shard: name,
  host: `h-${name}`,
  reachable: true,
  slots: [],
  publications: [],
  schemaInstalled: true,
  fences: [{ unit: 'acme', epoch: 1, owned: name === 'a', frozen: false }],
  unfenced: [],
  foreignBlobs: [],
  bucketRows,
});
const moving = (unit: string): RunningMove => ({
  unit,
  workflowId: `move-${unit}`,
  moveId: `${unit}.e1.x`,
  phase: 'soak',
  blockedReason: null,
  phaseSince: null,
  soakEndsAt: null,
});
function facts(o: { running?: RunningMove[]; rebalanceRunning?: boolean; temporal?: boolean; rows?: ShardFacts['bucketRows'] } = {}): Facts {
  return {
    directory: {
      reachable: true,
      placements: [at('acme', 'a'), at('bucket:ev:1', 'a'), at('bucket:ev:2', 'b')],
      moveTargets: {},
      reservations: [],
      dedications: [{ shard: 'c', tenant: 'acme' }],
    },
    temporal: { reachable: o.temporal ?? true, running: o.running ?? [], rebalanceRunning: o.rebalanceRunning ?? false },
    shards: [
      shard('a', [{ unit: 'bucket:ev:1', table: '"s"."ev"', column: 'bucket', bucket: 1 }]),
      shard(
        'b',
        o.rows ?? [
          { unit: 'bucket:ev:1', table: '"s"."ev"', column: 'bucket', bucket: 1 },
          { unit: 'bucket:ev:2', table: '"s"."ev"', column: 'bucket', bucket: 2 },
        ],
      ),
      shard('c'),
    ],
    walThresholdBytes: 1e9,
  };
}
const ids = (f: Facts) =>
  judge(f, { fenceLockClass: 1 })
    .filter((x) => x.kind === 'dedication-elsewhere' || x.kind === 'stray-bucket-rows')
    .map((x) => x.id);

describe('doctor: resharding leftovers', () => {
  it('reports a dedication whose tenant is elsewhere and rows of a bucket on a shard that does not own it, nothing on owners', () => {
    expect(ids(facts())).toEqual(['dedication-elsewhere:c', 'stray-bucket-rows:b:bucket:ev:1']);
  });

  it('judges no dedication while the fleet runs a rebalance run (an isolate dedicates before it moves) or when that is unknown', () => {
    expect(ids(facts({ rebalanceRunning: true }))).not.toContain('dedication-elsewhere:c');
    const unknown = facts();
    delete unknown.temporal.rebalanceRunning;
    expect(ids(unknown)).not.toContain('dedication-elsewhere:c');
    expect(ids(facts({ running: [moving('acme')] }))).not.toContain('dedication-elsewhere:c');
  });

  it('judges no bucket rows while a move of the bucket runs (its copies are the move own) or without Temporal', () => {
    expect(ids(facts({ running: [moving('bucket:ev:1')] }))).toEqual(['dedication-elsewhere:c']);
    expect(ids(facts({ temporal: false }))).toEqual([]);
  });
});
