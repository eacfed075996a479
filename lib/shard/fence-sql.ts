// The shard's write gate (DESIGN.md §3) as SQL: checked once per transaction, never per row, so a
// write pays a few per cent for it. Installed by `shards prepare` (lib/shard/prepare.ts).
// With config `fence.library`, open_unit_write and checked_unit() are the C twins of
// native/shardctl_fence.c instead, whose mark is the backend's own memory (no proof below
// applies to it; docs/architecture.md, "Shard fence"); everything else here is shared.
//
// Protocol:
//  - The router opens a write transaction with `begin; call shardctl.open_unit_write(unit,
//    epoch)` (one round trip). That procedure sets `shardctl.unit` / `shardctl.epoch`, takes the
//    unit's advisory lock shared for the rest of the transaction, reads the fence row, refuses
//    with SC421 / SC423 / SC428, and marks the transaction checked for the unit
//    (`shardctl.checked`, transaction-local). A CALL, not a SELECT: a SELECT of the same check
//    is parsed, planned and answered with a row, which cost the shard about 30 µs and the router
//    about 25 µs more per transaction here (BENCHMARKS.md, "Where the router's time goes").
//    `shardctl.begin_unit_write(unit, epoch)` is the same body as a function, kept for routers of
//    the previous release (`select shardctl.begin_unit_write(...)`), so shards can be prepared
//    before routers are upgraded; a router meeting a shard without the procedure fails closed
//    and says to run `shards prepare`.
//  - Every tenant table carries two AFTER ROW triggers whose WHEN clauses compare the row's
//    tenant column with `shardctl.checked_unit()`: new rows (INSERT, UPDATE, COPY) and old rows
//    (UPDATE, DELETE). A row of another unit fires the trigger, which refuses with SC403.
//  - checked_unit() is declared IMMUTABLE on purpose: the executor folds it to a constant once
//    per statement, when it prepares a WHEN clause for the statement's first row, so a row pays
//    one text comparison evaluated in C. Folding calls it: in a transaction marked checked (the
//    mark proven, below) it returns the checked unit; otherwise (a writer outside the router, who set unit and epoch with
//    set_config, or nothing) it runs the same check as begin_unit_write and marks the transaction,
//    or fails closed (SC428). A statement that changes no row checks nothing and changes nothing.
//    Trigger WHEN clauses are never planned, so no cached plan keeps a folded value; never call
//    checked_unit() anywhere else (a query or plpgsql expression would cache one statement's unit
//    and skip the check for the next ones).
//  - A transaction writes the one unit it was checked for: rows of another unit are refused even
//    if it changes `shardctl.unit` afterwards, and a changed epoch is not consulted again (the
//    check it passed holds the unit's lock until it ends).
//  - Read committed: the fence is read by a statement of its own after the lock, with a fresh
//    snapshot, so it sees any fence that committed while we waited. Repeatable read and
//    serializable: read FOR SHARE, which fails with 40001 if the fence changed after the
//    transaction's snapshot (taken by its first statement, before the lock wait).
//  - The read is skipped (read committed only) when the session's last check, its proof still
//    standing, passed for the same unit at the same epoch under the fence generation read now
//    (shardctl.fence_gen, after the lock): every change of a fence row advances the generation
//    (a trigger, enabled always) after taking the unit's lock exclusively, so no fence row has
//    changed since that check, and a change in progress is seen whole or not at all.
//  - A freeze is a lease: it refuses writes only while `frozen_until` (set by the freeze on this
//    server's clock) is in the future, or when it is NULL (a pinned freeze, which never expires).
//    The check compares with now(), the writer's transaction start, which is never later than
//    the clock a pin reads under the exclusive lock: a writer that passes on an expired lease
//    started after any pin of that lease could have succeeded (docs/architecture.md, "Freeze lease").
//  - Fence changes take the lock exclusively (setUnitFence): they wait for every in-flight
//    writer of the unit; a writer checked before a fence change holds the lock until it ends.
//  - The move's own data-plane sessions (copy, change apply, cancel/retire clean-up) run with
//    session_replication_role = replica: the triggers do not fire, whatever units they write.
//  - The mark cannot be forged. `shardctl.checked` is a setting any client can set, so it counts
//    only with its proof: the check that marks the transaction also sets the session's value of
//    `shardctl.write_mark` (an unlogged sequence that only its owner may set: writers may read
//    it, not advance it) to the unit's 64-bit hash seeded by what the check saw
//    (`shardctl.fence_seen`: this transaction's start, binary as hex, the fence generation, the
//    epoch); checked_unit() trusts the mark only if what the check saw begins with this
//    transaction's start, currval() still equals that hash, and (the unit's lock taken again:
//    a savepoint rolled back releases it and keeps the proof) the fence generation is unchanged.
//    The functions that set the proof run as the owner (SECURITY DEFINER), which is also why a
//    writer needs no privilege on the fence for the check. A mark set by hand, or kept from an
//    earlier transaction of the session, fails the proof, and the statement runs the whole check
//    instead (test/integration/fence-suite.ts, "the check's mark cannot be forged"). A forger would
//    need, in its own transaction, a 64-bit match between the hashes of two unit names under a
//    seed it does not choose (beginning with the transaction's start, to the microsecond), or
//    between two seeds for one name (a replay, or what a check saw rewritten to another epoch or
//    generation): one chance in 2^64 per transaction (the currval it may read is the
//    hash of the unit it was checked for, which it could compute). The hash is not a cryptographic digest
//    (SHA-256 until this version cost two OpenSSL contexts per transaction); the mark guards
//    against writers that skip the router, whose every attempt costs a transaction.
//    The functions pin their search_path, except the two on every write transaction's path:
//    checked_unit() and open_unit_write() (and its twin begin_unit_write()). A pinned path costs
//    a function about 5 µs on PostgreSQL 15 (set, and the namespace path recomputed, on entry and
//    again on exit), so these name every function, operator and type by schema instead (tables
//    too: `pg_temp` is searched first for unqualified tables and types, never for functions or
//    operators), and are tested against a caller whose search_path shadows what they use.
//    checked_unit() runs as the caller (nothing it does needs privilege). The triggers' WHEN
//    clauses name every function and operator by schema (they are stored resolved).
//  - Cost, measured on this repo's 2-core machine (`npm run bench`, its fence rows): the check
//    about 10 µs of server CPU (2 of them the pinned search_path, 6 the fence read), the fold about 5 µs
//    per write statement, a row about 1 %. Small transactions feel the two plpgsql entries;
//    statements of many rows barely notice. Per part, as shard CPU of a 1-row transaction
//    (BENCHMARKS.md, "Where the fence's time goes"): about 31 µs in all with this proof, of which
//    setval and currval of the proof, the fence read, the statement's fold and the lock a few µs each;
//    the fence read, the largest, is now skipped by a session's repeated check of one unit.
//  - Writers need USAGE on schema shardctl; the checks run as the schema's owner (blob writers'
//    assert_writable too, so a writer needs no UPDATE on shardctl.fence for its FOR SHARE: an
//    UPDATE of a fence row, of any column, takes the unit's lock exclusively through the
//    generation trigger, which would let a writer hold any unit's writers up). Readers'
//    assert_readable runs as the caller: SELECT on shardctl.fence and shardctl.settings.

