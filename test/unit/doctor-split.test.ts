// doctor's judgement of a tenant split stopped between the directory and the shard (lib/doctor/findings.ts), pure.
import { describe, it, expect } from 'vitest';
import { incompleteSplits, type ShardFacts } from '../../lib/doctor/findings';

const shard = (fences: ShardFacts['fences']): ShardFacts => ({
  shard: 'shard-a',
  host: 'h',
  reachable: true,
  slots: [],
  publications: [],
  schemaInstalled: true,
  fences,
  unfenced: [],
  foreignBlobs: [],
});
const subUnits = (t: string, k: number) => Array.from({ length: k }, (_, i) => ({ unit: `${t}:${i}` }));

describe('doctor: incomplete tenant splits', () => {
  it('reports a tenant whose shard still owns it after the directory split it, with the re-run that finishes it', () => {
    const f = incompleteSplits(subUnits('acme', 4), [shard([{ unit: 'acme', epoch: 3, owned: true, frozen: false }])]);
    expect(f).toEqual([
      expect.objectContaining({
        id: 'split-incomplete:shard-a:acme',
        kind: 'split-incomplete',
        severity: 'warning',
        unit: 'acme',
        fix: 'shardctl tenant split acme --ways 4',
        autoFix: false,
      }),
    ]);
    expect(f[0].message).toContain('acme:0 .. acme:3');
  });

  it('reports nothing once the tenant is disowned, for an unsplit tenant, or for a sub-unit fence', () => {
    expect(incompleteSplits(subUnits('acme', 4), [shard([{ unit: 'acme', epoch: 4, owned: false, frozen: false }])])).toEqual([]);
    expect(incompleteSplits([{ unit: 'acme' }], [shard([{ unit: 'acme', epoch: 1, owned: true, frozen: false }])])).toEqual([]);
    expect(incompleteSplits(subUnits('acme', 2), [shard([{ unit: 'acme:0', epoch: 4, owned: true, frozen: false }])])).toEqual([]);
  });
});
