// Placement records (unit -> shard, epoch, state) and the only ways they change: an insert of a
// new unit and a compare-and-set on (shard, epoch, state). Each change is one transaction that
// bumps the generation, appends an audit row and NOTIFYs routers. A lost race is an answer
// (the current record), never a retry. Epoch rises by exactly one iff the shard changes.
import type { Pool, PoolClient } from 'pg';
import { ShardctlError, invalidInput } from '../errors';
import { Queryable, onDirectory, poolDsn, inDirectoryTransaction } from './db';
import { shardLoad } from './shards';
import { headroomAfter, usableCapacity } from './choose';

export type PlacementState = 'active' | 'moving';
export type UnitKind = 'tenant' | 'bucket';

export interface Placement {
  unit: string;
  kind: UnitKind;
  shard: string;
  epoch: number;
  state: PlacementState;
  moveId: string | null;
  /** The token of the cutover attempt that froze the unit (state moving); absent otherwise. */
  freezeToken?: string;
  /** Moving: the instant (directory clock, ISO) after which this freeze can no longer switch. */
  switchDeadline?: string;
  expectedLoad: number;
  /** ISO timestamp of the last change. */
  updatedAt: string;
}

/** Payload of NOTIFY on PLACEMENT_CHANNEL (docs/architecture.md). */
export interface PlacementNotification {
  unit: string;
  shard: string;
  epoch: number;
  state: PlacementState;
  generation: number;
}

export const PLACEMENT_CHANNEL = 'shardctl_placement';

export interface AuditEntry {
  actor: string;
  action: string;
  reason?: string;
  detail?: Record<string, unknown>;
}

export type CasResult = { ok: true; placement: Placement; generation: number } | { ok: false; type: 'conflict'; current: Placement | undefined };

export type InsertResult = { ok: true; placement: Placement; generation: number } | { ok: false; type: 'exists'; current: Placement };

const COLUMNS = 'unit, kind, shard, epoch, state, move_id, freeze_token, switch_deadline, expected_load, updated_at';

export function rowToPlacement(r: any): Placement {
  return {
    unit: r.unit,
    kind: r.kind,
    shard: r.shard,
    epoch: Number(r.epoch),
    state: r.state,
    moveId: r.move_id ?? null,
    freezeToken: r.freeze_token ?? undefined,
    ...(r.switch_deadline ? { switchDeadline: new Date(r.switch_deadline).toISOString() } : {}),
    expectedLoad: Number(r.expected_load),
    updatedAt: r.updated_at instanceof Date ? r.updated_at.toISOString() : String(r.updated_at),
  };
}

export async function getPlacement(db: Queryable, unit: string): Promise<Placement | undefined> {
  return onDirectory(async () => {
    const r = await db.query(`select ${COLUMNS} from shardctl.units where unit = $1`, [unit]);
    return r.rowCount ? rowToPlacement(r.rows[0]) : undefined;
  }, poolDsn(db));
}

export async function getGeneration(db: Queryable): Promise<number> {
  return onDirectory(async () => Number((await db.query('select value from shardctl.generation')).rows[0].value), poolDsn(db));
}

/** Every placement and the generation they belong to, read in one statement (one snapshot). */
export async function listPlacements(db: Queryable, opts: { kind?: UnitKind } = {}): Promise<{ generation: number; placements: Placement[] }> {
  return onDirectory(async () => {
    const r = await db.query(
      `select g.value as generation, u.unit, u.kind, u.shard, u.epoch, u.state, u.move_id, u.expected_load, u.updated_at
         from shardctl.generation g
         left join shardctl.units u on ($1::text is null or u.kind = $1)
        order by u.unit`,
      [opts.kind ?? null],
    );
    const generation = r.rowCount ? Number(r.rows[0].generation) : 0;
    return { generation, placements: r.rows.filter((x) => x.unit !== null).map(rowToPlacement) };
  }, poolDsn(db));
}

function checkState(state: string, moveId: string | null) {
  if (state !== 'active' && state !== 'moving') throw invalidInput(`placement state must be active or moving, got ${JSON.stringify(state)}`);
  if ((state === 'moving') !== (moveId !== null && moveId !== undefined)) {
    throw invalidInput(state === 'moving' ? 'a moving placement needs the move id that owns it' : 'an active placement carries no move id');
  }
}

