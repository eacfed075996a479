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
});
