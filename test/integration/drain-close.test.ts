// The close at the end of a drain (closeDrainedShard) against a real directory of this test's
// own: it closes only a draining shard with no unit on it and no move onto or off it that has
// not ended, and otherwise changes nothing and names each obstacle.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { closePools } from '../helpers/stack';
import { closeDrainedShard, getShard, setShardStatus } from '../../lib/directory/shards';
import { recordMoveEvent } from '../../lib/directory/moves';

let fleet: Fleet;
const actor = { actor: 'test' };

beforeAll(async () => {
  fleet = await ownFleet('drainclose', { worker: false });
});
afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('closing a drained shard', () => {
  it('refuses an open shard, one with a unit still placed, and one with a move onto it that has not ended; closes once none is left', async () => {
    const dir = fleet.directory;
    expect(await closeDrainedShard(dir, 'shard-b', actor)).toEqual({ closed: false, reasons: ['shard-b is open, not draining (someone reopened it)'] });

    const tenant = await fleet.tenant('shard-b');
    await setShardStatus(dir, 'shard-b', 'draining', actor);
    const held = await closeDrainedShard(dir, 'shard-b', actor);
    expect(held).toEqual({ closed: false, reasons: [`1 unit(s) still placed on shard-b: ${tenant}`] });

    // The unit leaves by a move that is still in its soak: shard-b is its way back.
    const other = await fleet.tenant('shard-a');
    const ev = { unit: other, source: 'shard-a', target: 'shard-b', workflowId: `move-${other}`, actor: 'test' };
    await recordMoveEvent(dir, { ...ev, moveId: `${other}.e1`, action: 'start', status: 'plan' }, null);
    await dir.query(`update shardctl.units set shard = 'shard-a' where unit = $1`, [tenant]);
    const moving = await closeDrainedShard(dir, 'shard-b', actor);
    expect(moving).toEqual({ closed: false, reasons: [`move ${other}.e1 of ${other} shard-a -> shard-b has not ended (last recorded phase plan)`] });
    expect(await getShard(dir, 'shard-b')).toMatchObject({ status: 'draining' });

    await recordMoveEvent(dir, { ...ev, moveId: `${other}.e1`, action: 'cancelled', status: 'cancelling' }, null);
    const closed = await closeDrainedShard(dir, 'shard-b', actor);
    expect(closed.closed).toBe(true);
    expect(await getShard(dir, 'shard-b')).toMatchObject({ status: 'closed', units: 0 });
    const audit = await dir.query(`select actor, detail from shardctl.audit where action = 'shard.status' order by id desc limit 1`);
    expect(audit.rows[0]).toMatchObject({ actor: 'test', detail: { shard: 'shard-b', status: 'closed', from: 'draining' } });
    // Closed stays closed: a second close is an answer, not an error.
    expect((await closeDrainedShard(dir, 'shard-b', actor)).closed).toBe(true);
  });
});
