import { describe, it, expect } from 'vitest';
import { stackAt, StackError } from '../../lib/dev/stack';

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
