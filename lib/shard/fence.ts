// Fence operations on one shard. A fence change takes the unit's advisory lock exclusively, so
// it waits for every in-flight writer of the unit and, once it returns, no write under an
// older state can still commit (writers hold the same lock shared; see schema.ts).
import type { Pool, PoolClient } from 'pg';
import { FENCE_LOCK_CLASS } from './schema';
import { FROZEN_NOW_SQL } from './fence-sql';
import { inTransaction } from '../pg';

/**
 * Prefix of the logical message a cutover's fence raise emits in its own transaction: it commits
 * after every writer of the unit (the fence waits for them), so the change stream carries every
 * change of the unit before it, and the applier stops at it instead of waiting for a keepalive.
 */
export const FENCE_MARKER_PREFIX = 'shardctl-fence';

export interface FenceState {
  unit: string;
  epoch: number;
  owned: boolean;
  /** Whether the freeze refuses writes now: set, and its lease (if any) has not run out. */
  frozen: boolean;
  /**
   * A frozen fence's lease: the instant (ISO, the shard's clock) from which it no longer refuses
   * writes. Absent on a freeze that never expires (pinned before a switch) and on an open fence.
   */
  frozenUntil?: string;
  /** Set (true) when the row is still marked frozen but its lease has run out: writes pass. */
  leaseExpired?: boolean;
  /** The highest directory generation of a cutover freeze that raised this fence (absent: none yet). */
  freezeGen?: number;
  /** The cutover attempt that froze it (absent when open or frozen without a token). */
  freezeToken?: string;
  /**
   * The directory generation of the freeze whose cutover attempt accepted this epoch here (absent
   * when accepted without one). Kept with its epoch; a new epoch starts without it.
   */
  acceptGen?: number;
}

export async function getUnitFence(db: Pool | PoolClient, unit: string): Promise<FenceState | undefined> {
  const r = await db.query(
    `select unit, epoch, owned, frozen, ${FROZEN_NOW_SQL} as frozen_now, frozen_until, freeze_token, accept_gen, freeze_gen from shardctl.fence where unit = $1`,
    [unit],
  );
  if (r.rowCount === 0) return undefined;
  const row = r.rows[0];
  const f: FenceState = {
    unit: row.unit,
    epoch: Number(row.epoch),
    owned: row.owned,
    frozen: row.frozen_now,
    freezeToken: row.freeze_token ?? undefined,
    acceptGen: row.accept_gen === null ? undefined : Number(row.accept_gen),
  };
  // Only when there is something to say, so a plain fence reads as before.
  if (row.frozen && row.frozen_until) f.frozenUntil = new Date(row.frozen_until).toISOString();
  if (row.frozen && !row.frozen_now) f.leaseExpired = true;
  if (row.freeze_gen !== null) f.freezeGen = Number(row.freeze_gen);
  return f;
}

/**
 * Sets the unit's fence; returns after commit, when every older writer has finished.
 * `expect`, when given, is a compare-and-set guard on the current fence (a mismatch returns
 * the current state without changing anything). Epochs never go down.
 */
