// The shard-side schema `shardctl`: the fence table, the fence check every tenant-table write
// runs inside its own transaction (DESIGN.md §3), and the move progress table that apply and
// copy commit together with the rows they describe. Installed idempotently by `shards prepare`.
//
// It also holds the routing hash (`shardctl.stable_hash`, `shardctl.bucket_of`) of bucketed
// datasets, so a shard computes a key's bucket exactly as the router does.
//
// Fence protocol:
//  - Writers set `shardctl.unit` and `shardctl.epoch` (SET LOCAL / set_config(..., true)).
//  - The BEFORE ROW trigger takes a shared, transaction-scoped advisory lock on the unit, then
//    reads the unit's fence row. Read committed: a VOLATILE plpgsql function takes a fresh
//    snapshot per query, so after the lock it sees any committed fence. Repeatable read and
//    serializable: the row is read FOR SHARE, which fails with 40001 if the fence changed after
//    the transaction's snapshot — a stale snapshot can never slip a write through.
//  - Fence changes take the same advisory lock exclusively (setUnitFence), so they wait for
//    in-flight writers, and commit before any later writer can pass.
//  - The check runs per row, so the trigger inlines it (no nested call per row) and takes the
//    lock as a plpgsql simple expression; shardctl.assert_writable is the same check, callable.
//  - The check runs as the writing role: it needs USAGE on schema shardctl and SELECT on
//    shardctl.fence and shardctl.settings; REPEATABLE READ / SERIALIZABLE writers also need
//    UPDATE on some column of shardctl.fence (FOR SHARE), e.g. GRANT UPDATE (updated_at).
//  - The move's own data-plane sessions (copy, change-apply, cancel/retire cleanup) run with
//    session_replication_role = replica, under which ordinary triggers do not fire.
import type { PoolClient } from 'pg';
import { MAX_BUCKETS } from '../buckets/units';

export const SHARD_SCHEMA_VERSION = 1;

export const FENCE_LOCK_CLASS = 421;

/**
 * Every shardctl function runs with this search_path, whatever the caller's: a role with CREATE
 * on some schema early in its own path could otherwise shadow `current_setting`, `hashtext` or
 * an operator and pass the fence under a stale epoch. Calls are schema-qualified as well.
 */
export const PINNED_SEARCH_PATH = 'set search_path = pg_catalog, pg_temp';

export function shardSchemaSql(): string {
  return `
create schema if not exists shardctl;

create table if not exists shardctl.fence (
  unit text primary key,
  epoch bigint not null check (epoch >= 0),
  owned boolean not null,
  frozen boolean not null default false,
  updated_at timestamptz not null default now()
);
-- The cutover attempt whose freeze this is: only that attempt (or the one that took it over)
-- may lower it, so a paused attempt can never reopen another attempt's freeze.
alter table shardctl.fence add column if not exists freeze_token text;
-- The cutover attempt whose acceptance this is, as the directory generation of its freeze: a
-- superseded attempt can neither overwrite a later attempt's acceptance nor take it back.
alter table shardctl.fence add column if not exists accept_gen bigint;

create table if not exists shardctl.move_progress (
  move_id text not null,
  stream text not null,
  lsn pg_lsn,
  detail jsonb not null default '{}',
  updated_at timestamptz not null default now(),
  primary key (move_id, stream)
);

-- What a move's change stream touched on this shard since the move's last full comparison
-- (lib/cdc/delta.ts): the cutover compares only these keys (plus row counts) under the fence, so
-- its pause follows what changed, not the size of the unit. \`move_delta_since\` says tracking is on.
create table if not exists shardctl.move_delta_since (
  move_id text not null,
  stream text not null,
  since timestamptz not null default now(),
  primary key (move_id, stream)
);
-- Which start this is: a comparison's own token, so a late start by a superseded delivery is seen.
alter table shardctl.move_delta_since add column if not exists token text;
create table if not exists shardctl.move_delta (
  move_id text not null,
  stream text not null,
  tbl text not null,
  key text not null,
  primary key (move_id, stream, tbl, key)
);

create table if not exists shardctl.settings (
  key text primary key,
  value text not null
);

-- Refuses (raises) unless this transaction may write rows of unit p_row_unit at its epoch.
-- The fence triggers inline the same check (writeCheckPlpgsql); this is for other callers.
create or replace function shardctl.assert_writable(p_row_unit text) returns void
language plpgsql volatile ${PINNED_SEARCH_PATH} as $fn$
declare
${WRITE_CHECK_DECLARE}
begin
${writeCheckPlpgsql('p_row_unit')}
end
$fn$;

-- Reads check ownership too, so a stale router never serves a moved tenant's old copy.
create or replace function shardctl.assert_readable(p_unit text, p_epoch bigint) returns void
language plpgsql volatile ${PINNED_SEARCH_PATH} as $fn$
declare f record;
begin
  select epoch, owned into f from shardctl.fence where unit operator(pg_catalog.=) p_unit;
  if not found or not f.owned or f.epoch <> p_epoch then
    raise exception 'shardctl: stale route for unit % at epoch %', p_unit, p_epoch using errcode = 'SC421';
  end if;
end
$fn$;
${routingHashSql()}`;
}