import { createHash } from 'node:crypto';
import { splitIndexSql } from './split-sql';

export const FENCE_LOCK_CLASS = 421;

/**
 * Whether a fence row's freeze still refuses writes, as SQL over its columns: the route check's
 * rule (a lease not yet run out, or a freeze without one). Every reader of "frozen" uses it.
 */
export const FROZEN_NOW_SQL = '(frozen and (frozen_until is null or frozen_until > pg_catalog.now()))';

/**
 * Every shardctl function runs with this search_path, whatever the caller's: a role with CREATE
 * on some schema early in its own path could otherwise shadow `current_setting`, `hashtext` or
 * an operator and pass the fence under a stale epoch. Calls are schema-qualified as well.
 */
export const PINNED_SEARCH_PATH = 'set search_path = pg_catalog, pg_temp';

/** The sequence whose session value (currval) proves the transaction's mark: unlogged, set by its owner only. */
export const WRITE_MARK_SEQUENCE = 'shardctl.write_mark';
/** Set for the session by the first proof it holds, so a forged mark on a session without one is checked, not a currval error. */
const PROOF_SETTING = 'shardctl.session_proof';
/**
 * The fence's generation on this shard: advanced by every change of a shardctl.fence row (its
 * trigger, under that unit's lock held exclusively), so a session whose last check saw this
 * generation knows no fence row has changed since.
 */
