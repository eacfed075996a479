// doctor's judgement of bucket units (lib/doctor/findings.ts, judgeDatasets), pure: every bucket
// of a configured dataset placed, and each shard recording the dataset with the config's B.
import { describe, it, expect } from 'vitest';
import { judge, type Facts, type PlacementFact, type ShardFacts } from '../../lib/doctor/findings';
import { bucketUnitName } from '../../lib/buckets/units';

const B = 12;
const at = (n: number, shard: string): PlacementFact => ({ unit: bucketUnitName('ev', n, B), shard, epoch: 1, state: 'active', moveId: null });
const shard = (name: string, datasetBuckets?: Record<string, number>): ShardFacts => ({
  shard: name,
  host: 'h',
  reachable: true,
  slots: [],
  publications: [],
  schemaInstalled: true,
  fences: [],
  unfenced: [],
  foreignBlobs: [],
  datasetBuckets,
});
function facts(placements: PlacementFact[], shards: ShardFacts[], datasets = [{ name: 'ev', buckets: B }]): Facts {
  return {
    directory: { reachable: true, placements, moveTargets: {}, reservations: [] },
    temporal: { reachable: true, running: [] },
    shards,
    walThresholdBytes: 1e9,
    datasets,
  };
}
const found = (f: Facts) => judge(f, { fenceLockClass: 1 }).filter((x) => x.kind.startsWith('dataset-'));
const all = (shardOf: (n: number) => string) => Array.from({ length: B }, (_, n) => at(n, shardOf(n)));

describe('doctor: bucket units', () => {
  it('finds nothing when every bucket is placed and each shard records the config B', () => {
    expect(
      found(
        facts(
          all((n) => (n < 8 ? 'a' : 'b')),
          [shard('a', { ev: B }), shard('b', { ev: B }), shard('c', {})],
        ),
      ),
    ).toEqual([]);
  });

  it('names the buckets without a placement and the init that places them, on the shard holding most', () => {
    const placed = all((n) => (n < 7 ? 'a' : 'b')).filter((p) => ![2, 9, 10].includes(Number(p.unit.split(':')[2])));
    const [f, ...rest] = found(facts(placed, [shard('a', { ev: B }), shard('b', { ev: B })]));
    expect(rest).toEqual([]);
    expect(f).toMatchObject({ id: 'dataset-buckets-unplaced:ev', severity: 'critical', object: 'ev', autoFix: false });
    expect(f.message).toBe(
      'dataset ev: 3 of its 12 buckets have no placement in the directory (bucket:ev:02, bucket:ev:09, bucket:ev:10): keys that hash there cannot be routed (an init that stopped half-way?)',
    );
    expect(f.fix).toBe('shardctl dataset init ev --shard a  (places only the missing buckets; those placed stay where they are)');
  });

  it('says a configured dataset was never initialised (a warning)', () => {
    const [f] = found(facts([], [shard('a', { ev: B })]));
    expect(f).toMatchObject({ id: 'dataset-buckets-unplaced:ev', severity: 'warning' });
    expect(f.message).toMatch(/^dataset ev is configured \(12 buckets\) but none of its buckets is placed/);
    expect(f.fix).toMatch(/^shardctl dataset init ev --shard <shard>/);
  });

  it('reports a shard recording another B, and one holding buckets without recording the dataset', () => {
    const fs = found(
      facts(
        all((n) => (n < 6 ? 'a' : 'b')),
        [shard('a', { ev: 16 }), shard('b', {}), shard('c', {}), shard('d')],
      ),
    );
    expect(fs.map((f) => [f.id, f.fix])).toEqual([
      [
        'dataset-bucket-count:a:ev',
        "find the dataset's real B (the CHECK of its tables on a names it: shardctl.bucket_of(key, B)) and put the config's datasets[].buckets back to it: a dataset is never re-bucketed in place",
      ],
      ['dataset-bucket-count:b:ev', 'shardctl shards prepare --shard b'],
    ]);
    expect(fs[0].message).toBe(
      'a records dataset ev with 16 buckets, the config says 12: `shards prepare` and `dataset init` refuse a, and the router hashes keys into 12 buckets',
    );
  });

  it('judges nothing of datasets without the directory, and nothing when none is configured', () => {
    const f = facts([], [shard('a', { ev: 16 })]);
    expect(found({ ...f, directory: { ...f.directory, reachable: false } })).toEqual([]);
    expect(found({ ...f, datasets: [] })).toEqual([]);
  });
});
