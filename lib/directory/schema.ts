// Versioned, idempotent migrations of the placement directory (schema `shardctl` in the
// directory database). Each version is applied once, under an advisory lock, in a transaction.
import { inTransaction } from '../pg';
import type { Pool } from 'pg';
import { ShardctlError } from '../errors';
import { onDirectory, poolDsn, type Queryable } from './db';

export const DIRECTORY_MIGRATIONS: { version: number; name: string; sql: string }[] = [
  {
    version: 1,
    name: 'placement directory',
    sql: `
create table shardctl.shards (
  name text primary key,
  capacity bigint not null default 1000 check (capacity > 0),
  load_estimate bigint not null default 0 check (load_estimate >= 0),
  status text not null default 'open' check (status in ('open', 'closed', 'draining')),
  updated_at timestamptz not null default now()
);
create table shardctl.units (
  unit text primary key,
  kind text not null check (kind in ('tenant', 'bucket')),
  shard text not null references shardctl.shards(name),
  epoch bigint not null check (epoch >= 1),
  state text not null check (state in ('active', 'moving')),
  move_id text,
  expected_load bigint not null default 1 check (expected_load >= 0),
  updated_at timestamptz not null default now(),
  check ((state = 'moving') = (move_id is not null))
);
create index on shardctl.units (shard);
create table shardctl.generation (
  singleton boolean primary key default true check (singleton),
  value bigint not null
);
insert into shardctl.generation values (true, 0);
create table shardctl.audit (
  id bigserial primary key,
  at timestamptz not null default now(),
  actor text not null,
  action text not null,
  unit text,
  detail jsonb not null default '{}',
  reason text
);
-- Append-only: the audit log is evidence, so no update or delete is allowed on it.
create function shardctl.audit_append_only() returns trigger language plpgsql as $$
begin raise exception 'shardctl.audit is append-only'; end $$;
create trigger audit_append_only before update or delete on shardctl.audit
  for each statement execute function shardctl.audit_append_only();
create table shardctl.moves (
  move_id text primary key,
  unit text not null,
  source text not null,
  target text not null,
  workflow_id text not null,
  status text not null,
  started_by text not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  detail jsonb not null default '{}'
);
`,
  },
  {
    version: 2,
    name: 'idempotent audit entries',
    // An activity delivered twice must not write its audit entry twice: entries written by
    // activities carry a key derived from the workflow run and activity id.
    sql: `
alter table shardctl.audit add column idem text;
create unique index audit_idem on shardctl.audit (idem) where idem is not null;
`,
  },
  {
    version: 4,
    name: 'freeze tokens',
    // Every cutover attempt's freeze carries a unique token; unfreeze and switch require it, so
    // a late or paused attempt can never act on another attempt's freeze (DESIGN.md §4).
    sql: `alter table shardctl.units add column if not exists freeze_token text;`,
  },
  {
    // After main's 4 (freeze tokens), so the merge keeps the versions in order.
    version: 5,
    name: 'functions pin search_path',
    // Every shardctl function runs with a fixed search_path, whatever the caller's (see
    // PINNED_SEARCH_PATH in lib/shard/schema.ts).
    sql: `
alter function shardctl.audit_append_only() set search_path = pg_catalog, pg_temp;
`,
  },
  {
    version: 6,
    name: 'dedicated shards',
    // `tenant isolate`: a shard dedicated to one tenant takes no other unit (placement, rebalance).
    sql: `alter table shardctl.shards add column if not exists dedicated_to text;`,
  },
  {
    version: 7,
    name: 'switch deadline of a freeze',
    // A freeze's switch deadline on the directory's own clock (lib/cutover/lease.ts): the switch
    // compare-and-set refuses after it, so every switch commits while the source's lease still runs.
    sql: `alter table shardctl.units add column if not exists switch_deadline timestamptz;`,
  },
  {
    version: 8,
    name: 'headroom reservations of moves in flight',
    // A move reserves its unit's load on the shard it is going to, taken under the target's row
    // lock at plan and released once when the move ends (lib/directory/reservations.ts), so two
    // concurrent moves or tenant creations cannot overcommit a shard. One open reservation per unit.
    sql: `
create table if not exists shardctl.reservations (
  move_id text primary key,
  unit text not null,
  source text not null references shardctl.shards(name),
  target text not null references shardctl.shards(name),
  load bigint not null check (load >= 0),
  workflow_id text not null,
  taken_at timestamptz not null default now(),
  released_at timestamptz,
  released_by text,
  check (source <> target)
);
create unique index if not exists reservations_open_unit on shardctl.reservations (unit) where released_at is null;
create index if not exists reservations_open_target on shardctl.reservations (target) where released_at is null;
`,
  },
  {
    version: 9,
    name: 'shard class, region and byte capacity',
    // `shards add --class --region --capacity-bytes` (lib/directory/add-shard.ts): a dedicated-class
    // shard takes no shared unit (placement, rebalance), only a tenant isolated onto it; region is
    // recorded for residency policy; capacity_bytes is the shard's disk budget (null: unstated).
    sql: `
alter table shardctl.shards add column if not exists class text not null default 'shared';
alter table shardctl.shards drop constraint if exists shards_class_check;
alter table shardctl.shards add constraint shards_class_check check (class in ('shared', 'dedicated'));
alter table shardctl.shards add column if not exists region text;
alter table shardctl.shards add column if not exists capacity_bytes bigint check (capacity_bytes > 0);
`,
  },
  {
    version: 10,
    name: 'unit residency policy',
    // `tenant residency` (lib/directory/policy.ts): the regions a unit may live in. Policy, not
    // placement: a row of its own, so setting it never raises the unit's epoch (its fence stays).
    sql: `
create table if not exists shardctl.unit_policy (
  unit text primary key,
  regions text[] not null check (cardinality(regions) > 0),
  updated_at timestamptz not null default now(),
  updated_by text not null
);
`,
  },
  {
    version: 11,
    name: 'tenant splits',
    // `tenant split T --ways K` (lib/directory/splits.ts): T's placement became K sub-unit
    // placements T:0 .. T:K-1 (same shard, epoch + 1). A split is never undone, so a router's
    // map of splits only grows.
    sql: `
create table if not exists shardctl.splits (
  unit text primary key,
  ways integer not null check (ways >= 2),
  shard text not null,
  parent_epoch bigint not null,
  split_at timestamptz not null default now(),
  split_by text not null
);
`,
  },
];

