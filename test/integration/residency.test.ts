// Residency policy (issue 13): the regions a tenant may live in, recorded in the directory beside
// its placement, on a fleet of the test's own (its own directory database, so the shards' regions
// set here are seen by no other suite). Proven here, on the real shards and directory:
//   - `tenant create --regions` places the tenant only on a shard of those regions, and refuses a
//     named shard outside them (nothing created);
//   - `tenant residency` shows, sets and clears it, audited, without raising the unit's epoch;
//     setting it while the tenant sits outside says so and moves nothing;
//   - `move plan` to a shard outside it is refused with the reason, and so is the move's
//     reservation (the check a running move takes, in its own transaction);
//   - `rebalance plan` moves a tenant that sits outside its residency into it;
//   - bad input is refused before any connection and changes nothing.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli, jsonError } from '../helpers/cli';
import { closePools, uniq } from '../helpers/stack';
import { reserveHeadroom } from '../../lib/directory/reservations';

let fleet: Fleet;
const cli = (args: string[]) => runCli(args, { env: { SHARDCTL_CONFIG: fleet.configFile, SHARDCTL_ACTOR: 'residency-test' } });
const json = (r: { stdout: string }) => JSON.parse(r.stdout);
const audits = async (unit: string) =>
  (await fleet.directory.query(`select actor, detail, reason from shardctl.audit where action = 'policy.residency' and unit = $1 order by id`, [unit])).rows;
const epochOf = async (unit: string) => Number((await fleet.directory.query('select epoch from shardctl.units where unit = $1', [unit])).rows[0].epoch);

beforeAll(async () => {
  fleet = await ownFleet('residency', { worker: false });
  // shard-a in us-east, shard-b in eu-west, shard-c with no region recorded.
  await fleet.directory.query(`update shardctl.shards set region = case name when 'shard-a' then 'us-east' when 'shard-b' then 'eu-west' end`);
}, 60_000);

afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('tenant residency', () => {
  it('tenant create --regions places the tenant in its region only, and refuses a named shard outside it', async () => {
    const t = uniq('res');
    const made = await cli(['tenant', 'create', t, '--regions', 'eu-west', '--json']);
    expect(made.code, made.stderr).toBe(0);
    expect(json(made).shard).toBe('shard-b');
    const shown = await cli(['tenant', 'residency', t, '--json']);
    expect(json(shown)).toEqual({ tenant: t, shard: 'shard-b', regions: ['eu-west'] });

    const other = uniq('res');
    for (const shard of ['shard-a', 'shard-c']) {
      const r = await cli(['tenant', 'create', other, '--shard', shard, '--regions', 'eu-west', '--json']);
      expect(jsonError(r).code).toBe('PreconditionFailed');
      expect(jsonError(r).message).toMatch(
        shard === 'shard-a' ? /target shard-a is in region us-east; .* may reside only in eu-west/ : /shard-c is in no recorded region/,
      );
    }
    expect((await fleet.directory.query('select 1 from shardctl.units where unit = $1', [other])).rowCount).toBe(0);
  });

  it('move plan and the move reservation refuse a target outside the residency, naming it', async () => {
    const t = await fleet.tenant('shard-b', { prefix: 'res' });
    expect((await cli(['tenant', 'residency', t, '--regions', 'eu-west', '--reason', 'GDPR'])).code).toBe(0);
    const plan = await cli(['move', 'plan', '--tenant', t, '--to', 'shard-a', '--json']);
    expect(plan.code).not.toBe(0);
    expect(json(plan).ok).toBe(false);
    expect(json(plan).reasons.join('\n')).toMatch(/target shard-a is in region us-east; .* may reside only in eu-west/);
    const epoch = await epochOf(t);
    const r = await reserveHeadroom(
      fleet.directory,
      { moveId: uniq('m'), unit: t, source: 'shard-b', target: 'shard-c', epoch, workflowId: uniq('wf'), actor: 'residency-test' },
      fleet.config.limits.headroomFraction,
    );
    expect(r.ok).toBe(false);
    expect(!r.ok && r.reasons.join('\n')).toMatch(/target shard-c is in no recorded region/);
    expect((await fleet.directory.query('select count(*)::int as n from shardctl.reservations where unit = $1', [t])).rows[0].n).toBe(0);
  });

  it('sets and clears residency, audited, without raising the epoch; a tenant left outside is reported and moved by rebalance plan, not by the change', async () => {
    const t = await fleet.tenant('shard-a', { prefix: 'res' });
    const epoch = await epochOf(t);
    const set = await cli(['tenant', 'residency', t, '--regions', 'eu-west', '--reason', 'GDPR']);
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toMatch(/note: .* is on shard-a \(region us-east\), outside it: `shardctl rebalance plan` proposes the move; nothing moved/);
    expect(await epochOf(t)).toBe(epoch);
    expect((await fleet.directory.query('select shard from shardctl.units where unit = $1', [t])).rows[0].shard).toBe('shard-a');

    const plan = await cli(['rebalance', 'plan', '--json']);
    expect(plan.code, plan.stderr).toBe(0);
    const mine = json(plan).moves.filter((m: { unit: string }) => m.unit === t);
    expect(mine).toEqual([expect.objectContaining({ unit: t, from: 'shard-a', to: 'shard-b', reason: expect.stringMatching(/outside .* residency eu-west/) })]);

    const cleared = await cli(['tenant', 'residency', t, '--any', '--json']);
    expect(json(cleared)).toMatchObject({ unit: t, before: ['eu-west'], after: null, compliant: true });
    expect(await audits(t)).toEqual([
      { actor: 'residency-test', detail: { before: null, after: ['eu-west'] }, reason: 'GDPR' },
      { actor: 'residency-test', detail: { before: ['eu-west'], after: null }, reason: null },
    ]);
    expect(json(await cli(['tenant', 'residency', t, '--json'])).regions).toBeNull();
  });

  it('refuses bad input before any change: a bad region name, --regions with --any, an unknown tenant', async () => {
    const t = await fleet.tenant('shard-b', { prefix: 'res' });
    for (const args of [
      ['tenant', 'residency', t, '--regions', 'EU West'],
      ['tenant', 'residency', t, '--regions', 'eu-west,eu-west'],
      ['tenant', 'residency', t, '--regions', 'eu-west', '--any'],
      ['tenant', 'create', uniq('res'), '--regions', ''],
    ]) {
      const r = await cli([...args, '--json']);
      expect({ args, code: jsonError(r).code }).toEqual({ args, code: 'InvalidInput' });
    }
    const unknown = await cli(['tenant', 'residency', uniq('nobody'), '--regions', 'eu-west', '--json']);
    expect(jsonError(unknown).code).toBe('NotFound');
    expect(await audits(t)).toEqual([]);
    expect((await fleet.directory.query('select 1 from shardctl.unit_policy where unit = $1', [t])).rowCount).toBe(0);
  });
});
