// `rebalance plan|start --max-moves K` (issue 13) on a fleet of the test's own (its own directory
// database): the plan proposes at most K moves and says it stopped at its limit; bad K is refused
// before any connection (nothing planned, nothing started).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli, jsonError } from '../helpers/cli';
import { closePools } from '../helpers/stack';

let fleet: Fleet;
const cli = (args: string[]) => runCli(args, { env: { SHARDCTL_CONFIG: fleet.configFile, SHARDCTL_ACTOR: 'limits-test' } });

beforeAll(async () => {
  fleet = await ownFleet('rlimits', { worker: false });
  for (let i = 0; i < 3; i++) await fleet.tenant('shard-a', { prefix: 'rl', load: 100 });
}, 60_000);

afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('rebalance --max-moves', () => {
  it('plans at most K moves and says the plan stopped at its limit', async () => {
    const all = JSON.parse((await cli(['rebalance', 'plan', '--json'])).stdout);
    expect(all.moves).toHaveLength(2);
    expect(all.balanced).toBe(true);
    const r = await cli(['rebalance', 'plan', '--max-moves', '1', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const one = JSON.parse(r.stdout);
    expect(one.moves).toHaveLength(1);
    expect(one.moves[0]).toMatchObject({ from: 'shard-a', to: all.moves[0].to });
    expect(one.balanced).toBe(false);
    expect(one.problems).toEqual([expect.stringMatching(/^the plan stops at its limit of 1 move\(s\)/)]);
  });

  it('refuses a bad K before any connection, for plan and start, and starts nothing', async () => {
    for (const verb of ['plan', 'start']) {
      for (const k of ['0', '-1', 'x', '100001']) {
        const r = await cli(['rebalance', verb, '--max-moves', k, '--json']);
        expect({ verb, k, code: jsonError(r).code }).toEqual({ verb, k, code: 'InvalidInput' });
      }
    }
    // The measuring bound of `rebalance plan` likewise.
    for (const n of ['0', '999', 'x', '1e6', '100000001']) {
      const r = await cli(['rebalance', 'plan', '--sample-rows', n, '--json']);
      expect({ n, code: jsonError(r).code, message: jsonError(r).message }).toEqual({
        n,
        code: 'InvalidInput',
        message: expect.stringMatching(/--sample-rows must be/),
      });
    }
    const running = await fleet.t.client.workflow
      .getHandle(fleet.config.temporal.rebalanceWorkflowId)
      .describe()
      .then(() => true)
      .catch(() => false);
    expect(running).toBe(false);
  });
});