export const FENCE_GEN_SEQUENCE = 'shardctl.fence_gen';
/**
 * What the session's last check saw, for the session (`<start of its transaction, hex>:<fence
 * generation>:<epoch>`): hashed into the proof, so only the check that set the proof can have
 * written it; a later check of the same unit at that epoch and generation skips the fence read.
 */
export const FENCE_SEEN_SETTING = 'shardctl.fence_seen';
/** The start of this transaction as hex (its binary form, so no setting of the session changes it). */
const TX_START_HEX = `pg_catalog.encode(pg_catalog.timestamptz_send(pg_catalog.now()), 'hex')`;

/**
 * The proof of a check for `unit`, as SQL (every name schema-qualified: it runs in
 * checked_unit(), which has no pinned path): the unit's 64-bit hash seeded with the hash of
 * `seen`, what that check saw (FENCE_SEEN_SETTING: the transaction's start, the fence generation,
 * the epoch). It proves the transaction's mark only together with `seen` beginning with this
 * transaction's start (markProvenSql). Not SHA-256 any more: its two evaluations per transaction
 * (the check and the first statement's fold, each creating its OpenSSL context) cost the shard
 * about 13 µs of a 1-row transaction's ~40 µs of fence (BENCHMARKS.md, "Where the fence's time goes").
 */
export function proofSql(unit: string, seen: string): string {
  return `pg_catalog.hashtextextended(${unit}, pg_catalog.hashtextextended(${seen}, 0))`;
}

/** Whether `seen` (a plpgsql expression) was written in this transaction: it begins with the transaction's start. */
function seenThisTransactionSql(seen: string): string {
  return `pg_catalog.starts_with(${seen}, ${TX_START_HEX} operator(pg_catalog.||) ':')`;
}

/**
 * Marks this transaction checked for `unit` at `epoch` (plpgsql statements; the caller declared
 * v_set, v_seen, v_gen and v_proof, and read v_gen before the fence): what the check saw first,
 * then the proof over it.
 */
function markCheckedPlpgsql(unit: string, epoch: string, native: boolean): string {
  // The native fence keeps the mark in the backend's memory, where only its own functions reach.
  if (native) {
    return `  perform shardctl.native_mark(${unit});
  v_set := pg_catalog.set_config('shardctl.checked', ${unit}, true);`;
  }
  return `  v_seen := ${TX_START_HEX} operator(pg_catalog.||) ':' operator(pg_catalog.||) v_gen::pg_catalog.text
    operator(pg_catalog.||) ':' operator(pg_catalog.||) (${epoch})::pg_catalog.text;
  v_set := pg_catalog.set_config('${FENCE_SEEN_SETTING}', v_seen, false);
  v_proof := pg_catalog.setval('${WRITE_MARK_SEQUENCE}'::pg_catalog.regclass, ${proofSql(unit, 'v_seen')});
  v_set := pg_catalog.set_config('${PROOF_SETTING}', 'on', false);
  v_set := pg_catalog.set_config('shardctl.checked', ${unit}, true);`;
}

/** The trigger on new rows (the one operators see; `shards list` and the cutover check both). */
export const FENCE_TRIGGER_NAME = 'shardctl_fence';
/** The trigger on old rows (UPDATE, DELETE). */
export const FENCE_OLD_ROWS_TRIGGER = 'shardctl_fence_old_rows';
/** The trigger on shardctl.fence that advances the fence's generation. */
export const FENCE_GEN_TRIGGER = 'shardctl_fence_gen';