function checkAudit(audit: AuditEntry) {
  if (!audit || typeof audit.actor !== 'string' || !audit.actor.trim()) throw invalidInput('audit actor is required');
  if (typeof audit.action !== 'string' || !audit.action.trim()) throw invalidInput('audit action is required');
}

/** Bumps the generation, appends the audit row and notifies, inside the caller's transaction. */
async function recordChange(c: PoolClient, p: Placement, audit: AuditEntry, detail: Record<string, unknown>): Promise<number> {
  const generation = Number((await c.query('update shardctl.generation set value = value + 1 returning value')).rows[0].value);
  await c.query('insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, $2, $3, $4, $5)', [
    audit.actor,
    audit.action,
    p.unit,
    JSON.stringify({ ...(audit.detail ?? {}), ...detail, generation }),
    audit.reason ?? null,
  ]);
  const note: PlacementNotification = { unit: p.unit, shard: p.shard, epoch: p.epoch, state: p.state, generation };
  await c.query('select pg_notify($1, $2)', [PLACEMENT_CHANNEL, JSON.stringify(note)]);
  return generation;
}

/** Under the shard's row lock (the one reservations take): throws NoCapacity unless `load` fits now. */
async function refuseWithoutHeadroom(c: PoolClient, shard: string, load: number, headroomFraction: number): Promise<void> {
  await c.query('select 1 from shardctl.shards where name = $1 for no key update', [shard]);
  const s = await shardLoad(c, shard);
  if (!s) return; // the insert's foreign key answers NotFound
  if (headroomAfter(s, load, headroomFraction) < 0) {
    const usable = usableCapacity(s.capacity, headroomFraction);
    throw new ShardctlError(
      'NoCapacity',
      `shard ${shard} has no room for ${load} now: load ${s.load} + reserved ${s.reserved ?? 0} by moves in flight > usable ${usable.toFixed(0)} of capacity ${s.capacity}; nothing was created — retry to choose again, add a shard or raise capacity`,
      { shard, load: s.load, reserved: s.reserved ?? 0, capacity: s.capacity, expectedLoad: load },
    );
  }
}

class Rollback<T> {
  constructor(readonly value: T) {}
}

/**
 * Compare-and-set a placement: changes it only if it is still exactly `expect` (and, when given,
 * owned by expect.moveId). The epoch rises by one iff next.shard differs from the current shard.
 *
 * A freeze (next.state moving) with `next.switchWithinMs` records a switch deadline, that long
 * after the transaction's start on the directory's clock; `expect.beforeSwitchDeadline` makes the
 * compare-and-set refuse (a conflict, nothing changed) once the directory's clock has reached the
 * deadline of the freeze it expects, or when that freeze has none (lib/cutover/lease.ts says why).
 */
