// `shardctl doctor` on bucket units (issue 13), on the real stack and a directory of the test's
// own (test/helpers/fleet.ts): a configured dataset never initialised, an init that stopped
// half-way (fences placed, directory rows missing, as a crash between the two leaves it) and a
// config whose B is not the one a shard records are each reported with their fix; the fix
// printed for the half-way init, run as printed, places exactly the missing buckets.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { closePools, shardPool } from '../helpers/stack';
import { runCli, configFile } from '../helpers/cli';
import { prepareShard } from '../../lib/shard/prepare';
import { initDataset } from '../../lib/datasets';
import { bucketUnitName } from '../../lib/buckets/units';
import { getPlacement } from '../../lib/directory/placements';
import type { Config } from '../../lib/config';
import type { Finding } from '../../lib/doctor/findings';

const SHARD = 'shard-a';
const B = 8;
const schema = `dk_${randomBytes(4).toString('hex')}`;
const dataset = `dk_${randomBytes(4).toString('hex')}`;
let fleet: Fleet;
let config: Config;
let cfg: ReturnType<typeof configFile>;

const withB = (buckets: number): Config => ({
  ...fleet.config,
  tenant: { ...fleet.config.tenant, schemas: [...fleet.config.tenant.schemas, schema] },
  datasets: [{ name: dataset, column: 'key', buckets, bucketColumn: 'bucket', tables: [`${schema}.events`] }],
});

async function datasetFindings(file: string): Promise<Finding[]> {
  const r = await runCli(['--config', file, 'doctor', '--json'], { timeoutMs: 60_000 });
  expect(r.stdout, r.stderr).not.toBe('');
  return (JSON.parse(r.stdout).findings as Finding[]).filter((f) => f.kind.startsWith('dataset-'));
}

beforeAll(async () => {
  fleet = await ownFleet('docbk', { worker: false });
  config = withB(B);
  await shardPool(SHARD).query(`create schema ${schema};
    create table ${schema}.events (bucket int not null, key text not null, v int, primary key (bucket, key), check (bucket = shardctl.bucket_of(key, ${B})))`);
  await prepareShard(shardPool(SHARD), config);
  cfg = configFile(config);
}, 60_000);

afterAll(async () => {
  cfg?.remove();
  const p = shardPool(SHARD);
  await p.query(`drop schema if exists ${schema} cascade; drop table if exists shardctl.blob_index_${dataset}`).catch(() => {});
  await p.query(`delete from shardctl.fence where unit like $1`, [`bucket:${dataset}:%`]).catch(() => {});
  await p.query(`delete from shardctl.settings where key = $1`, [`dataset.${dataset}.buckets`]).catch(() => {});
  await fleet?.close();
  await closePools();
});

describe('doctor: bucket units', () => {
  it(
    'reports a dataset never initialised, then an init that stopped half-way, whose printed fix places exactly the missing buckets',
    { timeout: 120_000 },
    async () => {
      const never = await datasetFindings(cfg.file);
      expect(never.map((f) => [f.id, f.severity])).toEqual([[`dataset-buckets-unplaced:${dataset}`, 'warning']]);
      expect(never[0].message).toContain(`dataset ${dataset} is configured (${B} buckets) but none of its buckets is placed`);

      await initDataset({ directory: fleet.directory, shardPool, config }, { dataset, shard: SHARD, actor: 'test' });
      expect(await datasetFindings(cfg.file)).toEqual([]);

      // A crash between a bucket's fence and its directory row: the fence is there, the row is not.
      const lost = [1, 5, 6].map((n) => bucketUnitName(dataset, n, B));
      await fleet.directory.query('delete from shardctl.units where unit = any($1)', [lost]);
      const half = await datasetFindings(cfg.file);
      expect(half.map((f) => [f.id, f.severity])).toEqual([[`dataset-buckets-unplaced:${dataset}`, 'critical']]);
      expect(half[0].message).toContain(`${lost.length} of its ${B} buckets have no placement in the directory (${lost.join(', ')})`);
      const fix = half[0].fix.split('  (')[0];
      expect(fix).toBe(`shardctl dataset init ${dataset} --shard ${SHARD}`);

      const run = await runCli(['--config', cfg.file, ...fix.split(' ').slice(1), '--actor', 'doctor-test']);
      expect(run.code, run.stderr).toBe(0);
      expect(await datasetFindings(cfg.file)).toEqual([]);
      for (const u of lost) expect(await getPlacement(fleet.directory, u), u).toMatchObject({ shard: SHARD, epoch: 1, state: 'active' });
    },
  );

  it('reports a shard that records the dataset with another B than the config', { timeout: 60_000 }, async () => {
    const other = configFile(withB(16));
    try {
      const fs = await datasetFindings(other.file);
      const count = fs.find((f) => f.id === `dataset-bucket-count:${SHARD}:${dataset}`);
      expect(count, JSON.stringify(fs.map((f) => f.id))).toBeDefined();
      expect(count!.message).toBe(
        `${SHARD} records dataset ${dataset} with ${B} buckets, the config says 16: \`shards prepare\` and \`dataset init\` refuse ${SHARD}, and the router hashes keys into 16 buckets`,
      );
      // The shards that neither record the dataset nor hold its buckets are not named.
      expect(fs.filter((f) => f.kind === 'dataset-bucket-count').map((f) => f.shard)).toEqual([SHARD]);
    } finally {
      other.remove();
    }
  });
});