/**
 * The routing hash, byte for byte the one of lib/buckets/hash.ts (spec: docs/architecture.md,
 * "Buckets"). IMMUTABLE, so a generated bucket column, an index or a move's filter can use it;
 * what these functions return must never change, or every stored bucket disagrees with the router.
 * `convert_to(key, 'UTF8')` is the key's UTF-8 bytes whatever the database encoding (declared
 * STABLE only because conversions are catalog objects; this one is built in). The first 8 bytes
 * of the digest, as hex through bit(64), give the two's-complement int8, lifted to the unsigned
 * value in numeric (0 .. 2^64-1, exact).
 */
function routingHashSql(): string {
  return `
create or replace function shardctl.stable_hash(p_key text) returns numeric
language sql immutable strict parallel safe ${PINNED_SEARCH_PATH} as $fn$
  select case when h.s < 0 then h.s::pg_catalog.numeric + 18446744073709551616 else h.s::pg_catalog.numeric end
    from (select ('x' || pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(pg_catalog.convert_to(p_key, 'UTF8')), 1, 8), 'hex'))::pg_catalog.bit(64)::pg_catalog.int8 as s) h
$fn$;

create or replace function shardctl.bucket_of(p_key text, p_buckets integer) returns integer
language plpgsql immutable strict parallel safe ${PINNED_SEARCH_PATH} as $fn$
begin
  if p_buckets < 1 or p_buckets > ${MAX_BUCKETS} then
    raise exception 'shardctl: a bucket count is an integer from 1 to ${MAX_BUCKETS}, got %', p_buckets using errcode = '22023';
  end if;
  return (shardctl.stable_hash(p_key) operator(pg_catalog.%) p_buckets)::integer;
end
$fn$;
`;
}

/** The trigger function for tables whose tenant column is `column` (one function per name). */
export function fenceTriggerFunctionSql(column: string): { name: string; sql: string } {
  const safe = column.replace(/[^a-z0-9_]/gi, '_').toLowerCase();
  const name = `shardctl.fence_check_${safe}`;
  const col = `"${column.replace(/"/g, '""')}"`;
  // The common case (the row's unit is unchanged) runs the check inline: a nested function
  // call per row costs about as much as the check itself. A tenant change checks the old unit
  // first, exactly as two calls of assert_writable would.
  const sql = `
create or replace function ${name}() returns trigger
language plpgsql volatile ${PINNED_SEARCH_PATH} as $fn$
declare
  v_row_unit text;
${WRITE_CHECK_DECLARE}
begin
  if tg_op = 'DELETE' then
    v_row_unit := old.${col}::text;
  else
    if tg_op = 'UPDATE' and old.${col} is distinct from new.${col} then
      perform shardctl.assert_writable(old.${col}::text);
    end if;
    v_row_unit := new.${col}::text;
  end if;
${writeCheckPlpgsql('v_row_unit')}
  if tg_op = 'DELETE' then
    return old;
  end if;
  return new;
end
$fn$;`;
  return { name, sql };
}

const WRITE_CHECK_DECLARE = `  v_unit text := pg_catalog.current_setting('shardctl.unit', true);
  v_epoch_txt text := pg_catalog.current_setting('shardctl.epoch', true);
  v_epoch bigint;
  v_locked boolean;
  f record;`;

/**
 * The write check, as plpgsql statements over `rowUnit` (a text expression): raises SC428 /
 * SC403 / SC421 / SC423 or falls through. The shared lock is taken by an assignment (plpgsql
 * evaluates it as a simple expression, without a full executor run as PERFORM would); it comes
 * before the fence read so that, in read committed, the read's fresh snapshot sees any fence
 * change that committed while we waited.
 */
function writeCheckPlpgsql(rowUnit: string): string {
  return `
  if v_epoch_txt is null or v_epoch_txt = '' or v_unit is null or v_unit = '' then
    if not exists (select 1 from shardctl.settings where key = 'allow_unfenced_writes' and value = 'true') then
      raise exception 'shardctl: write to unit % carries no epoch (fail closed)', ${rowUnit}
        using errcode = 'SC428', hint = 'write through the shardctl router, which sets shardctl.unit and shardctl.epoch';
    end if;
  else
    if ${rowUnit} is distinct from v_unit then
      raise exception 'shardctl: row of unit % written in a transaction opened for unit %', ${rowUnit}, v_unit
        using errcode = 'SC403';
    end if;
    v_epoch := v_epoch_txt::bigint;
    v_locked := pg_catalog.pg_advisory_xact_lock_shared(${FENCE_LOCK_CLASS}, pg_catalog.hashtext(v_unit)) is null;
    if pg_catalog.current_setting('transaction_isolation') = 'read committed' then
      select epoch, owned, frozen into f from shardctl.fence where unit = v_unit;
    else
      -- Fails with 40001 if the fence row changed after this transaction's snapshot.
      select epoch, owned, frozen into f from shardctl.fence where unit = v_unit for share;
    end if;
    if not found or not f.owned or f.epoch <> v_epoch then
      raise exception 'shardctl: stale route for unit % at epoch % (shard has %)', v_unit, v_epoch,
        case when not found then 'no fence' when not f.owned then 'no ownership' else 'epoch ' || f.epoch end
        using errcode = 'SC421';
    end if;
    if f.frozen then
      raise exception 'shardctl: unit % is frozen for cutover', v_unit using errcode = 'SC423';
    end if;
  end if;`;
}

export async function installShardSchema(client: PoolClient): Promise<void> {
  await client.query(shardSchemaSql());
}
