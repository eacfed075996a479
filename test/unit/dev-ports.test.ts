import { describe, it, expect } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stackAt, stackConfig, StackError } from '../../lib/dev/stack';

// A checkout without .dev/stack.json: the ports come from the environment and the defaults only.
const NOWHERE = '/nonexistent/shardctl-checkout';

describe('dev stack ports', () => {
  it("pins Temporal's HTTP API and metrics ports next to its gRPC port instead of random ones", () => {
    const s = stackAt(NOWHERE, { SHARDCTL_DEV_TEMPORAL_PORT: '27233' });
    expect([s.ports.temporal, s.ports.temporalHttp, s.ports.temporalMetrics]).toEqual([27233, 27234, 27235]);
    expect(stackAt(NOWHERE, {}).ports.temporalHttp).toBe(17234);
  });

  it('takes explicit HTTP and metrics ports', () => {
    const s = stackAt(NOWHERE, { SHARDCTL_DEV_TEMPORAL_HTTP_PORT: '40001', SHARDCTL_DEV_TEMPORAL_METRICS_PORT: '40002' });
    expect([s.ports.temporalHttp, s.ports.temporalMetrics]).toEqual([40001, 40002]);
  });

  it('refuses two parts on one port, naming both', () => {
    expect(() => stackAt(NOWHERE, { SHARDCTL_DEV_UI_PORT: '17234' })).toThrow(StackError);
    expect(() => stackAt(NOWHERE, { SHARDCTL_DEV_UI_PORT: '17234' })).toThrow(/temporalUi and temporalHttp are both 17234/);
    expect(() => stackAt(NOWHERE, { SHARDCTL_DEV_PG_PORT: '17232' })).toThrow(/both 17233/);
  });
});

describe('dev stack shards (`dev up --shards N`)', () => {
  it('derives each extra shard from the first three: names shard-d.., ports the directory + index, buckets shardctl-<shard>', () => {
    const s = stackAt(NOWHERE, { SHARDCTL_DEV_PG_PORT: '40000' }, { shards: 5 });
    expect(s.shards).toEqual(['shard-a', 'shard-b', 'shard-c', 'shard-d', 'shard-e']);
    expect(s.servers.map((n) => s.ports.pg[n])).toEqual([40000, 40001, 40002, 40003, 40004, 40005]);
    expect(stackConfig(s).shards.map((x) => [x.name, new URL(x.dsn).port, x.bucket])).toEqual([
      ['shard-a', '40001', 'shardctl-shard-a'],
      ['shard-b', '40002', 'shardctl-shard-b'],
      ['shard-c', '40003', 'shardctl-shard-c'],
      ['shard-d', '40004', 'shardctl-shard-d'],
      ['shard-e', '40005', 'shardctl-shard-e'],
    ]);
    // Without the option: three, on the default ports.
    const d = stackAt(NOWHERE, {});
    expect(d.shards).toEqual(['shard-a', 'shard-b', 'shard-c']);
    expect(d.servers.map((n) => d.ports.pg[n])).toEqual([15432, 15433, 15434, 15435]);
    expect(stackAt(NOWHERE, {}, { shards: 5 }).ports.pg['shard-e']).toBe(15437);
  });

  it('keeps the count the stack recorded, refuses fewer than it has, and refuses 0 or more than 26', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-devshards-'));
    try {
      fs.mkdirSync(path.join(root, '.dev'));
      const five = stackAt(root, { SHARDCTL_DEV_PG_PORT: '40000' }, { shards: 5 });
      fs.writeFileSync(path.join(root, '.dev', 'stack.json'), JSON.stringify(five.ports));
      expect(stackAt(root, {}).shards).toHaveLength(5);
      expect(stackAt(root, {}).ports.pg['shard-e']).toBe(40005);
      expect(stackAt(root, {}, { shards: 6 }).ports.pg['shard-f']).toBe(40006);
      expect(() => stackAt(root, {}, { shards: 4 })).toThrow(/this stack has 5 shards; --shards 4 would leave the others' data behind/);
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
    expect(() => stackAt(NOWHERE, {}, { shards: 0 })).toThrow(StackError);
    expect(() => stackAt(NOWHERE, {}, { shards: 27 })).toThrow(/1\.\.26 shards, got 27/);
  });
});