/** The fence's functions (schema `shardctl`); part of shardSchemaSql. */
export function fenceFunctionsSql(opts: { library?: string } = {}): string {
  const native = opts.library !== undefined;
  return `
-- The mark's proof (lib/shard/fence-sql.ts): the session's currval of write_mark, which only the
-- owner sets (setval); writers may read it, which tells them nothing they could not compute.
create unlogged sequence if not exists ${WRITE_MARK_SEQUENCE} minvalue -9223372036854775808 maxvalue 9223372036854775807;
revoke all on sequence ${WRITE_MARK_SEQUENCE} from public;
grant select on sequence ${WRITE_MARK_SEQUENCE} to public;

-- The fence's generation (FENCE_GEN_SEQUENCE): advanced by every change of a fence row, under the
-- unit's lock held exclusively, whoever makes it (shardctl, an operator's psql, a replica-role
-- session: the trigger fires always). Read by the check as its owner.
create sequence if not exists ${FENCE_GEN_SEQUENCE};
revoke all on sequence ${FENCE_GEN_SEQUENCE} from public;
-- Readable by writers (a counter that tells them nothing): assert_writable runs the route check as its caller.
grant select on sequence ${FENCE_GEN_SEQUENCE} to public;
create or replace function shardctl.fence_changed() returns trigger
language plpgsql volatile security definer ${PINNED_SEARCH_PATH} as $fn$
begin
  -- The unit's lock, exclusively, before the generation moves: a check holding it shared has read
  -- the generation and the fence before this change, and one that takes it after this commits
  -- sees both changed. Already held by every change shardctl makes (setUnitFence).
  -- (OLD is null in an INSERT's trigger, NEW in a DELETE's.)
  if tg_op operator(pg_catalog.<>) 'TRUNCATE' then
    perform pg_catalog.pg_advisory_xact_lock(${FENCE_LOCK_CLASS}, pg_catalog.hashtext(u.unit)) from (select old.unit union select new.unit) u(unit) where u.unit is not null;
  end if;
  perform pg_catalog.nextval('${FENCE_GEN_SEQUENCE}'::pg_catalog.regclass);
  return null;
end
$fn$;
do $once$ begin
  if not exists (select 1 from pg_catalog.pg_trigger where tgrelid = 'shardctl.fence'::regclass and tgname = '${FENCE_GEN_TRIGGER}') then
    create trigger ${FENCE_GEN_TRIGGER} after insert or update or delete on shardctl.fence
      for each row execute function shardctl.fence_changed();
    create trigger ${FENCE_GEN_TRIGGER}_truncate after truncate on shardctl.fence
      for each statement execute function shardctl.fence_changed();
    alter table shardctl.fence enable always trigger ${FENCE_GEN_TRIGGER};
    alter table shardctl.fence enable always trigger ${FENCE_GEN_TRIGGER}_truncate;
  end if;
end $once$;

-- The router's first statement of a write transaction, as a procedure: a CALL is not planned and
-- answers no row, so it costs the shard and the router less than the same check in a SELECT.
${native ? nativeDeclarationsSql(opts.library!) : ''}
create or replace procedure shardctl.open_unit_write(p_unit text, p_epoch bigint)
${
  native
    ? `language c security definer as ${quoteLiteral(opts.library!)}, 'shardctl_open_unit_write';`
    : `language plpgsql security definer as $fn$
${beginUnitWriteBody(false)}
$fn$;`
}

-- The same check as a function, for routers of the previous release (they open with
-- "select shardctl.begin_unit_write(...)") and for tests: one body, so the two cannot drift.
create or replace function shardctl.begin_unit_write(p_unit text, p_epoch bigint) returns void
language plpgsql volatile security definer as $fn$
${beginUnitWriteBody(native)}
$fn$;

-- The unit this statement may write rows of, checked: only for the fence triggers' WHEN
-- clauses, which fold it once per statement (lib/shard/fence-sql.ts). NULL: unfenced writes allowed.
${
  native
    ? `create or replace function shardctl.checked_unit() returns pg_catalog.text
language c immutable as ${quoteLiteral(opts.library!)}, 'shardctl_checked_unit';`
    : `create or replace function shardctl.checked_unit() returns pg_catalog.text
language plpgsql immutable as $fn$
declare
  v_unit pg_catalog.text := pg_catalog.current_setting('shardctl.checked', true);
  v_seen pg_catalog.text := pg_catalog.current_setting('${FENCE_SEEN_SETTING}', true);
begin
  -- The mark counts only with its proof, over what a check of this transaction saw: a mark set by
  -- hand, or left by an earlier transaction, is checked.
  -- (Nested: an AND does not stop at a NULL, and currval() fails in a session that never set it.)
  if v_unit operator(pg_catalog.<>) '' and pg_catalog.current_setting('${PROOF_SETTING}', true) operator(pg_catalog.=) 'on'
      and ${seenThisTransactionSql('v_seen')} then
    if pg_catalog.currval('${WRITE_MARK_SEQUENCE}'::pg_catalog.regclass) operator(pg_catalog.=) ${proofSql('v_unit', 'v_seen')} then
      -- The check's lock is still this transaction's (taken again: nothing when it is held, as it
      -- is unless the check was rolled back to a savepoint, which releases the lock and leaves the
      -- proof), and no fence row has changed since the check (read after the lock): else the whole
      -- check runs again, so a proof without its lock cannot outlive a fence change.
      if pg_catalog.pg_advisory_xact_lock_shared(${FENCE_LOCK_CLASS}, pg_catalog.hashtext(v_unit)) is not null
          and pg_catalog.split_part(v_seen, ':', 2) operator(pg_catalog.=)
            coalesce(pg_catalog.pg_sequence_last_value('${FENCE_GEN_SEQUENCE}'::pg_catalog.regclass), 0)::pg_catalog.text then
        return v_unit;
      end if;
    end if;
  end if;
  -- A non-volatile function's queries run on its caller's snapshot (and may not lock rows): the
  -- check runs in a volatile function of its own, whose fence read takes a fresh snapshot.
  return shardctl.check_unrouted_write();
end
$fn$;`
}

-- The ways of split sub-unit p_unit (0: p_unit is no sub-unit), for the WHEN clauses of tables
-- with a split column, called only as split_ways_of(checked_unit()): both fold to constants once
-- per statement. The unit is an argument, never read here from checked_unit(): a plpgsql
-- expression would fold that once per session and keep the first statement's unit. Read from the
-- sub-unit's own fence row (set by \`tenant split\`, never changed), so a writer cannot choose
-- the modulus its rows are tested with. A name without ':' (a tenant) pays no read. Its path is
-- pinned like every function off the hot path: it runs twice per statement, and only on tables
-- with a split column (bench/split-fence.ts measures what a split column costs a write).
create or replace function shardctl.split_ways_of(p_unit pg_catalog.text) returns pg_catalog.int4
language plpgsql immutable ${PINNED_SEARCH_PATH} as $fn$
declare
  v_ways pg_catalog.int4;
begin
  if p_unit is null or pg_catalog.strpos(p_unit, ':') operator(pg_catalog.=) 0 then
    return 0;
  end if;
  select f.split_ways into v_ways from shardctl.fence f where f.unit operator(pg_catalog.=) p_unit;
  return coalesce(v_ways, 0);
end
$fn$;

-- checked_unit()'s check of a transaction not opened by begin_unit_write: its settings' route.
create or replace function shardctl.check_unrouted_write() returns text
language plpgsql volatile security definer ${PINNED_SEARCH_PATH} as $fn$
declare
${SETTINGS_DECLARE}
begin
${unroutedPlpgsql('v_unit', 'v_epoch_txt', 'return null;')}
${routeCheckPlpgsql('v_unit', 'v_epoch_txt::pg_catalog.int8', native)}
${markCheckedPlpgsql('v_unit', 'v_epoch_txt::pg_catalog.int8', native)}
  return v_unit;
end
$fn$;

-- The fence triggers' function: fired (by their WHEN) only for a row of another unit.
-- Arguments: the tenant column, which row ('new' or 'old'), the fence version, and on a table with
-- a split column that column: in a sub-unit's transaction a row whose split column is NULL is of
-- no sub-unit (no move would carry it), and is refused saying so.
create or replace function shardctl.refuse_row_of_unit() returns trigger
language plpgsql volatile ${PINNED_SEARCH_PATH} as $fn$
declare
  v_row jsonb := pg_catalog.to_jsonb(case when tg_argv[1] = 'old' then old else new end);
begin
  if tg_nargs > 3 and v_row ->> tg_argv[3] is null then
    raise exception 'shardctl: % of a row of tenant % whose split column %.%.% is NULL, in a transaction opened for sub-unit %: a row of a split tenant needs its split column (a NULL one is in no sub-unit, and no move would carry it)',
      pg_catalog.lower(tg_op), v_row ->> tg_argv[0], tg_table_schema, tg_table_name, tg_argv[3], pg_catalog.current_setting('shardctl.checked', true)
      using errcode = 'SC403';
  end if;
  raise exception 'shardctl: % of a row of unit % in a transaction opened for unit %', pg_catalog.lower(tg_op),
    v_row ->> tg_argv[0], pg_catalog.current_setting('shardctl.checked', true)
    using errcode = 'SC403';
end
$fn$;

-- Refuses (raises) unless this transaction may write rows of unit p_row_unit at its epoch; for
-- callers other than the tables' triggers (the same check, without marking the transaction).
create or replace function shardctl.assert_writable(p_row_unit text) returns void
language plpgsql volatile security definer ${PINNED_SEARCH_PATH} as $fn$
declare
${SETTINGS_DECLARE}
begin
${unroutedPlpgsql('v_unit', 'v_epoch_txt', 'return;')}
  if p_row_unit is distinct from v_unit then
    raise exception 'shardctl: row of unit % written in a transaction opened for unit %', p_row_unit, v_unit using errcode = 'SC403';
  end if;
${routeCheckPlpgsql('v_unit', 'v_epoch_txt::pg_catalog.int8', native)}
end
$fn$;
${native ? '' : DROP_NATIVE_SQL}
`;
}

