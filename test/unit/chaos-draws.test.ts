import { describe, it, expect } from 'vitest';
import {
  CHAOS_PATHS,
  drawNetChaos,
  isWorkerLink,
  NET_LINKS,
  netDrawLabel,
  ownerAfter,
  PHASES_BY_PATH,
  POINTS_BY_PATH,
  SHARD_PAIRS,
  TOXICS,
} from '../helpers/chaos-draws';

describe('the network chaos draws', () => {
  it('replay: the same seed draws the same iterations, and iteration i does not depend on how many are drawn', () => {
    expect(drawNetChaos(4242, 8)).toEqual(drawNetChaos(4242, 8));
    expect(drawNetChaos(4242, 3)).toEqual(drawNetChaos(4242, 8).slice(0, 3));
    expect(drawNetChaos(4242, 8).map(netDrawLabel)).not.toEqual(drawNetChaos(4243, 8).map(netDrawLabel));
  });

  it('draws only what the harness can run: a fault point on a worker link and on its path, a phase the path reaches, bounded numbers', () => {
    for (const d of drawNetChaos(7, 2000)) {
      expect(SHARD_PAIRS).toContainEqual([d.source, d.target]);
      if (d.trigger.kind === 'point') {
        expect(isWorkerLink(d.link), netDrawLabel(d, 0)).toBe(true);
        expect(POINTS_BY_PATH[d.path]).toContain(d.trigger.point);
      }
      if (d.trigger.kind === 'phase') expect(PHASES_BY_PATH[d.path]).toContain(d.trigger.phase);
      if (d.trigger.kind === 'delay') expect(d.trigger.ms).toBeGreaterThanOrEqual(500);
      expect(d.durationMs).toBeGreaterThanOrEqual(3000);
      expect(d.durationMs).toBeLessThanOrEqual(20_000);
      expect(d.params.toxicity).toBeGreaterThan(0);
      expect(d.params.toxicity).toBeLessThanOrEqual(1);
      expect(d.params.jitterMs).toBeLessThanOrEqual(d.params.latencyMs);
      expect(d.rowsPerSecond === 0 || (d.rowsPerSecond >= 40 && d.rowsPerSecond <= 160), `rows/s ${d.rowsPerSecond}`).toBe(true);
    }
  });

  it('every link, toxic, path, trigger kind and fault point comes up within 500 iterations', () => {
    const ds = drawNetChaos(1, 500);
    expect(new Set(ds.map((d) => d.link))).toEqual(new Set(NET_LINKS));
    expect(new Set(ds.map((d) => d.toxic))).toEqual(new Set(TOXICS));
    expect(new Set(ds.map((d) => d.path))).toEqual(new Set(CHAOS_PATHS));
    expect(new Set(ds.map((d) => d.trigger.kind))).toEqual(new Set(['point', 'phase', 'delay']));
    expect(ds.some((d) => d.rowsPerSecond === 0) && ds.some((d) => d.rowsPerSecond > 0)).toBe(true);
    const points = new Set(ds.flatMap((d) => (d.trigger.kind === 'point' ? [d.trigger.point] : [])));
    expect(points).toEqual(new Set(Object.values(POINTS_BY_PATH).flat()));
  });

  it('names the owner and epoch each path ends with', () => {
    expect(ownerAfter('complete', 's', 't')).toEqual({ owner: 't', epoch: 2 });
    expect(ownerAfter('cancel', 's', 't')).toEqual({ owner: 's', epoch: 1 });
    expect(ownerAfter('rollback', 's', 't')).toEqual({ owner: 's', epoch: 3 });
  });
});
