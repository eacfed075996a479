import { describe, it, expect } from 'vitest';
import { chooseShardForNewUnit, headroomAfter, moveTargetProblems, usableCapacity, ShardLoad } from '../../lib/directory/choose';
import { ShardctlError } from '../../lib/errors';

const shard = (name: string, load: number, capacity = 1000, status = 'open'): ShardLoad => ({ name, load, capacity, status });

function errorOf(fn: () => unknown): ShardctlError {
  try {
    fn();
  } catch (e) {
    return e as ShardctlError;
  }
  throw new Error('expected an error');
}

describe('placement of a new unit', () => {
  it('picks the open shard with the most headroom after adding the expected load', () => {
    expect(chooseShardForNewUnit([shard('a', 500), shard('b', 100), shard('c', 300)], 10, 0.1)).toBe('b');
  });

  it('compares headroom, not load: a bigger shard with more load can have more room', () => {
    expect(chooseShardForNewUnit([shard('a', 100, 500), shard('b', 400, 2000)], 10, 0.1)).toBe('b');
  });

  it('breaks ties by shard name', () => {
    expect(chooseShardForNewUnit([shard('c', 100), shard('b', 100), shard('d', 100)], 1, 0.1)).toBe('b');
  });

  it('skips shards that are not open, however empty', () => {
    expect(chooseShardForNewUnit([shard('a', 0, 1000, 'closed'), shard('b', 0, 1000, 'draining'), shard('c', 800)], 1, 0.1)).toBe('c');
  });

  it('honours the headroom fraction: usable capacity is capacity * (1 - fraction)', () => {
    expect(usableCapacity(1000, 0.1)).toBe(900);
    expect(headroomAfter(shard('a', 850), 50, 0.1)).toBe(0);
    // exactly filling the usable capacity fits; one more does not
    expect(chooseShardForNewUnit([shard('a', 850)], 50, 0.1)).toBe('a');
    expect(() => chooseShardForNewUnit([shard('a', 850)], 51, 0.1)).toThrow(ShardctlError);
    // with no reserved headroom the whole capacity is usable
    expect(chooseShardForNewUnit([shard('a', 950)], 50, 0)).toBe('a');
  });

  it('fails with NoCapacity and an actionable message when no open shard fits', () => {
    const e = errorOf(() => chooseShardForNewUnit([shard('a', 890), shard('b', 0, 1000, 'closed')], 20, 0.1));
    expect(e).toBeInstanceOf(ShardctlError);
    expect(e.type).toBe('NoCapacity');
    expect(e.message).toBe('no open shard has room for 20: add a shard or raise capacity');
  });

  it('fails with NoCapacity when there are no shards at all', () => {
    expect(errorOf(() => chooseShardForNewUnit([], 1, 0.1)).type).toBe('NoCapacity');
  });

  it('places a zero-load unit on the emptiest shard', () => {
    expect(chooseShardForNewUnit([shard('a', 10), shard('b', 5)], 0, 0.1)).toBe('b');
  });
});

describe('the target of a move', () => {
  const target = (o: Partial<ShardLoad> = {}): ShardLoad => ({ name: 'shard-d', capacity: 1000, load: 100, status: 'open', dedicatedTo: null, ...o });

  it('takes a unit onto an open, shared shard with room', () => {
    expect(moveTargetProblems(target(), 'acme', 50, 0.1)).toEqual([]);
  });

  it('refuses a shard that is draining or closed, naming its status', () => {
    expect(moveTargetProblems(target({ status: 'draining' }), 'acme', 1, 0.1)).toEqual(['target shard-d is draining, not open']);
    expect(moveTargetProblems(target({ status: 'closed' }), 'acme', 1, 0.1)).toEqual(['target shard-d is closed, not open']);
  });

  it('refuses a shard dedicated to another tenant, and takes the tenant it is dedicated to', () => {
    expect(moveTargetProblems(target({ dedicatedTo: 'globex' }), 'acme', 1, 0.1)).toEqual([
      'target shard-d is dedicated to tenant globex: no other unit moves there',
    ]);
    expect(moveTargetProblems(target({ dedicatedTo: 'acme', load: 0 }), 'acme', 1, 0.1)).toEqual([]);
  });

  it('refuses a shard without headroom for the unit, keeping the reserved fraction free', () => {
    // usable 900 of 1000; 850 + 50 fits exactly, 851 + 50 does not.
    expect(moveTargetProblems(target({ load: 850 }), 'acme', 50, 0.1)).toEqual([]);
    expect(moveTargetProblems(target({ load: 851 }), 'acme', 50, 0.1)).toEqual(['target shard-d lacks headroom: load 851 + 50 > usable 900 of capacity 1000']);
  });

  it('names every problem at once', () => {
    expect(moveTargetProblems(target({ status: 'draining', dedicatedTo: 'globex', load: 2000 }), 'acme', 1, 0.1)).toHaveLength(3);
  });
});
