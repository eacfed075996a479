// Two shards configured onto one bucket (issue 15): each one's undo or retire deleted every blob
// of the tenant from its owner. The config refuses what its spelling shows (127.0.0.1 and
// localhost are one host), at start-up and at plan; what spelling cannot show (here the machine's
// host name, an alias of the loopback the S3 server listens on) the bucket identity markers refuse:
// `shards prepare`, plan, the copy, cancel's clean-up and retire. Real stack: moto and Postgres.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import dns from 'node:dns/promises';
import os from 'node:os';
import { testConfig, closePools, shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { configFile, runCli } from '../helpers/cli';
import { createActivities } from '../../activities';
import { createDeps, Deps } from '../../activities/deps';
import { Config, parseConfig } from '../../lib/config';
import { prepareAllShards } from '../../lib/shard/prepare';
import * as B from '../helpers/blobs';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
const opened: Deps[] = [];
const refs: { act: ReturnType<typeof createActivities>; ref: { moveId: string; unit: string; source: string; target: string } }[] = [];

/** The stack's config with the target's bucket set to the source's, under `endpoint` (not validated). */
function sharingConfig(endpoint: string): Config {
  const c = structuredClone(testConfig());
  const t = c.shards.find((s) => s.name === TARGET)!;
  t.bucket = c.shards.find((s) => s.name === SOURCE)!.bucket;
  t.s3Endpoint = endpoint;
  return c;
}

function activitiesFor(config: Config) {
  const deps = createDeps(config);
  opened.push(deps);
  return createActivities(deps);
}

/** A host name other than the loopback spellings the config normalizes, that still reaches the S3 server. */
async function aliasEndpoint(): Promise<string> {
  const endpoint = new URL(testConfig().s3.endpoint!);
  const host = os.hostname().toLowerCase();
  const addrs = await dns.lookup(host, { all: true }).catch(() => []);
  expect(addrs.length > 0 && addrs.every((a) => a.address === endpoint.hostname), `${host} must resolve to ${endpoint.hostname} only`).toBe(true);
  expect(host).not.toMatch(/^(localhost|127\.)/);
  endpoint.hostname = host;
  return endpoint.toString().replace(/\/$/, '');
}

let localhostSpelling: Config;
let aliased: Config;

beforeAll(async () => {
  await H.prepareStack();
  localhostSpelling = sharingConfig(testConfig().s3.endpoint!.replace('127.0.0.1', 'localhost'));
  aliased = sharingConfig(await aliasEndpoint());
});
afterAll(async () => {
  for (const { act, ref } of refs) {
    for (const direction of ['forward', 'reverse'] as const) await act.dropReplication({ ...ref, direction }).catch(() => {});
  }
  await Promise.all(opened.map((d) => d.close()));
  await closePools();
});

describe('two shards on one bucket are refused', () => {
  it('at start-up and at plan when the config spells the bucket twice (same endpoint, or 127.0.0.1 and localhost)', async () => {
    const same = sharingConfig(testConfig().s3.endpoint!);
    for (const c of [same, localhostSpelling]) {
      expect(() => parseConfig(structuredClone(c), 'x.json')).toThrowError(/shards shard-a and shard-b share one bucket/);
      const f = configFile(c);
      try {
        const r = await runCli(['shards', 'list'], { env: { SHARDCTL_CONFIG: f.file } });
        expect(r.code).not.toBe(0);
        expect(r.stderr).toMatch(/shards shard-a and shard-b share one bucket/);
      } finally {
        f.remove();
      }
      // A config built in code, past validation: plan refuses it the same way.
      const tenant = await H.newTenant(SOURCE, 'sb-plan');
      const plan = await activitiesFor(c).planMove({ unit: tenant, target: TARGET });
      expect(plan.ok).toBe(false);
      expect(plan.reasons.join('\n')).toMatch(/shards shard-a and shard-b share one bucket/);
    }
  });

  it('by the identity markers when no spelling shows it: prepare, plan, the copy, cancel and retire refuse, and the owner keeps every blob', async () => {
    expect(() => parseConfig(structuredClone(aliased))).not.toThrow(); // the config cannot tell
    const prep = await prepareAllShards(aliased, shardPool, { shard: TARGET });
    expect(prep[0].error).toMatch(/bucket shardctl-shard-a of shard shard-b already belongs to shard shard-a/);

    const tenant = await H.newTenant(SOURCE, 'sb-alias');
    await H.seed(tenant, 60, 12);
    expect(await H.blobCount(SOURCE, tenant)).toBe(12);
    const act = activitiesFor(aliased);
    const plan = await act.planMove({ unit: tenant, target: TARGET });
    expect(plan.ok).toBe(false);
    expect(plan.reasons.join('\n')).toMatch(/refusing to move .*: bucket shardctl-shard-a of shard shard-b already belongs to shard shard-a/);

    // Past a plan (an older workflow, a hand-run activity): the move's own steps refuse.
    const ref = { moveId: plan.moveId, unit: tenant, source: SOURCE, target: TARGET };
    refs.push({ act, ref });
    await act.setupReplication({ ...ref, direction: 'forward' });
    const tables = await activitiesFor(testConfig()).planMove({ unit: tenant, target: TARGET });
    for (const t of tables.tables) await act.copyTable({ ...ref, table: t.table, batchRows: 5000, rowsPerSecond: 0 });
    await expect(act.copyBlobs({ ...ref, direction: 'forward' })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(/refusing to copy .* into shard-b: bucket shardctl-shard-a of shard shard-b already belongs to shard shard-a/),
    });
    await expect(act.cancelMove({ ...ref, epoch: 1, actor: 'shared-bucket-test' })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(/refusing to delete the copy of .* on shard-b: bucket shardctl-shard-a of shard shard-b already belongs to shard shard-a/),
    });
    expect(await H.blobCount(SOURCE, tenant)).toBe(12);

    // The switch done (by hand, as a completed cutover leaves it): retiring the source would
    // delete from the bucket the new owner uses.
    await B.switchByHand(tenant, SOURCE, TARGET, 'shared-bucket-test');
    const rowsBefore = await H.rowCount(SOURCE, tenant);
    await expect(act.retireSource({ ...ref, epoch: 2, actor: 'shared-bucket-test' })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(
        /refusing to delete the copy of .* on shard-a: the owner shard-b's bucket shardctl-shard-a carries the marker of shard shard-a/,
      ),
    });
    expect(await H.blobCount(SOURCE, tenant)).toBe(12);
    expect(await H.rowCount(SOURCE, tenant)).toBe(rowsBefore);
  });
});