/**
 * Applies the migrations the directory lacks. A current directory is only read (no lock, no DDL):
 * a worker starts on it with DML grants alone (docs/production.md, "Roles"); the DDL path needs
 * CREATE on the database, and a role without it is told to run the migration as the owner.
 */
export async function migrateDirectory(pool: Pool): Promise<number[]> {
  if (!(await directorySchemaStatus(pool)).pending.length) return [];
  return applyMigrations(pool).catch((e) => {
    if (e?.code !== '42501') throw e;
    throw new ShardctlError(
      'PreconditionFailed',
      `the placement directory needs migrations this role may not run (${e.message}): run \`${MIGRATE_COMMAND}\` as the directory's owner, then start again`,
    );
  });
}

function applyMigrations(pool: Pool): Promise<number[]> {
  return inTransaction(pool, async (c) => {
    const applied: number[] = [];
    await c.query('select pg_advisory_xact_lock(421, 0)');
    await c.query('create schema if not exists shardctl');
    await c.query(`create table if not exists shardctl.schema_migrations (
      version int primary key, name text not null, applied_at timestamptz not null default now())`);
    const have = new Set((await c.query('select version from shardctl.schema_migrations')).rows.map((r) => r.version as number));
    for (const m of DIRECTORY_MIGRATIONS) {
      if (have.has(m.version)) continue;
      await c.query(m.sql);
      await c.query('insert into shardctl.schema_migrations(version, name) values ($1, $2)', [m.version, m.name]);
      applied.push(m.version);
    }
    return applied;
  });
}

export interface DirectorySchemaStatus {
  /** Versions recorded in shardctl.schema_migrations (none when the directory was never migrated). */
  applied: number[];
  /** Versions this build knows and the directory lacks: it must be migrated before use. */
  pending: number[];
}

/** Reads which migrations the directory has, changing nothing (no lock, no DDL). */
export async function directorySchemaStatus(db: Queryable): Promise<DirectorySchemaStatus> {
  const exists = await db.query(`select to_regclass('shardctl.schema_migrations') is not null as ok`);
  const applied = exists.rows[0].ok
    ? (await db.query('select version from shardctl.schema_migrations order by version')).rows.map((r) => Number(r.version))
    : [];
  const have = new Set(applied);
  return { applied, pending: DIRECTORY_MIGRATIONS.map((m) => m.version).filter((v) => !have.has(v)) };
}

/** The command that migrates the directory, named by every refusal below. */
export const MIGRATE_COMMAND = 'shardctl directory migrate';

/** For read verbs: refuses, naming the command that migrates, unless the schema is current. */
export async function requireCurrentDirectorySchema(db: Queryable): Promise<void> {
  const st = await onDirectory(() => directorySchemaStatus(db), poolDsn(db));
  if (!st.pending.length) return;
  const state = st.applied.length ? `is at schema version ${Math.max(...st.applied)}, lacking ${st.pending.join(', ')}` : 'has never been migrated';
  throw new ShardctlError(
    'PreconditionFailed',
    `the placement directory ${state}: run \`${MIGRATE_COMMAND}\` (a worker start migrates it too); read verbs never change it`,
    { applied: st.applied, pending: st.pending },
  );
}