export async function setUnitFence(
  pool: Pool,
  next: FenceState,
  opts: {
    expect?: Partial<FenceState> | 'absent';
    lockTimeoutMs?: number;
    expectTokenIn?: string[];
    /** Accepting for the attempt of this freeze generation: refused if a later one accepted this epoch. */
    acceptGen?: number;
    /** Only if this epoch's acceptance is exactly this generation's (a lost switch takes back its own). */
    onlyAcceptGen?: number;
    /** Emit this fence-point marker (FENCE_MARKER_PREFIX) in the change stream, in this transaction. */
    marker?: string;
    /** A freeze's lease: it stops refusing writes this long after it is written, on the shard's clock. */
    leaseMs?: number;
    /** Raising for the cutover freeze of this directory generation: refused if a later freeze raised it. */
    freezeGen?: number;
    /**
     * A split tenant's sub-unit: the row records its K (`split_ways`, what the fence triggers read
     * through split_ways_of) when it has none; a row's K is never changed (a split is never undone).
     */
    splitWays?: number;
  } = {},
): Promise<{ ok: boolean; current: FenceState | undefined; waitedMs: number }> {
  return inTransaction(pool, async (c) => {
    if (opts.lockTimeoutMs) await c.query(`select set_config('lock_timeout', $1, true)`, [`${opts.lockTimeoutMs}ms`]);
    const t0 = Date.now();
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [FENCE_LOCK_CLASS, next.unit]);
    const waitedMs = Date.now() - t0;
    // Under the exclusive lock: every writer of the unit committed before this transaction will.
    // A freeze's snapshot is taken before its marker (the same statement: its snapshot is taken at
    // its start): a fence-bypassing write visible in it committed before the fence point, so the
    // change stream carries it; one not visible is what retire's write audit counts.
    let freezeSnapshot: string | null = null;
    if (next.frozen) {
      const q =
        opts.marker !== undefined
          ? await c.query('select pg_catalog.pg_current_snapshot()::text as snap, pg_catalog.pg_logical_emit_message(true, $1, $2)', [
              FENCE_MARKER_PREFIX,
              opts.marker,
            ])
          : await c.query('select pg_catalog.pg_current_snapshot()::text as snap');
      freezeSnapshot = q.rows[0].snap;
    } else if (opts.marker !== undefined) {
      await c.query('select pg_catalog.pg_logical_emit_message(true, $1, $2)', [FENCE_MARKER_PREFIX, opts.marker]);
    }
    const current = await getUnitFence(c, next.unit);
    const e = opts.expect;
    const mismatch =
      (e === 'absent' ? current !== undefined : e !== undefined && (!current || Object.entries(e).some(([k, v]) => (current as any)[k] !== v))) ||
      // Only the attempt that froze it (or took its freeze over) may lower a tokened freeze.
      (opts.expectTokenIn !== undefined && current?.freezeToken !== undefined && !opts.expectTokenIn.includes(current.freezeToken)) ||
      // A later freeze's attempt already accepted this epoch (or took its acceptance back): not ours to overwrite.
      (opts.acceptGen !== undefined && current?.epoch === next.epoch && current.acceptGen !== undefined && current.acceptGen > opts.acceptGen) ||
      (opts.onlyAcceptGen !== undefined && !(current?.epoch === next.epoch && current.acceptGen === opts.onlyAcceptGen)) ||
      // A later freeze already raised this fence: a superseded attempt's late raise changes nothing.
      (opts.freezeGen !== undefined && current?.freezeGen !== undefined && current.freezeGen > opts.freezeGen);
    // Nothing written: the transaction commits empty.
    if (mismatch || (current && next.epoch < current.epoch)) return { ok: false, current, waitedMs };
    const token = next.frozen ? (next.freezeToken ?? null) : null;
    const acceptGen = opts.acceptGen ?? (current && current.epoch === next.epoch ? (current.acceptGen ?? null) : null);
    const leaseMs = next.frozen && opts.leaseMs !== undefined ? opts.leaseMs : null;
    // Already so: no write, so updated_at keeps meaning "last change" (retire's write audit
    // counts from the disown; a late, repeated disown must not move that start). A freeze with a
    // lease is always written (it starts a new lease); a row whose lease ran out is rewritten too.
    if (
      current &&
      leaseMs === null &&
      opts.freezeGen === undefined &&
      !current.leaseExpired &&
      current.frozenUntil === undefined &&
      current.epoch === next.epoch &&
      current.owned === next.owned &&
      current.frozen === next.frozen &&
      (current.freezeToken ?? null) === token &&
      (current.acceptGen ?? null) === acceptGen
    ) {
      return { ok: true, current, waitedMs };
    }
    await c.query(
      `insert into shardctl.fence(unit, epoch, owned, frozen, freeze_token, accept_gen, frozen_until, freeze_gen, freeze_snapshot, split_ways, updated_at)
       values ($1, $2, $3, $4, $5, $6, pg_catalog.clock_timestamp() + $7::bigint * interval '1 millisecond', $8, $9::pg_snapshot, $10, now())
       on conflict (unit) do update set epoch = excluded.epoch, owned = excluded.owned, frozen = excluded.frozen,
         split_ways = coalesce(shardctl.fence.split_ways, excluded.split_ways),
         freeze_token = excluded.freeze_token, accept_gen = excluded.accept_gen, frozen_until = excluded.frozen_until,
         freeze_gen = greatest(shardctl.fence.freeze_gen, excluded.freeze_gen),
         -- raised from open: this freeze's snapshot; a takeover or re-raise keeps the earlier (older) one
         freeze_snapshot = case when excluded.frozen and (not shardctl.fence.frozen or shardctl.fence.freeze_snapshot is null)
                                then excluded.freeze_snapshot else shardctl.fence.freeze_snapshot end,
         updated_at = now()`,
      [next.unit, next.epoch, next.owned, next.frozen, token, acceptGen, leaseMs, opts.freezeGen ?? null, freezeSnapshot, opts.splitWays ?? null],
    );
    return { ok: true, current: await getUnitFence(c, next.unit), waitedMs };
  });
}

// ---------------------------------------------------------------- the fence's verbs
// Product code names what it does to a fence; `setUnitFence` with flag combinations stays the
// primitive underneath (and for tests that need an arbitrary state).