/**
 * The native fence's own functions (native/shardctl_fence.c; `fence.library` in the config): the
 * mark, which only the owner's checks may set, and a read of it for tests and operators. Created
 * before the functions that call them; dropped by a prepare without the library.
 */
function nativeDeclarationsSql(library: string): string {
  return `create or replace function shardctl.native_mark(p_unit pg_catalog.text) returns void
language c volatile strict as ${quoteLiteral(library)}, 'shardctl_native_mark';
revoke all on function shardctl.native_mark(pg_catalog.text) from public;
create or replace function shardctl.native_marked_unit() returns pg_catalog.text
language c volatile as ${quoteLiteral(library)}, 'shardctl_native_marked_unit';`;
}

/** What a prepare without the native fence drops of it (after the plpgsql functions replaced its C ones). */
const DROP_NATIVE_SQL = `drop function if exists shardctl.native_mark(pg_catalog.text);
drop function if exists shardctl.native_marked_unit();`;

/** open_unit_write's and begin_unit_write's body: set the route, check it, mark the transaction. */
function beginUnitWriteBody(native: boolean): string {
  return `declare
${CHECK_DECLARE}
begin
  if p_unit is null or p_unit operator(pg_catalog.=) '' or p_epoch is null then
    raise exception 'shardctl: a write transaction needs a unit and an epoch, got % and %', p_unit, p_epoch using errcode = 'SC428';
  end if;
  v_set := pg_catalog.set_config('shardctl.unit', p_unit, true);
  v_set := pg_catalog.set_config('shardctl.epoch', p_epoch::pg_catalog.text, true);
${routeCheckPlpgsql('p_unit', 'p_epoch', native)}
${markCheckedPlpgsql('p_unit', 'p_epoch', native)}
end`;
}