export async function compareAndSetPlacement(
  pool: Pool,
  unit: string,
  expect: {
    shard: string;
    epoch: number;
    state: PlacementState;
    moveId?: string | null;
    freezeToken?: string | null;
    beforeSwitchDeadline?: boolean;
  },
  next: { shard: string; state: PlacementState; moveId: string | null; freezeToken?: string | null; switchWithinMs?: number },
  audit: AuditEntry,
): Promise<CasResult> {
  checkState(next.state, next.moveId);
  checkAudit(audit);
  if (!Number.isSafeInteger(expect.epoch) || expect.epoch < 1) throw invalidInput(`expected epoch must be a positive integer, got ${expect.epoch}`);
  try {
    return await inDirectoryTransaction(pool, async (c) => {
      const r = await c.query(
        `update shardctl.units
            set shard = $5, state = $6, move_id = $7, freeze_token = $12,
                epoch = epoch + case when shard <> $5 then 1 else 0 end,
                switch_deadline = now() + $13::bigint * interval '1 millisecond',
                updated_at = now()
          where unit = $1 and shard = $2 and epoch = $3 and state = $4
            and ($8::boolean is false or move_id is not distinct from $9)
            and ($10::boolean is false or freeze_token is not distinct from $11)
            and ($14::boolean is false or (switch_deadline is not null and pg_catalog.clock_timestamp() < switch_deadline))
          returning ${COLUMNS}`,
        [
          unit,
          expect.shard,
          expect.epoch,
          expect.state,
          next.shard,
          next.state,
          next.moveId,
          expect.moveId !== undefined,
          expect.moveId ?? null,
          expect.freezeToken !== undefined,
          expect.freezeToken ?? null,
          // A freeze token lives only while the unit is moving.
          next.state === 'moving' ? (next.freezeToken ?? null) : null,
          // So does a switch deadline (null: none, and a deadline check then refuses).
          next.state === 'moving' ? (next.switchWithinMs ?? null) : null,
          expect.beforeSwitchDeadline === true,
        ],
      );
      if (r.rowCount === 0) throw new Rollback<CasResult>({ ok: false, type: 'conflict', current: undefined });
      const placement = rowToPlacement(r.rows[0]);
      const generation = await recordChange(c, placement, audit, {
        from: { shard: expect.shard, epoch: expect.epoch, state: expect.state },
        to: { shard: placement.shard, epoch: placement.epoch, state: placement.state, moveId: placement.moveId },
      });
      return { ok: true as const, placement, generation };
    });
  } catch (e) {
    if (e instanceof Rollback) return { ok: false, type: 'conflict', current: await getPlacement(pool, unit) };
    if ((e as any)?.code === '23503') throw new ShardctlError('NotFound', `shard "${next.shard}" is not in the directory`);
    throw e;
  }
}

/**
 * Inserts a new unit (epoch 1, active). An existing unit is an answer, not an error. With
 * `headroomFraction`, the shard's headroom (its units and the reservations of moves in flight) is
 * checked under the same row lock reservations take, in the insert's transaction: a concurrent
 * move or creation cannot overcommit it between the choice and the insert (NoCapacity).
 */
export async function insertPlacement(
  pool: Pool,
  unit: { unit: string; kind: UnitKind; shard: string; expectedLoad: number },
  audit: AuditEntry,
  opts: { headroomFraction?: number } = {},
): Promise<InsertResult> {
  checkAudit(audit);
  if (!Number.isSafeInteger(unit.expectedLoad) || unit.expectedLoad < 0)
    throw invalidInput(`expected load must be a non-negative integer, got ${unit.expectedLoad}`);
  try {
    return await inDirectoryTransaction(pool, async (c) => {
      if (opts.headroomFraction !== undefined) await refuseWithoutHeadroom(c, unit.shard, unit.expectedLoad, opts.headroomFraction);
      // A split tenant lives on as its sub-units (lib/directory/splits.ts): its name is never placed again.
      const split = await c.query('select ways from shardctl.splits where unit = $1 for share', [unit.unit]);
      if (split.rowCount) {
        throw new ShardctlError(
          'Conflict',
          `${unit.unit} is split ${split.rows[0].ways} ways (${unit.unit}:0 .. ${unit.unit}:${split.rows[0].ways - 1}): it is never placed again`,
          {
            unit: unit.unit,
            ways: Number(split.rows[0].ways),
          },
        );
      }
      const r = await c.query(
        `insert into shardctl.units(unit, kind, shard, epoch, state, move_id, expected_load, updated_at)
         values ($1, $2, $3, 1, 'active', null, $4, now())
         on conflict (unit) do nothing
         returning ${COLUMNS}`,
        [unit.unit, unit.kind, unit.shard, unit.expectedLoad],
      );
      if (r.rowCount === 0) throw new Rollback(null);
      const placement = rowToPlacement(r.rows[0]);
      const generation = await recordChange(c, placement, audit, { to: { shard: placement.shard, epoch: 1, state: 'active' } });
      return { ok: true as const, placement, generation };
    });
  } catch (e) {
    if (e instanceof Rollback) {
      const current = await getPlacement(pool, unit.unit);
      if (current) return { ok: false, type: 'exists', current };
      throw new ShardctlError('Conflict', `unit ${unit.unit} was being created concurrently and then vanished; retry`, undefined, true);
    }
    if ((e as any)?.code === '23503') throw new ShardctlError('NotFound', `shard "${unit.shard}" is not in the directory`);
    throw e;
  }
}

