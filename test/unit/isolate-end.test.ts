// judgeIsolateEnd (lib/rebalance/isolate-end.ts): an isolate that did not finish undoes its
// dedication only when it made it, the dedication still names the tenant, nothing moves onto or
// off the shard, and the isolation has not taken hold; every other case keeps it, saying why,
// with the command that undoes it.
import { describe, it, expect } from 'vitest';
import { judgeIsolateEnd, type IsolateEndFacts } from '../../lib/rebalance/isolate-end';

const base: IsolateEndFacts = {
  shard: 'shard-d',
  tenant: 'acme',
  dedicatedByRun: true,
  dedicatedTo: 'acme',
  tenantAt: { shard: 'shard-a', state: 'active' },
  othersOnShard: [],
  movedOff: [],
  inFlight: [],
};
const judge = (o: Partial<IsolateEndFacts>) => judgeIsolateEnd({ ...base, ...o });
const kept = (o: Partial<IsolateEndFacts>) => {
  const v = judge(o);
  if (v.undo) throw new Error(`undone: ${v.why}`);
  expect(v.undoCommand).toBe('shardctl shards undedicate shard-d');
  return v.state.join(' | ');
};

describe('judgeIsolateEnd', () => {
  it('undoes the dedication when the tenant never got to the shard', () => {
    expect(judge({})).toEqual({ undo: true, why: 'acme never got to shard-d (it is on shard-a)' });
  });

  it('undoes it when the tenant is at home on the shard and nothing was moved off yet', () => {
    expect(judge({ tenantAt: { shard: 'shard-d', state: 'active' }, othersOnShard: ['b1', 'b2'] })).toEqual({
      undo: true,
      why: 'nothing was moved off shard-d yet (2 other unit(s) still there)',
    });
  });

  it('keeps a dedication it did not make, or one changed since', () => {
    expect(kept({ dedicatedByRun: false })).toBe('shard-d was dedicated to acme before this run: left dedicated');
    expect(kept({ dedicatedTo: null })).toBe('shard-d is shared now, changed outside this run: left as it is');
    expect(kept({ dedicatedTo: 'other' })).toBe('shard-d is dedicated to other now, changed outside this run: left as it is');
  });

  it('keeps it (fails closed) while a move onto or off the shard has not ended, or the tenant is not active', () => {
    expect(kept({ inFlight: ['acme shard-a -> shard-d (soak)'] })).toBe(
      'shard-d stays dedicated to acme: move(s) onto or off it have not ended: acme shard-a -> shard-d (soak)',
    );
    expect(kept({ tenantAt: { shard: 'shard-a', state: 'moving' } })).toBe('shard-d stays dedicated to acme: acme is moving on shard-a');
    expect(kept({ tenantAt: undefined })).toBe('shard-d stays dedicated to acme: acme is not in the directory');
  });

  it('keeps it when the isolation took hold: complete, or half done', () => {
    expect(kept({ tenantAt: { shard: 'shard-d', state: 'active' } })).toBe(
      'shard-d stays dedicated to acme: the isolation is complete (acme alone on shard-d)',
    );
    expect(kept({ tenantAt: { shard: 'shard-d', state: 'active' }, othersOnShard: ['b2'], movedOff: ['b1'] })).toBe(
      'shard-d stays dedicated to acme, half isolated: moved off b1; still there b2 | the next `shardctl rebalance start` moves the rest off (nothing but acme may stay on a shard dedicated to it)',
    );
  });
});