const CHECK_DECLARE = `  v_set pg_catalog.text;
  v_proof pg_catalog.int8;
  v_locked pg_catalog.bool;
  v_gen pg_catalog.int8;
  v_seen pg_catalog.text;
  v_rc pg_catalog.bool;
  v_seen_current pg_catalog.bool;
  f record;`;

/** The route a writer outside the router set, and the check's variables. */
const SETTINGS_DECLARE = `  v_unit pg_catalog.text := pg_catalog.current_setting('shardctl.unit', true);
  v_epoch_txt pg_catalog.text := pg_catalog.current_setting('shardctl.epoch', true);
${CHECK_DECLARE}`;

/** A write without unit or epoch: refused (SC428) unless the shard allows unfenced writes (then `allowed`). */
function unroutedPlpgsql(unit: string, epochTxt: string, allowed: string): string {
  return `
  if ${epochTxt} is null or ${epochTxt} = '' or ${unit} is null or ${unit} = '' then
    if not exists (select 1 from shardctl.settings where key = 'allow_unfenced_writes' and value = 'true') then
      raise exception 'shardctl: write carries no unit and epoch (fail closed)'
        using errcode = 'SC428', hint = 'write through the shardctl router, which sets shardctl.unit and shardctl.epoch';
    end if;
    ${allowed}
  end if;`;
}

