// The shard-side schema `shardctl`: the fence table and the fence's functions (DESIGN.md §3), and
// the move progress table that apply and copy commit together with the rows they describe.
// Installed idempotently by `shards prepare`.
//
// It also holds the routing hash (`shardctl.stable_hash`, `shardctl.bucket_of`) of bucketed
// datasets, so a shard computes a key's bucket exactly as the router does.
//
// The fence itself (functions, triggers, constraint, protocol) is in lib/shard/fence-sql.ts.
import type { PoolClient } from 'pg';
import { ShardctlError } from '../errors';
import { MAX_BUCKETS } from '../buckets/units';
import { PINNED_SEARCH_PATH, fenceFunctionsSql } from './fence-sql';
import { addColumnOnce } from './ddl-once';

export { FENCE_LOCK_CLASS, PINNED_SEARCH_PATH } from './fence-sql';

export const SHARD_SCHEMA_VERSION = 1;

/** `fenceLibrary`: the native fence's library (config `fence.library`); absent: the plpgsql fence. */
export function shardSchemaSql(opts: { fenceLibrary?: string } = {}): string {
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
${addColumnOnce('shardctl.fence', 'freeze_token', 'text')}
-- The cutover attempt whose acceptance this is, as the directory generation of its freeze: a
-- superseded attempt can neither overwrite a later attempt's acceptance nor take it back.
${addColumnOnce('shardctl.fence', 'accept_gen', 'bigint')}
-- A cutover's freeze is a lease (lib/shard/fence.ts freezeSource): past frozen_until, on this
-- server's own clock, the freeze no longer refuses writes. NULL with frozen: a freeze that never
-- expires (pinned right before a switch, or written by an older shardctl).
${addColumnOnce('shardctl.fence', 'frozen_until', 'timestamptz')}
-- The highest directory generation of a cutover freeze that raised this fence (kept by every later
-- change): a superseded attempt's late raise is refused, so it cannot replace a later attempt's
-- pinned freeze with a lease that would run out after that attempt's switch.
${addColumnOnce('shardctl.fence', 'freeze_gen', 'bigint')}
-- The snapshot of the freeze that last raised this fence from open (taken before its fence
-- marker): a write that bypassed the fence and is not visible in it may have committed after the
-- fence point, so the change stream may not have carried it. Retire counts the write audit by it
-- (by commit, not by when the writer began).
${addColumnOnce('shardctl.fence', 'freeze_snapshot', 'pg_snapshot')}
-- A split sub-unit's ways (\`tenant split T --ways K\` installs T:0 .. T:K-1 with K): the modulus
-- its rows' unit is computed with (shardctl.checked_ways()). NULL for tenants and buckets.
${addColumnOnce('shardctl.fence', 'split_ways', 'integer check (split_ways is null or split_ways >= 2)')}

-- shardctl's own data-plane sessions (copy, apply, clean-up): registered by the session itself
-- (shardctl.enter_data_plane) by process id and start time, so a session that merely calls itself
-- shardctl (application_name, a setting any client controls) is refused by the guard below
-- instead of escaping the write audit (lib/shard/write-audit.ts).
create table if not exists shardctl.data_plane_sessions (
  pid integer primary key,
  backend_start timestamptz not null
);
revoke all on shardctl.data_plane_sessions from public;
create or replace function shardctl.enter_data_plane() returns void
language plpgsql volatile ${PINNED_SEARCH_PATH} as $fn$
declare v_start timestamptz;
begin
  select s.backend_start into v_start from pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) s;
  if not exists (select 1 from shardctl.data_plane_sessions d
                  where d.pid operator(pg_catalog.=) pg_catalog.pg_backend_pid() and d.backend_start operator(pg_catalog.=) v_start) then
    insert into shardctl.data_plane_sessions(pid, backend_start) values (pg_catalog.pg_backend_pid(), v_start)
      on conflict (pid) do update set backend_start = excluded.backend_start;
  end if;
end
$fn$;
-- BEFORE each statement of a replica-role session named shardctl… on a tenant table: refused
-- unless the session registered itself (nothing is written before the refusal).
create or replace function shardctl.data_plane_guard() returns trigger
language plpgsql volatile ${PINNED_SEARCH_PATH} as $fn$
begin
  if not exists (select 1 from shardctl.data_plane_sessions d
                  where d.pid operator(pg_catalog.=) pg_catalog.pg_backend_pid()
                    and d.backend_start operator(pg_catalog.=) (select s.backend_start from pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) s)) then
    raise exception 'shardctl: application_name "%" is reserved for shardctl''s own data-plane sessions, and this session is not one', pg_catalog.current_setting('application_name')
      using errcode = 'SC403', hint = 'name the session after the tool that really writes (its writes to units this shard does not own are then audited)';
  end if;
  return null;
end
$fn$;

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
${addColumnOnce('shardctl.move_delta_since', 'token', 'text')}
-- The start's snapshot: a fence-bypassing write on the target not visible in it is new (by commit).
${addColumnOnce('shardctl.move_delta_since', 'since_snapshot', 'pg_snapshot')}
-- The key ranges a validation found equal under this start (its name, per table): a retried
-- validation of the same name resumes from them (lib/cdc/delta.ts, saveValidated). A restart clears it.
${addColumnOnce('shardctl.move_delta_since', 'validated', 'jsonb')}
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

${fenceFunctionsSql({ library: opts.fenceLibrary })}
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

export async function installShardSchema(client: PoolClient, opts: { fenceLibrary?: string } = {}): Promise<void> {
  try {
    await client.query(shardSchemaSql(opts));
  } catch (e) {
    throw nativeFenceFailure(e, opts.fenceLibrary);
  }
}

/**
 * A prepare that names the native fence and cannot install it, said as such: the library missing
 * or built for another server (58P01, XX000 "incompatible library"), or a role that may not create
 * C functions (42501: only a superuser may). Anything else is returned as it is.
 */
export function nativeFenceFailure(err: unknown, library: string | undefined): unknown {
  const e = err as { code?: unknown; message?: unknown };
  if (library === undefined) return err;
  const msg = String(e?.message ?? err);
  const cannotLoad = e?.code === '58P01' || (e?.code === 'XX000' && /library/.test(msg)) || (e?.code === '42501' && /language c\b/i.test(msg));
  if (!cannotLoad) return err;
  return new ShardctlError(
    'PreconditionFailed',
    `the native fence (fence.library ${library}) cannot be installed on this shard: ${msg}. ` +
      'Build it for this server (scripts/build-native-fence.sh with its pg_config), put it where the server can read it, and prepare as a role that may create C functions (a superuser); ' +
      'or remove fence.library to keep the plpgsql fence. Nothing was changed.',
    { library },
  );
}