/** A new unit's first owner: epoch `epoch`, owned, open; refuses if the shard already has a fence for it. */
export function installOwner(pool: Pool, unit: string, epoch: number, lockTimeoutMs = 10_000) {
  return setUnitFence(pool, { unit, epoch, owned: true, frozen: false }, { expect: 'absent', lockTimeoutMs });
}

/**
 * Freezes the owner's writes for a cutover: returns once every in-flight writer of the unit has
 * finished. With `lockTimeoutMs` a writer holding its transaction open past it fails the call
 * with SQLSTATE 55P03 instead of stretching the pause open-ended. With `leaseMs` the freeze is a
 * lease: `leaseMs` after it is written (the shard's clock), writes at the owner's epoch pass
 * again unless `pinFreeze` made it permanent first, so a worker cut off from this shard cannot
 * leave the unit frozen (DESIGN.md §5.8). Without it the freeze lasts until lowered. With `gen`
 * (the directory generation of the cutover's freeze) it is refused (`ok: false`) once a later
 * freeze raised this fence: raises are ordered as the directory ordered their freezes.
 */
export function freezeSource(
  pool: Pool,
  unit: string,
  epoch: number,
  opts: { lockTimeoutMs?: number; token?: string; marker?: string; leaseMs?: number; gen?: number } = {},
) {
  return setUnitFence(
    pool,
    { unit, epoch, owned: true, frozen: true, freezeToken: opts.token },
    { lockTimeoutMs: opts.lockTimeoutMs, marker: opts.marker, leaseMs: opts.leaseMs, freezeGen: opts.gen },
  );
}

/**
 * Right before a switch: the freeze under `token` at `epoch` stops expiring, but only while its
 * lease still runs (judged on this shard's clock under the unit's exclusive lock). A lease that
 * ran out may have let writes through since the fence point, so the switch must not happen:
 * `ok: false`. Once pinned, the lease can never reopen a source that then loses ownership (its
 * disown may not reach it); only an unfreeze or a new freeze changes it.
 */
export async function pinFreeze(pool: Pool, unit: string, epoch: number, token: string): Promise<{ ok: boolean; current: FenceState | undefined }> {
  return inTransaction(pool, async (c) => {
    await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [FENCE_LOCK_CLASS, unit]);
    // clock_timestamp(), read after the lock: later than the now() of every writer checked before it.
    const r = await c.query(
      `update shardctl.fence set frozen_until = null, updated_at = now()
        where unit = $1 and epoch = $2 and owned and frozen and freeze_token = $3
          and (frozen_until is null or frozen_until > pg_catalog.clock_timestamp())`,
      [unit, epoch, token],
    );
    return { ok: (r.rowCount ?? 0) > 0, current: await getUnitFence(c, unit) };
  });
}

/**
 * Reopens the owner's writes, only if this shard still owns the unit at `epoch` (never reopens an
 * old owner) and, when `tokens` are given, only a freeze made under one of them (never another
 * attempt's freeze). The workflow's own cancel, after its directory compare-and-set, passes none.
 */
export async function unfreeze(pool: Pool, unit: string, epoch: number, tokens?: string[], opts: { noRaiseInFlight?: boolean } = {}) {
  // `noRaiseInFlight`: the caller's last raise is known to have rolled back (it timed out on the
  // unit's lock, SQLSTATE 55P03), so no raise of its own can still commit. Then a row that is not
  // frozen needs no lowering, and taking the unit's lock for it would wait for every writer in
  // flight and hold every new write behind them: after a raise that a long writer outlasted, that
  // wait would be the very pause the raise's short lock budget avoids. Otherwise (a raise whose
  // outcome the caller does not know may commit later) the locked path queues behind it and
  // lowers it. Answers as the locked path would (open at this epoch and owned: ok; otherwise a
  // mismatch that changes nothing).
  if (opts.noRaiseInFlight) {
    const now = await getUnitFence(pool, unit);
    if (!now || !(now.frozen || now.leaseExpired)) return { ok: !!now && now.epoch === epoch && now.owned, current: now, waitedMs: 0 };
  }
  return setUnitFence(pool, { unit, epoch, owned: true, frozen: false }, { expect: { epoch, owned: true }, expectTokenIn: tokens });
}

/**
 * The new owner accepts writes at `epoch` (the switch's first half). With `gen` (the directory
 * generation of the accepting attempt's freeze), refused when an attempt of a later freeze already
 * accepted this epoch here: a superseded attempt cannot overwrite, and so later take back, the
 * acceptance of the attempt that will switch. A split tenant's sub-unit passes its K (`splitWays`):
 * the new owner's fence must know it, or it would test the sub-unit's rows as the tenant's (SC403).
 */
export function acceptEpoch(pool: Pool, unit: string, epoch: number, gen?: number, splitWays?: number) {
  return setUnitFence(pool, { unit, epoch, owned: true, frozen: false }, { acceptGen: gen, splitWays });
}

