import { describe, it, expect } from 'vitest';
import { replicationCapacityProblems } from '../../lib/shard/replication-capacity';

describe("a move's replication slots: the plan's capacity check", () => {
  it('passes a logical server with a slot free, on either side', () => {
    expect(replicationCapacityProblems('shard-a', 'source', { walLevel: 'logical', maxSlots: 10, usedSlots: 9 })).toEqual([]);
    expect(replicationCapacityProblems('shard-b', 'target', { walLevel: 'logical', maxSlots: 10, usedSlots: 9 })).toEqual([]);
  });

  it('refuses a server whose slots are all taken, naming the side, the numbers and the slot it lacks', () => {
    expect(replicationCapacityProblems('shard-a', 'source', { walLevel: 'logical', maxSlots: 10, usedSlots: 10 })).toEqual([
      "source shard-a has no free replication slot (10 of max_replication_slots=10 used): the move's forward slot needs one; raise max_replication_slots or drop orphaned slots (`shardctl doctor`)",
    ]);
    expect(replicationCapacityProblems('shard-b', 'target', { walLevel: 'logical', maxSlots: 4, usedSlots: 5 })[0]).toMatch(
      /^target shard-b has no free replication slot \(5 of max_replication_slots=4 used\): the reverse slot \(the way back during soak\) needs one/,
    );
  });

  it('refuses a server without logical decoding', () => {
    expect(replicationCapacityProblems('shard-b', 'target', { walLevel: 'replica', maxSlots: 10, usedSlots: 0 })).toEqual([
      'target shard-b has wal_level=replica: the reverse slot (the way back during soak) needs wal_level=logical (ALTER SYSTEM SET wal_level = logical, then restart it)',
    ]);
  });
});