/**
 * The route check, as plpgsql statements over a unit and an epoch (expressions): takes the unit's
 * lock shared (an assignment, which plpgsql evaluates as a simple expression), reads the fence's
 * generation, then reads the fence in a statement of its own, and raises SC421 / SC423 or falls
 * through. Read committed only: when this session's last check (its proof still standing) passed
 * for this unit at this epoch under the generation read now, no fence row has changed since, so
 * the fence read is skipped (it was most of the check's cost: BENCHMARKS.md, "Where the fence's
 * time goes"). A fence change advances the generation under the unit's lock held exclusively,
 * which waits for this check's shared one: read under the shared lock, the generation and the
 * fence are both from before the change or both from after its commit. Repeatable read and
 * serializable always read (FOR SHARE: the snapshot may be older than a fence change).
 */
function routeCheckPlpgsql(unit: string, epoch: string, native: boolean): string {
  // The native fence's plpgsql checks (writers outside the router, routers of the previous
  // release) always read: the session's repeated check is skipped by its C procedure only.
  const seenCurrent = native
    ? `  v_seen_current := false;`
    : `  v_seen := pg_catalog.current_setting('${FENCE_SEEN_SETTING}', true);
  -- A CASE, so currval() runs only in a session that holds a proof (it fails in one that never set it).
  v_seen_current := case
    when v_rc and coalesce(pg_catalog.split_part(v_seen, ':', 2) operator(pg_catalog.=) v_gen::pg_catalog.text
        and pg_catalog.split_part(v_seen, ':', 3) operator(pg_catalog.=) (${epoch})::pg_catalog.text
        and pg_catalog.current_setting('${PROOF_SETTING}', true) operator(pg_catalog.=) 'on', false)
      then pg_catalog.currval('${WRITE_MARK_SEQUENCE}'::pg_catalog.regclass) operator(pg_catalog.=) ${proofSql(unit, 'v_seen')}
    else false end;`;
  return `
  v_locked := pg_catalog.pg_advisory_xact_lock_shared(${FENCE_LOCK_CLASS}, pg_catalog.hashtext(${unit})) is null;
  v_gen := coalesce(pg_catalog.pg_sequence_last_value('${FENCE_GEN_SEQUENCE}'::pg_catalog.regclass), 0);
  v_rc := pg_catalog.current_setting('transaction_isolation') operator(pg_catalog.=) 'read committed';
${seenCurrent}
  if v_seen_current is not true then
    if v_rc then
      select epoch, owned, frozen, frozen_until into f from shardctl.fence where unit operator(pg_catalog.=) ${unit};
    else
      -- Fails with 40001 if the fence row changed after this transaction's snapshot.
      select epoch, owned, frozen, frozen_until into f from shardctl.fence where unit operator(pg_catalog.=) ${unit} for share;
    end if;
    if not found or not f.owned or f.epoch operator(pg_catalog.<>) ${epoch} then
      raise exception 'shardctl: stale route for unit % at epoch % (shard has %)', ${unit}, ${epoch},
        case when not found then 'no fence' when not f.owned then 'no ownership' else 'epoch ' operator(pg_catalog.||) f.epoch end
        using errcode = 'SC421';
    end if;
    if f.frozen and (f.frozen_until is null or f.frozen_until operator(pg_catalog.>) pg_catalog.now()) then
      raise exception 'shardctl: unit % is frozen for cutover', ${unit} using errcode = 'SC423';
    end if;
  end if;`;
}

const quoteIdent = (ident: string) => `"${ident.replace(/"/g, '""')}"`;
const quoteLiteral = (s: string) => `'${s.replace(/'/g, "''")}'`;

/**
 * A row's unit as SQL over `new` or `old`: the tenant column itself for tenant tables; for a
 * bucketed dataset's table the unit name built from its bucket column (lib/unit-rows.ts).
 */
export type RowUnitSql = ((row: 'new' | 'old') => string) & {
  /** A tenant table's split column (splitRowUnitSql): passed to the triggers, which name it when it is NULL. */
  splitColumn?: string;
};

