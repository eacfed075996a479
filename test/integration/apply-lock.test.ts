// Retire's guard against a late reverse applier (lib/cdc/apply-lock.ts evictApplySessions): an
// apply session holding the lock with an open transaction is ended and its rows never commit.
import { describe, it, expect, afterAll } from 'vitest';
import { Client } from 'pg';
import { testConfig, uniq, shardPool, closePools } from '../helpers/stack';
import { shardByName } from '../../lib/config';
import { acquireApplyLock, evictApplySessions, applyLockKey } from '../../lib/cdc/apply-lock';

afterAll(closePools);

describe('evictApplySessions', () => {
  it('ends a late applier that holds the apply lock mid-transaction: its write never commits', async () => {
    const pool = shardPool('shard-a');
    const table = `evict_${uniq('t').replace(/-/g, '_')}`;
    await pool.query(`create table public.${table} (x int)`);
    const late = new Client({ connectionString: shardByName(testConfig(), 'shard-a').dsn });
    late.on('error', () => {});
    await late.connect();
    try {
      const key = applyLockKey(uniq('m'), 'reverse');
      await acquireApplyLock(late, key);
      await late.query('begin');
      await late.query(`insert into public.${table} values (1)`);
      await evictApplySessions(pool, key);
      await expect(late.query('commit')).rejects.toThrow();
      expect((await pool.query(`select count(*)::int as n from public.${table}`)).rows[0].n).toBe(0);
      // And the lock is free again: a new session takes it at once.
      await evictApplySessions(pool, key, 1000);
    } finally {
      await late.end().catch(() => {});
      await pool.query(`drop table if exists public.${table}`);
    }
  });

  it('evictions at once (redelivered retires) all succeed and leave no applier: none ends another', async () => {
    const pool = shardPool('shard-a');
    for (let round = 0; round < 20; round++) {
      const late = new Client({ connectionString: shardByName(testConfig(), 'shard-a').dsn });
      late.on('error', () => {});
      await late.connect();
      try {
        const key = applyLockKey(uniq('m'), 'reverse');
        await acquireApplyLock(late, key);
        const r = await Promise.allSettled([1, 2, 3, 4].map(() => evictApplySessions(pool, key)));
        expect(r.map((x) => (x.status === 'rejected' ? String(x.reason?.message ?? x.reason) : 'ok'))).toEqual(['ok', 'ok', 'ok', 'ok']);
        await expect(late.query('select 1')).rejects.toThrow();
      } finally {
        await late.end().catch(() => {});
      }
    }
  });
});
