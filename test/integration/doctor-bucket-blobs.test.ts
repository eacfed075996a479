// doctor's foreign-objects check sees bucket units' prefixes (datasets/<dataset>/<n>/) as it sees
// tenants': an object put straight into a non-owner's bucket under a bucket unit's prefix, with no
// ledger row there, is found and named by its unit; one under a prefix of no unit's shape is not a
// unit's. Real S3 (the stack's moto) and shard-b's ledger.
import { describe, it, expect, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { testConfig, closePools, shardPool } from '../helpers/stack';
import { s3ClientFor } from '../../lib/s3';
import { shardByName } from '../../lib/config';
import { foreignBlobFacts, unitsInBucket } from '../../lib/doctor/blob-facts';
import { deleteKeys } from '../../lib/blobs/delete';

const config = testConfig();
const s3 = s3ClientFor(config, 'shard-b');
const bucket = shardByName(config, 'shard-b').bucket;
const dataset = `db_${randomBytes(4).toString('hex')}`;
const keys = [`datasets/${dataset}/07/stray`, `datasets/${dataset}/07x/odd`, `datasets/${dataset}/notes.txt`];

afterAll(async () => {
  await deleteKeys({ shard: 'shard-b', s3, bucket }, keys).catch(() => {});
  s3.destroy();
  await closePools();
});

describe("doctor and bucket units' objects", () => {
  it("finds an object put straight under a bucket unit's prefix in a non-owner's bucket, named by its unit", async () => {
    for (const Key of keys) await s3.send(new PutObjectCommand({ Bucket: bucket, Key, Body: 'x' }));
    const unit = `bucket:${dataset}:07`;
    const units = await unitsInBucket(s3, bucket);
    expect(units).toContain(unit);
    expect(units.filter((u) => u.includes(dataset))).toEqual([unit]);
    const facts = await foreignBlobFacts(s3, bucket, shardPool('shard-b'), 'shard-b', new Map([[unit, 'shard-a']]));
    expect(facts.filter((f) => f.unit === unit)).toEqual([
      expect.objectContaining({ shard: 'shard-b', unit, owner: 'shard-a', tracked: false, total: 1, objects: [expect.objectContaining({ key: keys[0] })] }),
    ]);
  });
});