/**
 * A lost switch takes back its own acceptance of `epoch`: only if the acceptance here is still the
 * one its attempt (freeze generation `gen`) made. A later attempt's acceptance, made before or
 * after, stays: that attempt may be switching the directory to it right now.
 */
export function takeBackAcceptance(pool: Pool, unit: string, epoch: number, gen: number) {
  return setUnitFence(pool, { unit, epoch, owned: false, frozen: false }, { onlyAcceptGen: gen });
}

/** This shard no longer owns the unit: it refuses every write of it at `epoch` and below. */
export function disown(pool: Pool, unit: string, epoch: number) {
  return setUnitFence(pool, { unit, epoch, owned: false, frozen: false });
}

/** Forgets a fence row that does not own the unit (a cancelled move's target). Owned rows stay. */
export async function forgetUnownedFence(pool: Pool, unit: string): Promise<void> {
  await pool.query('delete from shardctl.fence where unit = $1 and not owned', [unit]);
}

/** Best effort: deletes a new unit's first fence only if it is still the one `installOwner` wrote. */
export async function removeFirstFence(pool: Pool, unit: string): Promise<boolean> {
  try {
    return await inTransaction(pool, async (c) => {
      await c.query('select pg_advisory_xact_lock($1, hashtext($2))', [FENCE_LOCK_CLASS, unit]);
      const r = await c.query('delete from shardctl.fence where unit = $1 and epoch = 1 and owned and not frozen', [unit]);
      return (r.rowCount ?? 0) > 0;
    });
  } catch {
    return false;
  }
}

/** The fences of `units` on this shard (absent units have none); none at all before `shards prepare`. */
export async function getUnitFences(db: Pool | PoolClient, units: string[]): Promise<Map<string, FenceState>> {
  const r = await db.query(`select to_regclass('shardctl.fence') is not null as installed`);
  const out = new Map<string, FenceState>();
  if (!r.rows[0].installed) return out;
  const f = await db.query(`select unit, epoch, owned, frozen, ${FROZEN_NOW_SQL} as frozen_now from shardctl.fence where unit = any($1::text[])`, [units]);
  for (const row of f.rows) {
    out.set(row.unit, {
      unit: row.unit,
      epoch: Number(row.epoch),
      owned: row.owned,
      frozen: row.frozen_now,
      ...(row.frozen && !row.frozen_now ? { leaseExpired: true } : {}),
    });
  }
  return out;
}

/**
 * Many new units' first owner at once (`shards adopt`): epoch 1, owned, open, in batches of
 * `batch` units per transaction, each unit's fence lock taken exclusively in unit order (two
 * batches never wait on each other in a cycle, and the lock table holds one batch at a time).
 * A unit that already has a fence is left as it is: `present` when it is exactly a first owner's
 * (an earlier run of the same adoption), `conflicting` otherwise.
 */
export async function installFirstOwners(
  pool: Pool,
  units: string[],
  opts: { batch?: number; lockTimeoutMs?: number } = {},
): Promise<{ installed: string[]; present: string[]; conflicting: FenceState[] }> {
  const out = { installed: [] as string[], present: [] as string[], conflicting: [] as FenceState[] };
  const sorted = [...new Set(units)].sort();
  const size = opts.batch ?? 500;
  for (let i = 0; i < sorted.length; i += size) {
    const part = sorted.slice(i, i + size);
    await inTransaction(pool, async (c) => {
      await c.query(`select set_config('lock_timeout', $1, true)`, [`${opts.lockTimeoutMs ?? 10_000}ms`]);
      // In lock-key order, so two adoptions (or an adoption and a tenant create) never deadlock.
      await c.query('select pg_advisory_xact_lock($1, k) from (select distinct hashtext(u) as k from unnest($2::text[]) as x(u) order by 1) s', [
        FENCE_LOCK_CLASS,
        part,
      ]);
      const ins = await c.query(
        `insert into shardctl.fence(unit, epoch, owned, frozen, updated_at)
         select u, 1, true, false, now() from unnest($1::text[]) as x(u)
         on conflict (unit) do nothing returning unit`,
        [part],
      );
      const installed = new Set<string>(ins.rows.map((r) => r.unit));
      const others = part.filter((u) => !installed.has(u));
      const now = others.length ? await getUnitFences(c, others) : new Map<string, FenceState>();
      for (const u of part) {
        if (installed.has(u)) out.installed.push(u);
        else {
          const f = now.get(u)!;
          if (f.epoch === 1 && f.owned && !f.frozen && !f.leaseExpired) out.present.push(u);
          else out.conflicting.push(f);
        }
      }
    });
  }
  return out;
}
