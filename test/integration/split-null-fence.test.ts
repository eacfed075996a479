// A split tenant's row whose split column is NULL is in no sub-unit (docs/architecture.md,
// "Splitting a tenant"): no sub-unit's predicate selects it, so no move would carry it, and the
// next move's retire would leave it behind on a shard that no longer serves it. The shard's fence
// refuses it in every sub-unit's transaction (SC403, naming the table and column), on INSERT and on
// an UPDATE that sets it NULL; an unsplit tenant on the same table is unaffected. A shard prepared
// by the previous release (whose fence let it pass) is upgraded by re-running prepare, and a split
// of a tenant that already holds such a row is refused.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { createHash, randomBytes } from 'node:crypto';
import { shardPool, directoryPool, uniq } from '../helpers/stack';
import { dropSplitSchema, setUpSplitSchema } from '../helpers/split-schema';
import { prepareShard, fenceStatus } from '../../lib/shard/prepare';
import { splitIndexSql } from '../../lib/shard/split-sql';
import { createTenant } from '../../lib/tenants';
import { splitTenant } from '../../lib/tenant-split';
import { tenantUnitForRow } from '../../lib/buckets/route';
import { getPlacement } from '../../lib/directory/placements';
import type { Config } from '../../lib/config';

const SHARD = 'shard-a';
const WAYS = 4;
const schema = `sn_${randomBytes(4).toString('hex')}`;
let config: Config;

beforeAll(async () => {
  // notes.tag may be NULL (the case under test); tags.tag may not.
  config = await setUpSplitSchema(
    SHARD,
    schema,
    { notes: 'tag', tags: 'tag' },
    `create table ${schema}.notes (tenant_id text not null, id int not null, tag text, body text, primary key (tenant_id, id));
     create table ${schema}.tags (tenant_id text not null, tag text not null, primary key (tenant_id, tag))`,
  );
}, 60_000);

afterAll(() => dropSplitSchema(SHARD, schema));

const deps = () => ({ directory: directoryPool(), shardPool, config });

async function newTenant(): Promise<{ tenant: string; epoch: number }> {
  const tenant = uniq('sn');
  await createTenant(deps(), { tenant, shard: SHARD, actor: 'test' });
  return { tenant, epoch: (await getPlacement(directoryPool(), tenant))!.epoch };
}

/** `sql` in a transaction opened for `unit` at `epoch`, committed: 'ok', or the error's SQLSTATE and message. */
async function write(unit: string, epoch: number, sql: string, params: unknown[]): Promise<{ code: string; message?: string }> {
  const c = await shardPool(SHARD).connect();
  try {
    await c.query('begin');
    await c.query('call shardctl.open_unit_write($1, $2)', [unit, epoch]);
    await c.query(sql, params);
    await c.query('commit');
    return { code: 'ok' };
  } catch (e: any) {
    await c.query('rollback').catch(() => {});
    return { code: e.code ?? String(e), message: e.message };
  } finally {
    c.release();
  }
}

/** A tag whose rows fall in sub-unit `k` of `tenant` split WAYS ways. */
function tagIn(tenant: string, k: number): string {
  const splits = new Map([[tenant, WAYS]]);
  for (let i = 0; ; i++) if (tenantUnitForRow(tenant, `tag${i}`, splits) === `${tenant}:${k}`) return `tag${i}`;
}

const notesOf = async (tenant: string) =>
  (await shardPool(SHARD).query(`select id, tag from ${schema}.notes where tenant_id = $1 order by id`, [tenant])).rows.map((r) => [r.id, r.tag]);

/**
 * The previous release's fence triggers of a table with a split column (lib/shard/fence-sql.ts
 * before this change, written out): the sub-unit index not coalesced, so a NULL split column made
 * the WHEN NULL and the row passed; three arguments; its version the digest of that definition.
 */
function previousReleaseTriggers(qualified: string, tenantColumn: string, splitColumn: string): string[] {
  const ways = 'shardctl.split_ways_of(shardctl.checked_unit())';
  const unitOf = (row: 'new' | 'old') =>
    `(case when ${ways} operator(pg_catalog.=) 0 then (${row}."${tenantColumn}")::pg_catalog.text ` +
    `else (${row}."${tenantColumn}")::pg_catalog.text operator(pg_catalog.||) ':' operator(pg_catalog.||) ${splitIndexSql(`${row}."${splitColumn}"`, ways)}::pg_catalog.text end)`;
  const triggers = (table: string, column: string, version: string) => {
    const one = (name: string, events: string, row: 'new' | 'old') =>
      `create or replace trigger ${name} after ${events} on ${table} for each row
      when (${unitOf(row)} operator(pg_catalog.<>) shardctl.checked_unit())
      execute function shardctl.refuse_row_of_unit('${column}', '${row}', '${version}')`;
    return [one('shardctl_fence', 'insert or update', 'new'), one('shardctl_fence_old_rows', 'update or delete', 'old')];
  };
  const version = createHash('sha256')
    .update(triggers('<table>', '<column>', '').join('\n'))
    .digest('hex')
    .slice(0, 16);
  return triggers(qualified, tenantColumn, version);
}

