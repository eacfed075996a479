// The wait for a quiet moment before a cutover's freeze (lib/shard/unit-writers.ts), over a
// scripted pg_locks on a fake clock: which holders count as long, when it returns, and its bound.
// The same wait against real servers: test/integration/long-writes.test.ts.
import { describe, it, expect } from 'vitest';
import { awaitQuietWriters, describeLongWriter } from '../../lib/shard/unit-writers';

type Row = { pid: number | null; vxid: string; state: string | null; xact_ms: number | null };

/** A fake pool answering each look with the next scripted set of lock holders (the last repeats). */
function script(looks: Row[][]) {
  let n = 0;
  let clock = 0;
  const sleeps: number[] = [];
  const db = {
    query: async () => ({ rows: looks[Math.min(n++, looks.length - 1)].map((r) => ({ ...r, pid: r.pid ?? 0 })) }),
  } as any;
  return {
    db,
    sleeps,
    looks: () => n,
    opts: {
      now: () => clock,
      sleep: async (ms: number) => {
        sleeps.push(ms);
        clock += ms;
      },
    },
  };
}

const w = (pid: number | null, vxid: string, xact_ms: number | null, state: string | null = xact_ms === null ? null : 'active'): Row => ({
  pid,
  vxid,
  state,
  xact_ms,
});

describe('awaitQuietWriters', () => {
  it('returns at once when nobody holds the lock, or only young writers whose ages it can see', async () => {
    for (const rows of [[], [w(1, '3/1', 5), w(2, '4/1', 12)]]) {
      const s = script([rows]);
      const q = await awaitQuietWriters(s.db, 'acme', { longMs: 50, maxWaitMs: 10_000, ...s.opts });
      expect(q).toEqual({ waitedMs: 0, gaveUp: false });
      expect(s.looks()).toBe(1);
    }
  });

  it('waits for a writer whose age it sees past longMs, until it is gone, and names it', async () => {
    const s = script([[w(7, '3/9', 400), w(8, '4/2', 3)], [w(7, '3/9', 425)], [w(7, '3/9', 475)], [w(9, '5/1', 1)]]);
    const waits: number[] = [];
    const q = await awaitQuietWriters(s.db, 'acme', { longMs: 50, maxWaitMs: 10_000, onWait: (ws) => waits.push(ws[0].pid), ...s.opts });
    expect(q.gaveUp).toBe(false);
    expect(q.longest).toMatchObject({ pid: 7, heldMs: 475, state: 'active' });
    expect(waits).toEqual([7, 7, 7]);
    expect(q.waitedMs).toBe(s.sleeps.reduce((a, b) => a + b, 0));
  });

  it('without the ages (no pg_read_all_stats), watches each holder: one still there longMs after it was first seen is long', async () => {
    // The same transaction (pid and vxid) for four looks; a new transaction of the same session is not it.
    const s = script([[w(7, '3/9', null)], [w(7, '3/9', null)], [w(7, '3/9', null)], [w(7, '3/9', null)], [w(7, '3/10', null)], []]);
    const q = await awaitQuietWriters(s.db, 'acme', { longMs: 50, maxWaitMs: 10_000, pollMs: 25, ...s.opts });
    expect(q.gaveUp).toBe(false);
    expect(q.longest?.pid).toBe(7);
    expect(q.longest!.heldMs).toBeGreaterThanOrEqual(50);
    // Not quiet at the first look: an unknown age is watched for longMs first.
    expect(s.looks()).toBeGreaterThanOrEqual(5);
  });

  it('backs off its looks (pg_locks takes every lock partition) up to 200 ms', async () => {
    const s = script([[w(7, '3/9', 1000)]]);
    await awaitQuietWriters(s.db, 'acme', { longMs: 50, maxWaitMs: 2_000, ...s.opts });
    expect(s.sleeps.slice(0, 5)).toEqual([25, 50, 100, 200, 200]);
  });

  it('gives up at maxWaitMs with the long writer still there, saying so, and never sleeps past the bound', async () => {
    const s = script([[w(null, '-1/77', null, 'prepared transaction')]]);
    const q = await awaitQuietWriters(s.db, 'acme', { longMs: 50, maxWaitMs: 1_000, ...s.opts });
    expect(q).toMatchObject({ gaveUp: true, waitedMs: 1_000, longest: { pid: 0, state: 'prepared transaction' } });
    expect(describeLongWriter(q.longest!)).toMatch(/^pid 0 \(prepared transaction\) held its write \d+ ms$/);
  });
});
