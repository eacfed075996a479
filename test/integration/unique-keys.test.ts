// Unique keys that span tenants (lib/shard/unique-keys.ts), on two real shards: a global id and a
// multi-column unique index without the tenant column are found (keys that contain the tenant
// column are not), and the first value the target already holds for another unit is named.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool } from 'pg';
import { randomBytes } from 'node:crypto';
import { shardPool, closePools, uniq } from '../helpers/stack';
import { listTenantTables, quoteIdent, TenantTable } from '../../lib/shard/tables';
import { firstKeyCollision, globalUniqueKeys } from '../../lib/shard/unique-keys';

const SCHEMA = `uk_${randomBytes(4).toString('hex')}`;
const S = quoteIdent(SCHEMA);
let source: Pool;
let target: Pool;
let docs: TenantTable;

beforeAll(async () => {
  source = shardPool('shard-a');
  target = shardPool('shard-b');
  const ddl = `create schema ${S};
    create table ${S}.docs (tenant_id text not null, id bigint not null, slug text, region int, v text,
      primary key (tenant_id, id), unique (id), unique (slug, region), unique (tenant_id, slug));`;
  await source.query(ddl);
  await target.query(ddl);
  docs = (await listTenantTables(source, { column: 'tenant_id', schemas: [SCHEMA] }))[0];
});

afterAll(async () => {
  await source?.query(`drop schema if exists ${S} cascade`);
  await target?.query(`drop schema if exists ${S} cascade`);
  await closePools();
});

describe('unique keys across tenants', () => {
  it('finds the unique indexes that leave out the tenant column, and only those', async () => {
    expect((await globalUniqueKeys(target, docs, 'tenant_id')).map((k) => k.columns)).toEqual([['id'], ['slug', 'region']]);
  });

  it('names the first value another unit already holds on the target, across batches', async () => {
    const unit = uniq('uk-mover');
    const other = uniq('uk-other');
    await source.query(`insert into ${S}.docs select $1, g, 's' || g, 1, 'v' from generate_series(1, 250) g`, [unit]);
    await target.query(`insert into ${S}.docs values ($1, 10000, 's' || 230, 1, 'theirs')`, [other]);
    const [byId, bySlug] = await globalUniqueKeys(target, docs, 'tenant_id');
    expect(await firstKeyCollision(source, target, docs, byId, 'tenant_id', unit, 100)).toBeNull();
    expect(await firstKeyCollision(source, target, docs, bySlug, 'tenant_id', unit, 100)).toEqual({
      index: bySlug.index,
      columns: ['slug', 'region'],
      values: ['s230', '1'],
      holder: other,
    });
    await target.query(`insert into ${S}.docs values ($1, 7, null, null, 'theirs')`, [other]);
    expect(await firstKeyCollision(source, target, docs, byId, 'tenant_id', unit, 100)).toMatchObject({ values: ['7'], holder: other });
  });

  it('ignores rows of the same unit and NULL key values', async () => {
    const unit = uniq('uk-self');
    await source.query(`insert into ${S}.docs values ($1, 900001, null, null, 'v')`, [unit]);
    await target.query(`insert into ${S}.docs values ($1, 900001, null, null, 'v')`, [unit]);
    await target.query(`insert into ${S}.docs values ($1, 900002, null, null, 'v')`, [uniq('uk-nulls')]);
    const [byId, bySlug] = await globalUniqueKeys(target, docs, 'tenant_id');
    expect(await firstKeyCollision(source, target, docs, byId, 'tenant_id', unit)).toBeNull();
    expect(await firstKeyCollision(source, target, docs, bySlug, 'tenant_id', unit)).toBeNull();
  });
});
