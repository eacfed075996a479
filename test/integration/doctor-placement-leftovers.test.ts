// `shardctl doctor` on two leftovers of resharding (issue 13), on the real stack and a directory
// of the test's own (test/helpers/fleet.ts): a shard dedicated to a tenant the directory places
// elsewhere, with no isolate running; and rows of a bucket on a shard that does not own it, with
// no move of it running. Each is reported with its fix, and the fix, run as printed, clears it.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { closePools, shardPool, uniq } from '../helpers/stack';
import { runCli, configFile } from '../helpers/cli';
import { prepareAllShards } from '../../lib/shard/prepare';
import { initDataset } from '../../lib/datasets';
import { bucketOf } from '../../lib/buckets/hash';
import { bucketUnitName } from '../../lib/buckets/units';
import { createTenant } from '../../lib/tenants';
import { setShardDedication, getShard } from '../../lib/directory/shards';
import type { Config } from '../../lib/config';
import type { Finding } from '../../lib/doctor/findings';

const B = 4;
const schema = `dl_${randomBytes(4).toString('hex')}`;
const dataset = `dl_${randomBytes(4).toString('hex')}`;
let fleet: Fleet;
let config: Config;
let cfg: ReturnType<typeof configFile>;

async function findings(kind: string): Promise<Finding[]> {
  const r = await runCli(['--config', cfg.file, 'doctor', '--json'], { timeoutMs: 60_000 });
  expect(r.stdout, r.stderr).not.toBe('');
  return (JSON.parse(r.stdout).findings as Finding[]).filter((f) => f.kind === kind);
}

beforeAll(async () => {
  fleet = await ownFleet('docleft', { worker: false });
  config = {
    ...fleet.config,
    tenant: { ...fleet.config.tenant, schemas: [...fleet.config.tenant.schemas, schema] },
    datasets: [{ name: dataset, column: 'key', buckets: B, bucketColumn: 'bucket', tables: [`${schema}.events`] }],
  };
  for (const s of ['shard-a', 'shard-b', 'shard-c'])
    await shardPool(s).query(`create schema ${schema};
      create table ${schema}.events (bucket int not null, key text not null, v int, primary key (bucket, key), check (bucket = shardctl.bucket_of(key, ${B})))`);
  const res = await prepareAllShards(config, shardPool, {});
  expect(res.filter((r) => r.error)).toEqual([]);
  await initDataset({ directory: fleet.directory, shardPool, config }, { dataset, shard: 'shard-a', actor: 'test' });
  cfg = configFile(config);
}, 120_000);

afterAll(async () => {
  cfg?.remove();
  for (const s of ['shard-a', 'shard-b', 'shard-c']) {
    const p = shardPool(s);
    await p.query(`drop schema if exists ${schema} cascade`).catch(() => {});
    await p.query(`delete from shardctl.fence where unit like $1`, [`bucket:${dataset}:%`]).catch(() => {});
    await p.query(`delete from shardctl.settings where key = $1`, [`dataset.${dataset}.buckets`]).catch(() => {});
  }
  await fleet?.close();
  await closePools();
});

describe('doctor: leftovers of resharding', () => {
  it('reports rows of a bucket on a shard that does not own it, and none on its owner; the printed delete clears it', { timeout: 120_000 }, async () => {
    const key = 'stray-é';
    const n = bucketOf(key, B);
    const unit = bucketUnitName(dataset, n, B);
    // On the owner (shard-a) as the router would write it; a copy on shard-b past the fence (replica role), as a foreign tool would.
    for (const s of ['shard-a', 'shard-b']) {
      const c = await shardPool(s).connect();
      try {
        await c.query('begin; set local session_replication_role = replica');
        await c.query(`insert into ${schema}.events values ($1, $2, 1)`, [n, key]);
        await c.query('commit');
      } finally {
        c.release();
      }
    }
    const found = await findings('stray-bucket-rows');
    expect(found.map((f) => f.id)).toEqual([`stray-bucket-rows:shard-b:${unit}`]);
    expect(found[0].message).toContain(`shard-b holds rows of ${unit} (in "${schema}"."events"), which the directory places on shard-a`);
    const sql = /-c "(.*)"$/.exec(found[0].fix)![1];
    expect(sql).toBe(`begin; set local session_replication_role = replica; delete from "${schema}"."events" where "bucket" = ${n}; commit;`);
    await shardPool('shard-b').query(sql);
    expect(await findings('stray-bucket-rows')).toEqual([]);
    expect((await shardPool('shard-a').query(`select count(*)::int as n from ${schema}.events`)).rows[0].n, "the owner's row stays").toBe(1);
  });

  it('reports a shard dedicated to a tenant placed elsewhere with no isolate running; the printed undedicate clears it', { timeout: 120_000 }, async () => {
    const tenant = uniq('ded');
    await createTenant({ directory: fleet.directory, shardPool, config }, { tenant, shard: 'shard-a', actor: 'test' });
    expect(await findings('dedication-elsewhere')).toEqual([]);
    await setShardDedication(fleet.directory, 'shard-c', tenant, { actor: 'test', reason: 'an isolate that ended half-way' });
    const found = await findings('dedication-elsewhere');
    expect(found.map((f) => [f.id, f.severity, f.unit])).toEqual([['dedication-elsewhere:shard-c', 'warning', tenant]]);
    expect(found[0].message).toContain(`shard-c is dedicated to tenant ${tenant}, but the directory places ${tenant} on shard-a`);
    expect(found[0].fix).toContain(`shardctl tenant isolate --tenant ${tenant} --to shard-c`);
    const undo = /or (shardctl shards undedicate shard-c --reason "[^"]*")/.exec(found[0].fix)![1];
    const args = undo.split(' ').slice(1, 4);
    const run = await runCli(['--config', cfg.file, ...args, '--reason', 'doctor said so', '--actor', 'doctor-test']);
    expect(run.code, run.stderr).toBe(0);
    expect((await getShard(fleet.directory, 'shard-c'))!.dedicatedTo).toBeNull();
    expect(await findings('dedication-elsewhere')).toEqual([]);
  });
});
