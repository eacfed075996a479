// The shard inventory is an allowlist (issue 13): a shard the directory has but the config does
// not name (here shard-c, dropped from the config of a fleet of the test's own after a tenant was
// placed there) is never connected to — the config holds the only way to reach a shard — and each
// verb says so instead of failing on it: `shards list` names it on stderr and lists the rest,
// `rebalance plan` plans no move of its unit and names it, `move plan` refuses its unit and the
// shard as a target, each with the reason (exit 4, exit 3: not found).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli, configFile } from '../helpers/cli';
import { closePools } from '../helpers/stack';

let fleet: Fleet;
let file: { file: string; remove: () => void };
let stranded: string;
let heavy: string;

const cli = (args: string[]) => runCli(['--config', file.file, ...args], { env: { SHARDCTL_ACTOR: 'allowlist-test' } });

beforeAll(async () => {
  fleet = await ownFleet('allow', { worker: false });
  stranded = await fleet.tenant('shard-c', { rows: 3, load: 5, prefix: 'strand' });
  heavy = await fleet.tenant('shard-a', { rows: 3, load: 50, prefix: 'heavy' });
  file = configFile({ ...fleet.config, shards: fleet.config.shards.filter((s) => s.name !== 'shard-c') });
}, 120_000);
afterAll(async () => {
  file?.remove();
  await fleet?.close();
  await closePools();
});

describe('a shard in the directory but not in the config', () => {
  it('is not listed by shards list, which names it on stderr and lists the configured shards', { timeout: 60_000 }, async () => {
    const r = await cli(['shards', 'list', '--rate-window', '0', '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).map((x: { name: string }) => x.name)).toEqual(['shard-a', 'shard-b']);
    expect(r.stderr).toBe(
      'shards list: shard-c is in the directory (1 unit(s)) but not in the config: not listed, never connected to (add it with `shardctl shards add`)\n',
    );
  });

  it('has its units planned by no rebalance plan, which names them as left where they are', { timeout: 60_000 }, async () => {
    const r = await cli(['rebalance', 'plan', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const plan = JSON.parse(r.stdout);
    expect(plan.moves.map((m: { unit: string }) => m.unit)).not.toContain(stranded);
    expect(plan.moves.every((m: { from: string; to: string }) => m.from !== 'shard-c' && m.to !== 'shard-c')).toBe(true);
    expect(plan.shards.map((s: { name: string }) => s.name)).toEqual(['shard-a', 'shard-b']);
    expect(plan.problems).toContain(
      `${stranded} must leave shard-c (shard shard-c is not in the inventory) but is on shard-c, which the config does not name: nothing connects to a shard outside the config (add it with \`shardctl shards add\` to move it)`,
    );
  });

  it('is refused by move plan as the source of its unit and as a target, with the reason', { timeout: 60_000 }, async () => {
    const off = await cli(['move', 'plan', '--tenant', stranded, '--to', 'shard-b', '--json']);
    expect(off.code, off.stderr).toBe(4);
    expect(JSON.parse(off.stdout)).toMatchObject({
      ok: false,
      source: 'shard-c',
      reasons: [
        `unit ${stranded} is on shard-c, which the config does not name: nothing connects to a shard outside the config (add it with \`shardctl shards add\` to move the unit)`,
      ],
    });
    const onto = await cli(['move', 'plan', '--tenant', heavy, '--to', 'shard-c']);
    expect(onto.code).toBe(3);
    expect(onto.stderr).toContain('unknown shard "shard-c" (known: shard-a, shard-b)');
  });
});
