// `shardctl shards set-status NAME open|draining|closed` (issue 13) on a fleet of the test's own
// (its own directory database, test/helpers/fleet.ts), so closing a shard there changes nothing
// the other suites see: bad input changes nothing, a shard that still holds a unit is never
// closed (exit 4 with the reason), every change is audited with its operator, and `shards list`
// shows the new status.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli, jsonError } from '../helpers/cli';
import { closePools } from '../helpers/stack';
import { getShard } from '../../lib/directory/shards';

let fleet: Fleet;
const cli = (...args: string[]) => runCli(args, { env: { SHARDCTL_CONFIG: fleet.configFile, SHARDCTL_ACTOR: 'status-test' } });
const statusOf = async (shard: string) => (await getShard(fleet.directory, shard))?.status;
const audits = async (shard: string) =>
  (await fleet.directory.query(`select actor, detail, reason from shardctl.audit where action = 'shard.status' and detail->>'shard' = $1 order by id`, [shard]))
    .rows;

beforeAll(async () => {
  fleet = await ownFleet('sst', { worker: false });
}, 120_000);

afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('shards set-status', () => {
  it('refuses bad input and a shard that still holds a unit, changing nothing; audits each change; list shows it', { timeout: 120_000 }, async () => {
    const tenant = await fleet.tenant('shard-c');
    expect(await statusOf('shard-c')).toBe('open');

    const bogus = await cli('shards', 'set-status', 'shard-c', 'retired', '--json');
    expect(bogus.code).toBe(2);
    expect(jsonError(bogus).message).toContain('status must be one of open, closed, draining');
    const unknown = await cli('shards', 'set-status', 'shard-zz', 'open');
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain('shard-zz');

    // A unit is placed there: never closed, and the reason names it and the way out.
    const refused = await cli('shards', 'set-status', 'shard-c', 'closed', '--json');
    expect(refused.code).toBe(4);
    expect(jsonError(refused).message).toMatch(new RegExp(`refusing to close shard-c: 1 unit\\(s\\) still placed on shard-c: ${tenant}.*shards drain`));
    expect(await statusOf('shard-c')).toBe('open');
    expect(await audits('shard-c')).toEqual([]);

    const draining = await cli('shards', 'set-status', 'shard-c', 'draining', '--reason', 'hardware refresh', '--json');
    expect(draining.code, draining.stderr).toBe(0);
    expect(JSON.parse(draining.stdout)).toEqual({ name: 'shard-c', from: 'open', status: 'draining' });
    expect(await statusOf('shard-c')).toBe('draining');

    // shard-b holds nothing in this fleet: it closes, and opens again.
    const closed = await cli('shards', 'set-status', 'shard-b', 'closed');
    expect(closed.code, closed.stderr).toBe(0);
    expect(closed.stdout.trim()).toBe('shard-b: open -> closed');
    const list = await cli('shards', 'list', '--json');
    expect(JSON.parse(list.stdout).find((r: { name: string }) => r.name === 'shard-b')).toMatchObject({ status: 'closed', units: 0 });
    expect((await cli('shards', 'set-status', 'shard-b', 'open')).code).toBe(0);
    expect(await statusOf('shard-b')).toBe('open');

    expect(await audits('shard-c')).toEqual([{ actor: 'status-test', detail: expect.objectContaining({ status: 'draining' }), reason: 'hardware refresh' }]);
    expect((await audits('shard-b')).map((a) => [a.actor, a.detail.status])).toEqual([
      ['status-test', 'closed'],
      ['status-test', 'open'],
    ]);
  });
});
