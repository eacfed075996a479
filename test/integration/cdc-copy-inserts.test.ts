// Inserts after the copy go by COPY (lib/cdc/applier.ts, InsertsByCopy), on the real stack:
// shard-a is the source, shard-b the target, the typed fixture's awkward values (tabs, newlines,
// backslashes, NULLs, enums, arrays, bytea, a generated column, TOASTed text, an FK child).
// What must hold: a row the copy already took and the stream redelivers is never COPYed (it is
// upserted); rows inserted after the copy's end are COPYed and arrive exact; a key that is on the
// target all the same fails the round, keeps nothing, and the next round upserts; a table COPY
// would write differently from INSERT (row-level security, an INSERT rule) is never COPYed.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool } from 'pg';
import { randomBytes } from 'node:crypto';
import { shardPool, closePools, uniq, testConfig } from '../helpers/stack';
import { shardByName } from '../../lib/config';
import { typedFixture, TENANT_COL } from '../helpers/typed-fixture';
import type { TenantTable } from '../../lib/shard/tables';
import { copyTenant, copyProgress } from '../../lib/copy';
import { validateTenant } from '../../lib/validate';
import { applyChangesUntil, compareLsn, dropPublicationAndSlot, ensurePublicationAndSlot, isLsn, readAppliedLsn } from '../../lib/cdc';
import { readDelta, startDelta } from '../../lib/cdc/delta';
import { loadTargetTable } from '../../lib/cdc/target-tables';
import { ShardctlError } from '../../lib/errors';

const SCHEMA = `CdcCopy_${randomBytes(4).toString('hex')}`;
const { S, AWKWARD_KEYS, asReplica, seedTenant, installBoth, dropBoth } = typedFixture(SCHEMA);
const sourceDsn = shardByName(testConfig(), 'shard-a').dsn;

let source: Pool;
let target: Pool;
let tables: TenantTable[];
const moveIds: string[] = [];
const slots: { slot: string; publication: string }[] = [];

async function streamFor(tenant: string) {
  const moveId = uniq('move-cdccopy');
  moveIds.push(moveId);
  const names = { slot: `cc_${randomBytes(6).toString('hex')}`, publication: `cc_${randomBytes(6).toString('hex')}` };
  slots.push(names);
  const { consistentLsn } = await ensurePublicationAndSlot(source, { ...names, tables, tenantColumn: TENANT_COL, unit: tenant });
  const apply = () => applyChangesUntil({ sourceDsn, target, ...names, moveId, stream: 'forward', maxDurationMs: 30_000, idleStopMs: 300 });
  return { moveId, consistentLsn, apply };
}

async function applied(moveId: string): Promise<string | null> {
  const c = await target.connect();
  try {
    return await readAppliedLsn(c, moveId, 'forward');
  } finally {
    c.release();
  }
}

async function expectSame(tenant: string) {
  const report = await validateTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant });
  expect(report.tables.map((t) => [t.table, t.missingCount, t.extraCount, t.differentCount])).toEqual(tables.map((t) => [`${t.schema}.${t.name}`, 0, 0, 0]));
  expect(report.ok).toBe(true);
}

beforeAll(async () => {
  source = shardPool('shard-a');
  target = shardPool('shard-b');
  tables = await installBoth(source, target);
});

afterAll(async () => {
  for (const s of slots) await dropPublicationAndSlot(source, s).catch(() => {});
  await dropBoth([source, target], moveIds);
  await closePools();
});

