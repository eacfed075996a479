import { describe, it, expect } from 'vitest';
import { parseConfig, applyEnvOverrides } from '../../lib/config';
import { stackConfig, stackAt } from '../../lib/dev/stack';

const good = () => JSON.parse(JSON.stringify(stackConfig(stackAt('/nonexistent', {}))));

describe('configuration', () => {
  it('accepts the dev stack config and fills defaults', () => {
    const raw = good();
    delete raw.limits;
    const c = parseConfig(raw);
    expect(c.limits.soakSeconds).toBe(72 * 3600);
    expect(c.limits.lagThresholdMs).toBe(1000);
    expect(c.limits.fenceBudgetMs).toBe(2000);
  });

  it('names the path of a bad field and what was expected', () => {
    const raw = good();
    raw.shards[1].name = 'Shard B!';
    raw.limits.lagThresholdMs = -5;
    expect(() => parseConfig(raw, 'x.json')).toThrowError(/shards\.1\.name: shard names are lower-case[\s\S]*limits\.lagThresholdMs/);
  });

  it('refuses duplicate shard names', () => {
    const raw = good();
    raw.shards[1].name = raw.shards[0].name;
    expect(() => parseConfig(raw)).toThrowError(/duplicate shard name shard-a/);
  });

  it('lets environment variables override the file', () => {
    const c = parseConfig(applyEnvOverrides(good(), { SHARDCTL_TEMPORAL_ADDRESS: 'temporal.prod:7233', SHARDCTL_SOAK_SECONDS: '30' }));
    expect(c.temporal.address).toBe('temporal.prod:7233');
    expect(c.limits.soakSeconds).toBe(30);
  });

  it('rejects a non-numeric override with the field path', () => {
    expect(() => parseConfig(applyEnvOverrides(good(), { SHARDCTL_SOAK_SECONDS: 'soon' }))).toThrowError(/limits\.soakSeconds/);
  });
  it('accepts bucketed datasets and defaults to none', () => {
    expect(parseConfig(good()).datasets).toEqual([]);
    const raw = good();
    raw.datasets = [{ name: 'events', column: 'device_id', buckets: 1024 }];
    expect(parseConfig(raw).datasets).toEqual([{ name: 'events', column: 'device_id', buckets: 1024 }]);
  });

  it('names a bad bucket count or dataset name with its path and the rule', () => {
    const raw = good();
    raw.datasets = [
      { name: 'events', column: 'device_id', buckets: 0 },
      { name: 'orders', column: 'order_id', buckets: 1.5 },
      { name: 'Big-Set', column: 'k', buckets: 70000 },
      { name: 'nob', column: 'k' },
    ];
    expect(() => parseConfig(raw, 'x.json')).toThrowError(
      /datasets\.0\.buckets: the bucket count B is at least 1[\s\S]*datasets\.1\.buckets: the bucket count B is an integer[\s\S]*datasets\.2\.name: dataset names[\s\S]*datasets\.2\.buckets: the bucket count B is at most 65536[\s\S]*datasets\.3\.buckets: Required/,
    );
  });

  it('refuses a duplicate dataset, and a dataset routed by the tenant column', () => {
    const raw = good();
    raw.datasets = [
      { name: 'events', column: 'device_id', buckets: 64 },
      { name: 'events', column: 'device_id', buckets: 64 },
    ];
    expect(() => parseConfig(raw)).toThrowError(/datasets\.1: duplicate dataset name events/);
    raw.datasets = [{ name: 'events', column: 'tenant_id', buckets: 64 }];
    expect(() => parseConfig(raw)).toThrowError(/datasets\.0: column tenant_id is the tenant column/);
  });
});
