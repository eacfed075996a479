// The typed-columns fixture shared by the copy and validation tests: the same DDL on both
// shards (awkward types, TOASTed text, a generated column, an FK child), fenced like a prepared
// shard, and a seeder that writes through the replica role.
import type { Pool } from 'pg';
import { randomBytes } from 'node:crypto';
import { installShardSchema } from '../../lib/shard/schema';
import { installTableFence } from '../../lib/shard/prepare';
import { quoteIdent, listTenantTables, TenantTable } from '../../lib/shard/tables';
import { inTransaction } from '../../lib/pg';

export const TENANT_COL = 'tenant_id';

export function typedFixture(schema: string) {
  const S = quoteIdent(schema);
  const DDL = `
  create schema ${S};
  create type ${S}.mood as enum ('happy', 'sad', 'meh');
  create domain ${S}.posint as integer check (value > 0);
  create table ${S}.parents (
    tenant_id text not null,
    id uuid not null,
    amount numeric(20,6),
    exact numeric,
    ratio float8,
    doc jsonb,
    nums int[],
    raw bytea,
    at timestamptz,
    feeling ${S}.mood,
    qty ${S}.posint,
    big text,
    "MixedCase" text,
    doubled numeric generated always as (amount * 2) stored,
    primary key (tenant_id, id)
  );
  create table ${S}.children (
    tenant_id text not null,
    parent_id uuid not null,
    "Seq" integer not null,
    note text,
    primary key (tenant_id, parent_id, "Seq"),
    foreign key (tenant_id, parent_id) references ${S}.parents (tenant_id, id) on delete cascade
  );
  create table ${S}.tagged (
    tenant_id text not null,
    "Key" text not null,
    moods ${S}.mood[],
    primary key (tenant_id, "Key")
  );`;

  const AWKWARD_KEYS = ['a', 'B', '_x', 'é', 'e', 'z', "O'Brien", 'back\\slash', "'); drop table x; --", '😀', '\uE000', 'with space', 'Z', '$1'];

  async function installFixture(pool: Pool) {
    await inTransaction(pool, async (c) => {
      // Same lock as `shards prepare`, so concurrent installers of shardctl's functions serialise.
      await c.query(`select pg_advisory_xact_lock(hashtextextended('shardctl.prepare', 0))`);
      await installShardSchema(c);
      await c.query(DDL);
      for (const t of ['parents', 'children', 'tagged']) await installTableFence(c, `${S}.${t}`, TENANT_COL);
    });
  }

  /** Writes fixture rows through the data-plane role (the fence refuses unrouted writes). */
  async function asReplica(pool: Pool, fn: (q: (sql: string, params?: unknown[]) => Promise<any>) => Promise<void>) {
    await inTransaction(pool, async (c) => {
      await c.query('set local session_replication_role = replica');
      await fn((sql, params) => c.query(sql, params as any[]));
    });
  }

  /** `parents` rows with every awkward type; two carry >200 KB of incompressible text (TOASTed). */
  async function seedTenant(pool: Pool, tenant: string, parents: number, opts: { big?: boolean; tagged?: boolean } = {}) {
    await asReplica(pool, async (q) => {
      await q(
        `insert into ${S}.parents (tenant_id, id, amount, exact, ratio, doc, nums, raw, at, feeling, qty, "MixedCase")
         select $1::text, md5($1::text || ':' || i)::uuid,
                case when i % 7 = 0 then null else (i * 1.234567)::numeric(20,6) end,
                case i % 3 when 0 then 1.0 when 1 then 1.00 else 12345678901234567890.123456789 end,
                case i % 5 when 0 then 'NaN'::float8 when 1 then 0.1::float8 + 0.2::float8 when 2 then 1e-300 when 3 then '-0'::float8 else 'Infinity' end,
                jsonb_build_object('i', i, 'n', jsonb_build_array(1.50, 'x', null), 'u', 'ü€😀', 'q', E'"\\\\'),
                array[i, -i, null]::int[],
                case when i % 6 = 0 then null else decode(md5(i::text) || '00ff00', 'hex') end,
                case when i = 1 then 'infinity'::timestamptz else '2024-02-29 12:34:56.789012+05:30'::timestamptz + i * interval '1 hour' end,
                case when i % 4 = 0 then null else (array['happy','sad','meh'])[1 + i % 3]::${S}.mood end,
                1 + i,
                case when i % 8 = 0 then null else E'Hello "' || i || E'" it\\'s a \\\\ back\\nslash\\t' end
           from generate_series(1, $2::int) i`,
        [tenant, parents],
      );
      await q(
        `insert into ${S}.children (tenant_id, parent_id, "Seq", note)
         select $1::text, md5($1::text || ':' || i)::uuid, s, case when s = 2 then null else 'note ' || i || '/' || s end
           from generate_series(1, $2::int) i, generate_series(1, 2) s`,
        [tenant, parents],
      );
      if (opts.big) {
        for (const i of [2, Math.max(2, parents - 1)]) {
          await q(`update ${S}.parents set big = $3 where tenant_id = $1::text and id = md5($1::text || ':' || $2::text)::uuid`, [
            tenant,
            i,
            randomBytes(190_000).toString('base64'),
          ]);
        }
      }
      if (opts.tagged) {
        for (const [i, k] of AWKWARD_KEYS.entries()) {
          await q(`insert into ${S}.tagged (tenant_id, "Key", moods) values ($1, $2, $3::${S}.mood[])`, [
            tenant,
            k,
            i % 3 === 0 ? null : `{happy,${i % 2 ? 'sad' : 'meh'},NULL}`,
          ]);
        }
      }
    });
  }

  /** The fixture on both shards; returns its tenant tables (parents first). */
  async function installBoth(source: Pool, target: Pool): Promise<TenantTable[]> {
    await installFixture(source);
    await installFixture(target);
    return listTenantTables(source, { column: TENANT_COL, schemas: [schema] });
  }

  /** Drops the fixture schema and the given moves' checkpoints from both shards. */
  async function dropBoth(pools: Array<Pool | undefined>, moveIds: string[]): Promise<void> {
    for (const p of pools) {
      if (!p) continue;
      await p.query(`drop schema if exists ${S} cascade`).catch(() => {});
      await p.query(`delete from shardctl.move_progress where move_id = any($1)`, [moveIds]).catch(() => {});
    }
  }

  return { S, DDL, AWKWARD_KEYS, installFixture, asReplica, seedTenant, installBoth, dropBoth };
}
