import { describe, it, expect } from 'vitest';
import { PlacementCache, parsePlacementNotification, toSafeInt } from '../../lib/router/snapshot';

const p = (unit: string, shard: string, epoch: number, state: 'active' | 'moving' = 'active') => ({ unit, shard, epoch, state });

describe('PlacementCache', () => {
  it('serves what a full snapshot loaded', () => {
    const c = new PlacementCache();
    c.replaceAll([p('t1', 'shard-a', 1), p('t2', 'shard-b', 3)], 10);
    expect(c.get('t1')).toEqual(p('t1', 'shard-a', 1));
    expect(c.get('t3')).toBeUndefined();
    expect(c.generation).toBe(10);
    expect(c.size).toBe(2);
  });

  it('applies a newer observation and ignores an older one', () => {
    const c = new PlacementCache();
    c.replaceAll([p('t1', 'shard-a', 1)], 10);
    expect(c.observe({ unit: 't1', generation: 12, placement: p('t1', 'shard-b', 2) })).toBe(true);
    expect(c.observe({ unit: 't1', generation: 11, placement: p('t1', 'shard-a', 1, 'moving') })).toBe(false);
    expect(c.get('t1')).toEqual(p('t1', 'shard-b', 2));
  });

  it('applies an observation at the same generation (a direct re-read is as fresh)', () => {
    const c = new PlacementCache();
    c.replaceAll([p('t1', 'shard-a', 1)], 10);
    expect(c.observe({ unit: 't1', generation: 10, placement: p('t1', 'shard-b', 2) })).toBe(true);
    expect(c.get('t1')?.shard).toBe('shard-b');
  });

  it('keeps entries announced after the snapshot generation across a full reload', () => {
    const c = new PlacementCache();
    c.replaceAll([p('t1', 'shard-a', 1)], 10);
    c.observe({ unit: 't1', generation: 15, placement: p('t1', 'shard-b', 2) });
    c.observe({ unit: 'new', generation: 16, placement: p('new', 'shard-c', 1) });
    c.replaceAll([p('t1', 'shard-a', 1)], 14); // a load that started before the move
    expect(c.get('t1')?.shard).toBe('shard-b');
    expect(c.get('new')?.shard).toBe('shard-c');
    c.replaceAll([p('t1', 'shard-b', 2)], 20);
    expect(c.get('new')).toBeUndefined(); // gone from a later snapshot → gone
  });

  it('removes a unit the directory no longer has', () => {
    const c = new PlacementCache();
    c.replaceAll([p('t1', 'shard-a', 1)], 10);
    expect(c.observe({ unit: 't1', generation: 11, placement: undefined })).toBe(true);
    expect(c.get('t1')).toBeUndefined();
  });

  it('hands out copies, so callers cannot mutate the cache', () => {
    const c = new PlacementCache();
    c.replaceAll([p('t1', 'shard-a', 1)], 1);
    const got = c.get('t1')!;
    got.shard = 'evil';
    expect(c.get('t1')?.shard).toBe('shard-a');
  });
});

describe('parsePlacementNotification', () => {
  it('parses the documented payload, with numbers or numeric strings', () => {
    expect(parsePlacementNotification(JSON.stringify({ unit: 't', shard: 'shard-b', epoch: 2, state: 'active', generation: 7 }))).toEqual({
      unit: 't',
      generation: 7,
      placement: p('t', 'shard-b', 2),
    });
    expect(parsePlacementNotification(JSON.stringify({ unit: 't', shard: 'shard-b', epoch: '2', state: 'moving', generation: '7' }))?.placement?.epoch).toBe(2);
  });

  it('reads a payload without a shard as a removal', () => {
    expect(parsePlacementNotification(JSON.stringify({ unit: 't', shard: null, generation: 3 }))).toEqual({ unit: 't', generation: 3, placement: undefined });
  });

  it('rejects malformed payloads', () => {
    for (const bad of [
      undefined,
      '',
      'not json',
      'null',
      '[]',
      JSON.stringify({ shard: 'a', epoch: 1, state: 'active', generation: 1 }),
      JSON.stringify({ unit: 't', shard: 'a', epoch: 1, state: 'active' }),
      JSON.stringify({ unit: 't', shard: 'a', epoch: 1.5, state: 'active', generation: 1 }),
      JSON.stringify({ unit: 't', shard: 'a', epoch: 1, state: 'gone', generation: 1 }),
      JSON.stringify({ unit: 't', shard: 5, epoch: 1, state: 'active', generation: 1 }),
    ]) {
      expect(parsePlacementNotification(bad)).toBeUndefined();
    }
  });

  it('toSafeInt accepts integers and digit strings only', () => {
    expect(toSafeInt('42')).toBe(42);
    expect(toSafeInt(42)).toBe(42);
    for (const v of ['4.2', '', 'x', null, undefined, {}, 2 ** 60, '99999999999999999999']) expect(toSafeInt(v)).toBeUndefined();
  });
});
