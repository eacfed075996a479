// A slot's view of its keys: exact after acks and refusals, and a key with an unknown outcome is
// never written again.
import { describe, it, expect } from 'vitest';
import { SlotPlanner, PlannedWrite } from '../../lib/loadgen/plan';

const opts = { readFraction: 0, bodyBytes: 100, maxLiveKeys: 10 };

function writes(p: SlotPlanner, n: number, outcome: (w: PlannedWrite, i: number) => 'ack' | 'refused' | 'unknown') {
  const out: Array<PlannedWrite & { status: string }> = [];
  for (let i = 0; i < n; i++) {
    const w = p.next();
    if (w.kind !== 'write') throw new Error('expected a write');
    const status = outcome(w, i);
    p.settle(w, status);
    out.push({ ...w, status });
  }
  return out;
}

describe('SlotPlanner', () => {
  it('chooses the same op mix for the same seed', () => {
    const a = writes(new SlotPlanner(0, ['t1', 't2'], 42, opts), 200, () => 'ack').map((w) => `${w.tenant}/${w.table}/${w.op}`);
    const b = writes(new SlotPlanner(0, ['t1', 't2'], 42, opts), 200, () => 'ack').map((w) => `${w.tenant}/${w.table}/${w.op}`);
    expect(a).toEqual(b);
    expect(new Set(a.map((x) => x.split('/')[2]))).toEqual(new Set(['insert', 'update', 'delete', 'blob_put', 'blob_delete']));
  });

  it('only updates, deletes or puts blobs on keys whose insert was acked and not deleted', () => {
    const live = new Set<string>();
    const ws = writes(new SlotPlanner(1, ['t1'], 7, opts), 500, (_w, i) => (i % 5 === 0 ? 'refused' : 'ack'));
    for (const w of ws) {
      if (w.op === 'insert') {
        expect(live.has(w.key)).toBe(false);
        if (w.status === 'ack') live.add(w.key);
      } else {
        expect(live.has(w.key)).toBe(true);
        if (w.op === 'delete' && w.status === 'ack') live.delete(w.key);
      }
    }
  });

  it('never reuses a key after an unknown outcome or a refused insert', () => {
    const dead = new Set<string>();
    const ws = writes(new SlotPlanner(2, ['t1'], 9, opts), 500, (_w, i) => (i % 7 === 0 ? 'unknown' : i % 11 === 0 ? 'refused' : 'ack'));
    for (const w of ws) {
      expect(dead.has(w.key)).toBe(false);
      if (w.status === 'unknown' || (w.status === 'refused' && w.op === 'insert') || (w.status === 'ack' && w.op === 'delete')) dead.add(w.key);
    }
  });

  it('puts blobs under the tenant prefix and versions rows by one per update', () => {
    const ws = writes(new SlotPlanner(3, ['acme'], 5, opts), 300, () => 'ack');
    const blobs = ws.filter((w) => w.op === 'blob_put');
    expect(blobs.length).toBeGreaterThan(0);
    for (const b of blobs) expect(b.blob!.blobKey).toMatch(/^tenants\/acme\/docs\/[0-9a-f-]{36}$/);
    const versions = new Map<string, number>();
    for (const w of ws) {
      if (w.op === 'insert') versions.set(w.key, 1);
      if (w.op === 'update') {
        expect(w.version).toBe(versions.get(w.key)! + 1);
        versions.set(w.key, w.version!);
      }
    }
  });

  it("overwrites a document's object with a new key and deletes only the object the document names", () => {
    const named = new Map<string, string | null>();
    const ws = writes(new SlotPlanner(4, ['acme'], 11, opts), 1500, () => 'ack');
    let overwrites = 0;
    let deletes = 0;
    for (const w of ws) {
      if (w.table !== 'documents') continue;
      if (w.op === 'insert') named.set(w.key, null);
      if (w.op === 'blob_put') {
        expect(w.blob!.replaces ?? null).toBe(named.get(w.key));
        expect(w.blob!.blobKey).not.toBe(named.get(w.key));
        if (w.blob!.replaces) overwrites++;
        named.set(w.key, w.blob!.blobKey);
      }
      if (w.op === 'blob_delete') {
        expect(w.blobDelete!.blobKey).toBe(named.get(w.key));
        expect(w.after.blobKey).toBeNull();
        deletes++;
        named.set(w.key, null);
      }
    }
    expect(overwrites).toBeGreaterThan(0);
    expect(deletes).toBeGreaterThan(0);
  });

  it("through the index, overwrites a document's name with a new version of that same name, and puts a new name only on a document without one", () => {
    const named = new Map<string, string | null>();
    const ws = writes(new SlotPlanner(4, ['acme'], 11, { ...opts, overwriteInPlace: true }), 1500, () => 'ack');
    const counts = { put: 0, overwrite: 0 };
    for (const w of ws) {
      if (w.table !== 'documents') continue;
      if (w.op === 'insert') named.set(w.key, null);
      if (w.op === 'blob_put') {
        const held = named.get(w.key) ?? null;
        expect(w.blob!.replaces).toBeUndefined();
        if (held) expect([w.blob!.blobKey, w.blob!.overwrites]).toEqual([held, true]);
        else expect([named.has(w.key), w.blob!.overwrites, [...named.values()].includes(w.blob!.blobKey)]).toEqual([true, undefined, false]);
        counts[held ? 'overwrite' : 'put']++;
        named.set(w.key, w.blob!.blobKey);
      }
      if (w.op === 'blob_delete') named.set(w.key, null);
    }
    expect(counts.put).toBeGreaterThan(0);
    expect(counts.overwrite).toBeGreaterThan(0);
  });
});

describe('seedPlan', () => {
  it('splits rows 10/30/45/15 and makes room for every blob', async () => {
    const { seedPlan } = await import('../../lib/seed');
    expect(seedPlan(1000, 12)).toEqual({ accounts: 100, documents: 300, events: 450, jobs: 150 });
    expect(seedPlan(10, 50)).toEqual({ accounts: 1, documents: 50, events: 0, jobs: 2 });
    expect(() => seedPlan(-1, 0)).toThrow(/rows/);
  });
});
