import { describe, it, expect } from 'vitest';
import { bucketIdentity, sharedBucketProblems } from '../../lib/blobs/bucket-identity';
import { parseConfig } from '../../lib/config';
import { stackConfig, stackAt } from '../../lib/dev/stack';

const good = () => JSON.parse(JSON.stringify(stackConfig(stackAt('/nonexistent', {}))));

describe('bucketIdentity', () => {
  it('names one bucket the same under every loopback spelling, case and default port', () => {
    const same = [
      'http://127.0.0.1:9000',
      'http://localhost:9000',
      'http://LOCALHOST:9000/',
      'http://[::1]:9000',
      'http://127.0.1.1:9000',
      'http://s3.localhost:9000',
      'http://0.0.0.0:9000',
    ].map((e) => bucketIdentity(e, 'Data'));
    expect(new Set(same).size).toBe(1);
    expect(bucketIdentity('http://minio.internal', 'b')).toBe(bucketIdentity('http://MINIO.internal:80', 'b'));
    expect(bucketIdentity('https://minio.internal', 'b')).toBe(bucketIdentity('https://minio.internal:443/', 'b'));
    expect(bucketIdentity(undefined, 'b')).toBe(bucketIdentity('https://s3.eu-west-1.amazonaws.com', 'b'));
  });

  it('tells different buckets, hosts, ports and base paths apart', () => {
    const all = [
      bucketIdentity('http://127.0.0.1:9000', 'a'),
      bucketIdentity('http://127.0.0.1:9000', 'b'),
      bucketIdentity('http://127.0.0.1:9001', 'a'),
      bucketIdentity('http://minio.internal:9000', 'a'),
      bucketIdentity('http://127.0.0.1:9000/tenant-x', 'a'),
      bucketIdentity(undefined, 'a2'),
    ];
    expect(new Set(all).size).toBe(all.length);
  });

  it('names each pair of shards on one bucket', () => {
    const problems = sharedBucketProblems(
      [
        { name: 'a', bucket: 'x' },
        { name: 'b', bucket: 'y' },
        { name: 'c', bucket: 'x', s3Endpoint: 'http://localhost:9000' },
      ],
      'http://127.0.0.1:9000',
    );
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/^shards a and c share one bucket/);
  });
});

describe('configuration refuses two shards on one bucket', () => {
  it('refuses the same endpoint and bucket', () => {
    const raw = good();
    raw.shards[1].bucket = raw.shards[0].bucket;
    expect(() => parseConfig(raw, 'x.json')).toThrowError(/shards: shards shard-a and shard-b share one bucket/);
  });

  it('refuses the same bucket spelled 127.0.0.1 and localhost', () => {
    const raw = good();
    raw.shards[2].bucket = raw.shards[0].bucket;
    raw.shards[2].s3Endpoint = raw.s3.endpoint.replace('127.0.0.1', 'localhost');
    expect(() => parseConfig(raw, 'x.json')).toThrowError(/shards shard-a and shard-c share one bucket/);
  });

  it('accepts the same bucket name on two different endpoints', () => {
    const raw = good();
    raw.shards[1].bucket = raw.shards[0].bucket;
    raw.shards[1].s3Endpoint = 'http://other-s3.internal:9000';
    expect(parseConfig(raw).shards[1].bucket).toBe(raw.shards[0].bucket);
  });
});