export type AdoptPlacementsResult =
  { ok: true; created: string[]; present: string[]; generation: number | null } | { ok: false; elsewhere: Placement[] } | { ok: false; shardStatus: string };

/**
 * `shards adopt`: places every unit of `tenants` on `shard` (epoch 1, active) as ONE change of the
 * directory: one transaction, one generation (a re-run that places nothing bumps none), one audit
 * row per placed tenant (`tenant.adopt`) and one for the run (`shard.adopt`), one NOTIFY per
 * placed tenant. A compare-and-set on "absent or already on `shard`": if any of them is placed on
 * another shard by then, or the shard is no longer open (its row is locked, as reservations and
 * closes lock it), nothing is written and the answer says which.
 */
export async function insertAdoptedPlacements(
  pool: Pool,
  shard: string,
  tenants: string[],
  expectedLoad: number,
  audit: { actor: string; reason?: string; detail?: Record<string, unknown> },
): Promise<AdoptPlacementsResult> {
  checkAudit({ ...audit, action: 'shard.adopt' });
  if (!Number.isSafeInteger(expectedLoad) || expectedLoad < 0) throw invalidInput(`expected load must be a non-negative integer, got ${expectedLoad}`);
  const units = [...new Set(tenants)].sort();
  try {
    return await inDirectoryTransaction(pool, async (c) => {
      const s = await c.query('select status from shardctl.shards where name = $1 for no key update', [shard]);
      if (!s.rowCount) throw new ShardctlError('NotFound', `shard "${shard}" is not in the directory`);
      if (s.rows[0].status !== 'open') throw new Rollback<AdoptPlacementsResult>({ ok: false, shardStatus: s.rows[0].status });
      const ins = await c.query(
        `insert into shardctl.units(unit, kind, shard, epoch, state, move_id, expected_load, updated_at)
         select u, 'tenant', $2, 1, 'active', null, $3, now() from unnest($1::text[]) as x(u)
         on conflict (unit) do nothing
         returning unit`,
        [units, shard, expectedLoad],
      );
      const created = ins.rows.map((r) => r.unit as string).sort();
      const placed = new Set(created);
      const present = units.filter((u) => !placed.has(u));
      // Read after the insert, so a unit another transaction placed meanwhile is seen here (the
      // insert waited for it): a unit not inserted must already be this shard's tenant.
      const have = await c.query(`select ${COLUMNS} from shardctl.units where unit = any($1::text[]) for share`, [present]);
      const elsewhere = have.rows.map(rowToPlacement).filter((p) => p.shard !== shard || p.kind !== 'tenant');
      if (elsewhere.length) throw new Rollback<AdoptPlacementsResult>({ ok: false, elsewhere });
      if (!created.length) return { ok: true as const, created, present, generation: null };
      const generation = Number((await c.query('update shardctl.generation set value = value + 1 returning value')).rows[0].value);
      const to = { shard, epoch: 1, state: 'active' };
      await c.query(
        `insert into shardctl.audit(actor, action, unit, detail, reason)
         select $1, 'tenant.adopt', u, $3::jsonb, $4 from unnest($2::text[]) as x(u)`,
        [audit.actor, created, JSON.stringify({ ...(audit.detail ?? {}), shard, expectedLoad, to, generation }), audit.reason ?? null],
      );
      await c.query(`insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, 'shard.adopt', null, $2, $3)`, [
        audit.actor,
        JSON.stringify({ ...(audit.detail ?? {}), shard, tenants: created.length, present: present.length, generation }),
        audit.reason ?? null,
      ]);
      await c.query(
        `select pg_notify($1, json_build_object('unit', u, 'shard', $3::text, 'epoch', 1, 'state', 'active', 'generation', $4::bigint)::text)
           from unnest($2::text[]) as x(u)`,
        [PLACEMENT_CHANNEL, created, shard, generation],
      );
      return { ok: true as const, created, present, generation };
    });
  } catch (e) {
    if (e instanceof Rollback) return e.value as AdoptPlacementsResult;
    throw e;
  }
}
