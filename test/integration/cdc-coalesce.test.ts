// Coalesced apply against the real stack (shard-a → shard-b): changes batched per table and kind
// out of source order still leave the target equal to the source, each key's changes in order
// (a key deleted, re-inserted and updated within one group); a table with a second unique index
// keeps source order exactly, where reordering would break it; the delta records every key.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { randomBytes } from 'node:crypto';
import { testConfig, uniq, shardPool, closePools } from '../helpers/stack';
import { shardByName } from '../../lib/config';
import { applyChangesUntil, dropPublicationAndSlot, ensurePublicationAndSlot, ApplyChangesOptions } from '../../lib/cdc';
import { startDelta, readDelta } from '../../lib/cdc/delta';
import { loadTargetTable } from '../../lib/cdc/target-tables';

const source = shardPool('shard-a');
const target = shardPool('shard-b');
const sourceDsn = shardByName(testConfig(), 'shard-a').dsn;
const S = uniq('coal').replace(/-/g, '_');
const tenant = uniq('ten');
const moveId = uniq('move-coal');
const names = { publication: `${S}_pub`, slot: `${S}_slot` };

const ddl = `
create schema ${S};
create table ${S}.a (tenant_id text not null, id bigint not null, v text, n int, big text, primary key (tenant_id, id));
create table ${S}.b (tenant_id text not null, id int not null, v text, primary key (tenant_id, id));
create table ${S}.u (tenant_id text not null, id int not null, email text not null, primary key (tenant_id, id), unique (tenant_id, email));
`;

const opts = (): ApplyChangesOptions => ({ sourceDsn, target, ...names, moveId, stream: 'forward', maxDurationMs: 30_000, idleStopMs: 300 });
const snapshot = async (p: typeof source, t: string) =>
  (await p.query(`select * from ${S}.${t} where tenant_id = $1 order by id`, [tenant])).rows.map((r) => ({ ...r, big: r.big ? r.big.length : r.big }));

beforeAll(async () => {
  await source.query(ddl);
  await target.query(ddl);
  await ensurePublicationAndSlot(source, {
    ...names,
    tables: ['a', 'b', 'u'].map((name) => ({ schema: S, name })),
    tenantColumn: 'tenant_id',
    unit: tenant,
  });
});

afterAll(async () => {
  await dropPublicationAndSlot(source, names).catch(() => {});
  for (const p of [source, target]) await p.query(`drop schema if exists ${S} cascade`).catch(() => {});
  await target.query('delete from shardctl.move_progress where move_id = $1', [moveId]).catch(() => {});
  await target.query('delete from shardctl.move_delta where move_id = $1', [moveId]).catch(() => {});
  await target.query('delete from shardctl.move_delta_since where move_id = $1', [moveId]).catch(() => {});
  await closePools();
});

describe('coalesced apply', () => {
  it('says which tables may be batched out of order: not one with a second unique index', async () => {
    const c = await target.connect();
    try {
      expect((await loadTargetTable(c, { schema: S, name: 'a' })).independentKeys).toBe(true);
      expect((await loadTargetTable(c, { schema: S, name: 'u' })).independentKeys).toBe(false);
    } finally {
      c.release();
    }
  });

  it('applies interleaved changes of two tables to the same end state, each key in order, and records every key in the delta', async () => {
    const big = randomBytes(60_000).toString('base64'); // TOASTed: absent from updates that do not touch it
    await source.query(`insert into ${S}.a select $1, g, 'v' || g, g, case when g % 50 = 0 then $2 end from generate_series(1, 400) g`, [tenant, big]);
    await applyChangesUntil(opts());
    await startDelta(target, moveId, 'forward', 'tok');
    // One source transaction mixing tables and kinds, keys repeating; then many small ones.
    const c = await source.connect();
    try {
      await c.query('begin');
      await c.query(`insert into ${S}.b select $1, g, 'b' || g from generate_series(1, 300) g`, [tenant]);
      await c.query(`delete from ${S}.a where tenant_id = $1 and id % 3 = 0`, [tenant]);
      await c.query(`update ${S}.a set n = -n where tenant_id = $1 and id % 5 = 0`, [tenant]); // in place where big is TOASTed
      await c.query(`insert into ${S}.a values ($1, 3, 'back', 3, null), ($1, 1000, 'new', 0, null)`, [tenant]); // 3 was deleted above
      await c.query(`update ${S}.a set v = 'again' where tenant_id = $1 and id = 3`, [tenant]);
      await c.query(`delete from ${S}.b where tenant_id = $1 and id = 10`, [tenant]);
      await c.query(`insert into ${S}.b values ($1, 10, 'ten')`, [tenant]);
      await c.query(`update ${S}.a set n = 7 where tenant_id = $1 and id = 100`, [tenant]); // 100: big TOASTed, updated in place twice
      await c.query(`delete from ${S}.a where tenant_id = $1 and id = 1000`, [tenant]);
      await c.query('commit');
    } finally {
      c.release();
    }
    for (let i = 0; i < 40; i++) {
      await source.query(
        `with d as (delete from ${S}.b where tenant_id = $1 and id = $2) insert into ${S}.b values ($1, $3::int, 'tx' || $3::int) on conflict (tenant_id, id) do update set v = excluded.v`,
        [tenant, 100 + i, 1000 + (i % 7)],
      );
    }
    const r = await applyChangesUntil(opts());
    expect(r.stopReason).toBe('idle');
    for (const t of ['a', 'b']) expect(await snapshot(target, t)).toEqual(await snapshot(source, t));
    expect((await snapshot(target, 'a')).find((x) => x.id === '100')).toMatchObject({ n: 7, big: big.length });
    const delta = await readDelta(target, moveId, 'forward', 100_000, { token: 'tok' });
    expect(delta.tracked && delta.tables.get(`${S}.a`)).toContain(JSON.stringify([tenant, '1000']));
    expect(delta.tracked && delta.tables.get(`${S}.b`)).toContain(JSON.stringify([tenant, '10']));
  });

  it('keeps source order on a table with a second unique index, where batching by kind would collide', async () => {
    await source.query(`insert into ${S}.u values ($1, 1, 'x'), ($1, 3, 'y')`, [tenant]);
    await applyChangesUntil(opts());
    const c = await source.connect();
    try {
      await c.query('begin');
      // First a change to each table: the stream's relation messages (which end every batch) come here.
      await c.query(`insert into ${S}.u values ($1, 9, 'z')`, [tenant]);
      await c.query(`insert into ${S}.a values ($1, 4999, 'first', 0, null)`, [tenant]);
      await c.query(`update ${S}.u set email = 'y2' where tenant_id = $1 and id = 3`, [tenant]); // a full-row upsert
      await c.query(`insert into ${S}.a values ($1, 5000, 'between', 0, null)`, [tenant]);
      await c.query(`delete from ${S}.u where tenant_id = $1 and id = 1`, [tenant]); // frees 'x'
      await c.query(`insert into ${S}.u values ($1, 4, 'x')`, [tenant]); // takes it: must come after the delete
      await c.query(`insert into ${S}.u values ($1, 5, 'y')`, [tenant]); // takes the 'y' the update freed
      await c.query('commit');
    } finally {
      c.release();
    }
    const r = await applyChangesUntil(opts());
    expect(r.stopReason).toBe('idle');
    expect(await snapshot(target, 'u')).toEqual(await snapshot(source, 'u'));
    expect(await snapshot(target, 'a')).toEqual(await snapshot(source, 'a'));
  });
});