describe("a split tenant's row with a NULL split column", () => {
  it('is refused in a sub-unit transaction (SC403, naming the table and column) on INSERT and on an UPDATE setting it NULL; an unsplit tenant may still write one', async () => {
    const { tenant } = await newTenant();
    const plain = await newTenant();
    const { epoch } = await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' });
    const tag = tagIn(tenant, 1);
    const unit = `${tenant}:1`;
    expect(await write(unit, epoch, `insert into ${schema}.notes(tenant_id, id, tag) values ($1, 1, $2)`, [tenant, tag])).toEqual({ code: 'ok' });

    const ins = await write(unit, epoch, `insert into ${schema}.notes(tenant_id, id, tag) values ($1, 2, null)`, [tenant]);
    expect(ins.code).toBe('SC403');
    expect(ins.message).toContain(
      `insert of a row of tenant ${tenant} whose split column ${schema}.notes.tag is NULL, in a transaction opened for sub-unit ${unit}`,
    );
    const upd = await write(unit, epoch, `update ${schema}.notes set tag = null where tenant_id = $1 and id = 1`, [tenant]);
    expect(upd.code).toBe('SC403');
    expect(upd.message).toContain(`update of a row of tenant ${tenant} whose split column ${schema}.notes.tag is NULL`);
    // Every sub-unit refuses it, not only the one whose rows the statement touched.
    for (let k = 0; k < WAYS; k++) {
      expect((await write(`${tenant}:${k}`, epoch, `insert into ${schema}.notes(tenant_id, id, tag) values ($1, 3, null)`, [tenant])).code).toBe('SC403');
    }
    expect(await notesOf(tenant)).toEqual([[1, tag]]);
    // A row of its own sub-unit is still written and updated within it.
    expect(await write(unit, epoch, `update ${schema}.notes set body = 'b' where tenant_id = $1 and id = 1`, [tenant])).toEqual({ code: 'ok' });
    // An unsplit tenant on the same table: a NULL split column is its own row, as before.
    expect(await write(plain.tenant, plain.epoch, `insert into ${schema}.notes(tenant_id, id, tag) values ($1, 1, null)`, [plain.tenant])).toEqual({
      code: 'ok',
    });
    expect(await notesOf(plain.tenant)).toEqual([[1, null]]);
  });

  it('a split is refused while the tenant holds a row whose split column is NULL, naming the table and column, and changes nothing', async () => {
    const { tenant, epoch } = await newTenant();
    expect(await write(tenant, epoch, `insert into ${schema}.notes(tenant_id, id, tag) values ($1, 1, null)`, [tenant])).toEqual({ code: 'ok' });
    const err = await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' }).catch((e) => e);
    expect(err.type).toBe('PreconditionFailed');
    expect(err.message).toContain(`${schema}.notes holds rows of tenant ${tenant} whose split column tag is NULL`);
    expect(await getPlacement(directoryPool(), tenant)).toMatchObject({ state: 'active', epoch });
    // Given a value, it splits.
    expect(await write(tenant, epoch, `update ${schema}.notes set tag = 'x' where tenant_id = $1`, [tenant])).toEqual({ code: 'ok' });
    expect((await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' })).epoch).toBe(epoch + 1);
  });

  it("a shard fenced by the previous release (which let it pass) is upgraded by re-running prepare: only the split tables' triggers are replaced, in place (a reader is not waited for), then it is refused; a second re-run changes nothing and takes no table lock", async () => {
    const { tenant } = await newTenant();
    const { epoch } = await splitTenant(deps(), { tenant, ways: WAYS, actor: 'test' });
    const unit = `${tenant}:2`;
    const pool = shardPool(SHARD);
    for (const table of ['notes', 'tags']) for (const sql of previousReleaseTriggers(`${schema}.${table}`, 'tenant_id', 'tag')) await pool.query(sql);
    const st = await fenceStatus(pool, config);
    expect(st.unfenced.filter((t) => t.startsWith(schema)).sort()).toEqual([`${schema}.notes`, `${schema}.tags`]);
    // The hole this release closes, on the previous release's fence.
    expect(await write(unit, epoch, `insert into ${schema}.notes(tenant_id, id, tag) values ($1, 10, null)`, [tenant])).toEqual({ code: 'ok' });

    // The upgrade replaces the triggers in place (CREATE OR REPLACE, SHARE ROW EXCLUSIVE): a reader
    // mid-transaction on both tables does not hold it up (a DROP TRIGGER would wait for it: ACCESS EXCLUSIVE).
    const reader = await pool.connect();
    let up;
    try {
      await reader.query('begin');
      await reader.query(`select count(*) from ${schema}.notes, ${schema}.tags`);
      up = await prepareShard(pool, config, { lockTimeoutMs: 2000 });
    } finally {
      await reader.query('rollback').catch(() => {});
      reader.release();
    }
    expect(up.changed.filter((t) => t.startsWith(schema)).sort()).toEqual([`${schema}.notes`, `${schema}.tags`]);
    expect(await write(unit, epoch, `insert into ${schema}.notes(tenant_id, id, tag) values ($1, 11, null)`, [tenant])).toMatchObject({ code: 'SC403' });
    expect(await notesOf(tenant)).toEqual([[10, null]]);

    // Nothing else changed: a re-run completes while a writer holds both tables, and touches no trigger.
    const writer = await pool.connect();
    try {
      await writer.query('begin');
      await writer.query(`lock table ${schema}.notes, ${schema}.tags, shardctl.fence in row exclusive mode`);
      const again = await prepareShard(pool, config, { lockTimeoutMs: 300 });
      expect(again.changed).toEqual([]);
    } finally {
      await writer.query('rollback').catch(() => {});
      writer.release();
    }
  });
});