/**
 * A row's unit on a tenant table with a split column (docs/architecture.md, "Splitting a tenant"):
 * the tenant column in a transaction checked for a tenant; in one checked for a sub-unit `T:k` of
 * a split K ways, `<tenant>:<stable_hash(split column as text) mod K>` (lib/buckets/route.ts
 * computes the same name in Node). `split_ways_of(checked_unit())` folds to a constant once per
 * statement, so an unsplit tenant's write tests the tenant column alone. The hash is written out
 * with built-in functions instead of calling shardctl.stable_hash: that SQL function, with its
 * pinned search_path, is never inlined (one run of bench/split-fence.ts, 4 ways: a sub-unit's
 * 20,000-row insert 2.7x the fenced baseline, a 1-row transaction 2.2x; written out, in a later run,
 * 1.56x and 1.26x). The inline form is exact on the unsigned value: with q = h div 2
 * (a logical shift of the digest's first 64 bits) and b = h mod 2, h mod K = (2·(q mod K) + b) mod K.
 */
export function splitRowUnitSql(tenantColumn: string, splitColumn: string): RowUnitSql {
  const ways = 'shardctl.split_ways_of(shardctl.checked_unit())';
  // A NULL split column's index is NULL, and so would be the unit and the WHEN's test: the row
  // would pass in any sub-unit's transaction. `T:` (no index) is no sub-unit's name: refused.
  // (COALESCE is syntax, not a function: nothing on a search_path can shadow it.)
  const unitOf = (row: 'new' | 'old') => {
    const index = splitIndexSql(`${row}.${quoteIdent(splitColumn)}`, ways);
    return (
      `(case when ${ways} operator(pg_catalog.=) 0 then (${row}.${quoteIdent(tenantColumn)})::pg_catalog.text ` +
      `else (${row}.${quoteIdent(tenantColumn)})::pg_catalog.text operator(pg_catalog.||) ':' operator(pg_catalog.||) coalesce(${index}::pg_catalog.text, '') end)`
    );
  };
  return Object.assign(unitOf, { splitColumn });
}

/** The two fence triggers of one tenant table (row triggers: partitions inherit them). */
export function fenceTriggersSql(qualified: string, column: string, rowUnit?: RowUnitSql): string[] {
  return triggersSql(qualified, column, fenceVersion(rowUnit), rowUnit);
}

function triggersSql(qualified: string, column: string, version: string, rowUnit?: RowUnitSql): string[] {
  const unitOf = rowUnit ?? ((row: 'new' | 'old') => `(${row}.${quoteIdent(column)})::pg_catalog.text`);
  const trigger = (name: string, events: string, row: 'new' | 'old') =>
    `create or replace trigger ${name} after ${events} on ${qualified} for each row
      when (${unitOf(row)} operator(pg_catalog.<>) shardctl.checked_unit())
      execute function shardctl.refuse_row_of_unit(${fenceTriggerArgs(column, row, version, rowUnit).map(quoteLiteral).join(', ')})`;
  return [trigger(FENCE_TRIGGER_NAME, 'insert or update', 'new'), trigger(FENCE_OLD_ROWS_TRIGGER, 'update or delete', 'old')];
}

/** The fence triggers' arguments: tenant (or bucket) column, which row, version, and the split column when there is one. */
export function fenceTriggerArgs(column: string, row: 'new' | 'old', version: string, rowUnit?: RowUnitSql): string[] {
  return rowUnit?.splitColumn === undefined ? [column, row, version] : [column, row, version, rowUnit.splitColumn];
}

/** The version of a table's triggers (FENCE_VERSION for tenant tables; one per dataset otherwise). */
export function fenceVersion(rowUnit?: RowUnitSql): string {
  if (!rowUnit) return FENCE_VERSION;
  return createHash('sha256')
    .update(triggersSql('<table>', '<column>', '', rowUnit).join('\n'))
    .digest('hex')
    .slice(0, 16);
}

/**
 * The version of the triggers' definition, passed as their last argument: a digest of the
 * definition itself, so prepare replaces a trigger defined otherwise (an older shardctl's, or
 * one edited by hand through CREATE OR REPLACE) and leaves one that matches alone.
 */
export const FENCE_VERSION = createHash('sha256')
  .update(triggersSql('<table>', '<column>', '').join('\n'))
  .digest('hex')
  .slice(0, 16);