describe('inserts after the copy go by COPY', () => {
  it('upserts what the copy already took, COPYs what came after, and every value arrives exact', async () => {
    const tenant = uniq('cc');
    const s = await streamFor(tenant);
    // After the slot, before the copy: the copy takes these rows and the stream redelivers them.
    await asReplica(source, async (q) => {
      await q(`insert into ${S}.tagged (tenant_id, "Key", moods) select $1, 'pre-' || i, '{happy,NULL}' from generate_series(1, 20) i`, [tenant]);
    });
    await copyTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant, moveId: s.moveId });
    const progress = await copyProgress(target, s.moveId);
    expect(progress.map((p) => p.done)).toEqual(tables.map(() => true));
    for (const p of progress) {
      expect(isLsn(p.doneAtLsn)).toBe(true);
      expect(compareLsn(p.doneAtLsn!, s.consistentLsn)).toBeGreaterThan(0);
    }
    // After the copy: 40 parents (awkward values, two TOASTed and then updated), 80 children, the awkward keys.
    await seedTenant(source, tenant, 40, { big: true, tagged: true });
    // A key the copy took, deleted and inserted again after it: the delete must reach the target first.
    await asReplica(source, async (q) => {
      await q(`delete from ${S}.tagged where tenant_id = $1 and "Key" like 'pre-%'`, [tenant]);
      await q(`insert into ${S}.tagged (tenant_id, "Key", moods) select $1, 'pre-' || i, '{sad}' from generate_series(1, 10) i`, [tenant]);
    });

    const r = await s.apply();
    expect(r.stopReason).toBe('idle');
    // The 20 redelivered rows are upserts; 40 + 80 + the awkward keys + the 10 re-inserted are COPYed.
    expect(r.rowsInsertedByCopy).toBe(40 + 80 + AWKWARD_KEYS.length + 10);
    await expectSame(tenant);
  });

  it('a key already on the target fails the COPY round, keeps nothing of it, and the next round upserts', async () => {
    const tenant = uniq('cc');
    const s = await streamFor(tenant);
    await seedTenant(source, tenant, 5);
    await copyTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant, moveId: s.moveId });
    expect((await s.apply()).stopReason).toBe('idle');
    const before = await applied(s.moveId);
    // A leftover on the target (a row the source does not have yet), then the source inserts it.
    await asReplica(target, async (q) => {
      await q(`insert into ${S}.tagged (tenant_id, "Key", moods) values ($1, 'late-3', '{meh}')`, [tenant]);
    });
    await asReplica(source, async (q) => {
      await q(`insert into ${S}.tagged (tenant_id, "Key", moods) select $1, 'late-' || i, '{happy}' from generate_series(1, 12) i`, [tenant]);
    });

    const failed = await s.apply().then(
      () => null,
      (e: unknown) => e,
    );
    expect(failed).toBeInstanceOf(ShardctlError);
    expect((failed as ShardctlError).type).toBe('Unavailable');
    expect((failed as Error).message).toMatch(/met a key already on the target.*applied by upserts from now on/);
    expect(await applied(s.moveId)).toBe(before);
    const kept = await target.query(`select count(*)::int as n from ${S}.tagged where tenant_id = $1 and "Key" like 'late-%'`, [tenant]);
    expect(kept.rows[0].n).toBe(1); // only the leftover: the failed round kept nothing

    const again = await s.apply();
    expect(again.stopReason).toBe('idle');
    expect(again.rowsInsertedByCopy).toBe(0);
    expect(again.rowsApplied).toBe(12);
    await expectSame(tenant); // the leftover now holds the source's value
  });

  it('records every key it COPYs in the delta once tracking is on, and nothing before', async () => {
    const tenant = uniq('cc');
    const s = await streamFor(tenant);
    await copyTenant({ source, target, tables, tenantColumn: TENANT_COL, unit: tenant, moveId: s.moveId });
    await asReplica(source, async (q) => {
      await q(`insert into ${S}.tagged (tenant_id, "Key", moods) select $1, 'untracked-' || i, '{happy}' from generate_series(1, 20) i`, [tenant]);
    });
    expect((await s.apply()).rowsInsertedByCopy).toBe(20);
    await startDelta(target, s.moveId, 'forward', 'cc-token');
    // One source transaction of 30 inserts, another of 15: after the first row, each goes by the
    // applier's promise-free path (applyInsertNow), which must record its key as apply() does.
    await asReplica(source, async (q) => {
      await q(`insert into ${S}.tagged (tenant_id, "Key", moods) select $1, 'tracked-' || i, '{sad}' from generate_series(1, 30) i`, [tenant]);
    });
    await asReplica(source, async (q) => {
      await q(`insert into ${S}.tagged (tenant_id, "Key", moods) select $1, 'tracked-' || i, '{meh}' from generate_series(31, 45) i`, [tenant]);
    });
    const r = await s.apply();
    expect(r.rowsInsertedByCopy).toBe(45);
    const d = await readDelta(target, s.moveId, 'forward', 1000, { token: 'cc-token' });
    expect(d).toMatchObject({ tracked: true, overflow: false, total: 45 });
    const keys = d.tracked ? (d.tables.get(`${SCHEMA}.tagged`) ?? []).map((k) => JSON.parse(k) as string[]) : [];
    expect(keys.map((k) => k.join('|')).sort()).toEqual(Array.from({ length: 45 }, (_, i) => `${tenant}|tracked-${i + 1}`).sort());
    await expectSame(tenant);
  });

  it('never COPYs into a table with row-level security or an INSERT rule, on it or a partition', async () => {
    const x = `${S}.x_${randomBytes(3).toString('hex')}`;
    await target.query(`
      create table ${x}_plain (tenant_id text, id int, primary key (tenant_id, id));
      create table ${x}_rls (tenant_id text, id int, primary key (tenant_id, id));
      alter table ${x}_rls enable row level security;
      create table ${x}_rule (tenant_id text, id int, primary key (tenant_id, id));
      create table ${x}_log (id int);
      create rule r as on insert to ${x}_rule do also insert into ${x}_log values (new.id);
      create table ${x}_parted (tenant_id text, id int, primary key (tenant_id, id)) partition by hash (id);
      create table ${x}_p0 partition of ${x}_parted for values with (modulus 2, remainder 0);
      create table ${x}_p1 partition of ${x}_parted for values with (modulus 2, remainder 1);
      create table ${x}_parted_rls (tenant_id text, id int, primary key (tenant_id, id)) partition by hash (id);
      create table ${x}_q0 partition of ${x}_parted_rls for values with (modulus 2, remainder 0);
      create table ${x}_q1 partition of ${x}_parted_rls for values with (modulus 2, remainder 1);
      alter table ${x}_q1 enable row level security;`);
    const c = await target.connect();
    try {
      const copyable = async (suffix: string) => (await loadTargetTable(c, { schema: SCHEMA, name: `${x.split('.')[1]}_${suffix}` })).copyable;
      expect(await copyable('plain')).toBe(true);
      expect(await copyable('parted')).toBe(true);
      expect(await copyable('rls')).toBe(false);
      expect(await copyable('rule')).toBe(false);
      expect(await copyable('parted_rls')).toBe(false);
    } finally {
      c.release();
    }
  });
});
