// The shards inventory in the directory: which shards exist, their capacity and status. Config
// is the source of connection details; the directory is the source of status and capacity.
// Sync only adds missing shards, it never changes or removes existing rows.
import type { ShardLoad } from './choose';
import type { Pool } from 'pg';
import type { Config } from '../config';
import { ShardctlError, invalidInput } from '../errors';
import { validateShardName } from '../ids';
import { Queryable, onDirectory, poolDsn, inDirectoryTransaction } from './db';
import type { AuditEntry } from './placements';
import { openReservationsOn, reservationsOn } from './reservations';
import { movesInFlight } from './moves';
import { judgeIsolateEnd } from '../rebalance/isolate-end';

export type ShardStatus = 'open' | 'closed' | 'draining';
export const SHARD_STATUSES: readonly ShardStatus[] = ['open', 'closed', 'draining'];

export interface ShardInfo {
  name: string;
  capacity: number;
  status: ShardStatus;
  /** Sum of expected_load of the units placed on the shard. */
  load: number;
  /** Load reserved on the shard by moves in flight (lib/directory/reservations.ts). */
  reserved: number;
  units: number;
  /** The tenant this shard is dedicated to (`tenant isolate`); null when shared. */
  dedicatedTo: string | null;
  /** `dedicated`: added for isolation (`shards add --class dedicated`), it takes no shared unit. */
  class: 'shared' | 'dedicated';
  region: string | null;
  /** The shard's disk budget in bytes (`shards add --capacity-bytes`); null when unstated. */
  capacityBytes: number | null;
  updatedAt: string;
}

export const DEFAULT_SHARD_CAPACITY = 1000;

/** Who brings the directory up to date: a verb's operator, or `config-sync` when no operator ran one (a worker start). */
export interface DirectoryOperator {
  actor: string;
  reason?: string;
}
export const CONFIG_SYNC: DirectoryOperator = { actor: 'config-sync' };

/**
 * Inserts the config's shards missing from the directory (open, default capacity); returns their
 * names. The `shard.register` entry names the operator whose verb synced (a worker start: `config-sync`).
 */
export async function syncShardsFromConfig(pool: Pool, config: Config, operator: DirectoryOperator = CONFIG_SYNC): Promise<string[]> {
  const names = config.shards.map((s) => s.name);
  return inDirectoryTransaction(pool, async (c) => {
    const r = await c.query(
      `insert into shardctl.shards(name, capacity, status)
       select n, $2, 'open' from unnest($1::text[]) as n
       on conflict (name) do nothing
       returning name`,
      [names, DEFAULT_SHARD_CAPACITY],
    );
    const added = r.rows.map((x) => x.name as string).sort();
    if (added.length) {
      await c.query(`insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, 'shard.register', null, $2, $3)`, [
        operator.actor,
        JSON.stringify({ shards: added, capacity: DEFAULT_SHARD_CAPACITY, via: 'config-sync' }),
        operator.reason ?? null,
      ]);
    }
    return added;
  });
}

export async function listShards(db: Queryable): Promise<ShardInfo[]> {
  return onDirectory(async () => {
    const r = await db.query(
      `select s.name, s.capacity, s.status, s.updated_at, s.dedicated_to, s.class, s.region, s.capacity_bytes,
              coalesce(sum(u.expected_load), 0) as load, count(u.unit) as units,
              coalesce((select sum(r.load) from ${openReservationsOn('s.name')}), 0) as reserved
         from shardctl.shards s left join shardctl.units u on u.shard = s.name
        group by s.name order by s.name`,
    );
    return r.rows.map((x) => ({
      name: x.name,
      capacity: Number(x.capacity),
      status: x.status,
      load: Number(x.load),
      reserved: Number(x.reserved),
      units: Number(x.units),
      dedicatedTo: x.dedicated_to ?? null,
      class: x.class ?? 'shared',
      region: x.region ?? null,
      capacityBytes: x.capacity_bytes === null || x.capacity_bytes === undefined ? null : Number(x.capacity_bytes),
      updatedAt: x.updated_at instanceof Date ? x.updated_at.toISOString() : String(x.updated_at),
    }));
  }, poolDsn(db));
}

/** Every shard in the inventory, whatever its status (a closed or draining shard still holds data). */
export async function listShardNames(db: Queryable): Promise<string[]> {
  const r = await db.query('select name from shardctl.shards order by name');
  return r.rows.map((x) => x.name as string);
}

export async function getShard(db: Queryable, name: string): Promise<ShardInfo | undefined> {
  return (await listShards(db)).find((s) => s.name === name);
}

async function updateShard(
  pool: Pool,
  name: string,
  set: { status?: ShardStatus; capacity?: number; dedicatedTo?: string | null },
  audit: AuditEntry,
): Promise<ShardInfo> {
  validateShardName(name);
  if (!audit?.actor?.trim()) throw invalidInput('audit actor is required');
  await inDirectoryTransaction(pool, async (c) => {
    const r = await c.query(
      `update shardctl.shards set status = coalesce($2, status), capacity = coalesce($3, capacity),
              dedicated_to = case when $4::boolean then $5 else dedicated_to end, updated_at = now()
        where name = $1 returning name`,
      [name, set.status ?? null, set.capacity ?? null, set.dedicatedTo !== undefined, set.dedicatedTo ?? null],
    );
    if (r.rowCount === 0) throw new ShardctlError('NotFound', `shard "${name}" is not in the directory`);
    await c.query('insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, $2, null, $3, $4)', [
      audit.actor,
      audit.action,
      JSON.stringify({ ...(audit.detail ?? {}), shard: name, ...set }),
      audit.reason ?? null,
    ]);
  });
  return (await getShard(pool, name))!;
}

export async function setShardStatus(pool: Pool, name: string, status: ShardStatus, audit: { actor: string; reason?: string }): Promise<ShardInfo> {
  if (!SHARD_STATUSES.includes(status)) throw invalidInput(`shard status must be one of ${SHARD_STATUSES.join(', ')}, got ${JSON.stringify(status)}`);
  return updateShard(pool, name, { status }, { ...audit, action: 'shard.status' });
}

export async function setShardCapacity(pool: Pool, name: string, capacity: number, audit: { actor: string; reason?: string }): Promise<ShardInfo> {
  if (!Number.isSafeInteger(capacity) || capacity <= 0) throw invalidInput(`shard capacity must be a positive integer, got ${capacity}`);
  return updateShard(pool, name, { capacity }, { ...audit, action: 'shard.capacity' });
}

/** Dedicates a shard to one tenant (null: shared again); placement and the rebalancer put nothing else there. */
export async function setShardDedication(pool: Pool, name: string, tenant: string | null, audit: { actor: string; reason?: string }): Promise<ShardInfo> {
  return updateShard(pool, name, { dedicatedTo: tenant }, { ...audit, action: 'shard.dedicate' });
}

/**
 * A shard's status, capacity, dedication, the expected load of the units placed on it and the
 * reservations of moves in flight counted on it (but `exceptUnit`'s); undefined when unknown.
 */
export async function shardLoad(db: Queryable, name: string, opts: { exceptUnit?: string } = {}): Promise<ShardLoad | undefined> {
  const r = await db.query(
    `select s.status, s.capacity, s.dedicated_to, s.class, s.region, coalesce((select sum(expected_load) from shardctl.units u where u.shard = s.name), 0) as load
       from shardctl.shards s where s.name = $1`,
    [name],
  );
  if (!r.rowCount) return undefined;
  const s = r.rows[0];
  const reservations = await reservationsOn(db, name, opts.exceptUnit);
  return {
    name,
    status: s.status,
    capacity: Number(s.capacity),
    load: Number(s.load),
    dedicatedTo: s.dedicated_to ?? null,
    class: s.class ?? 'shared',
    region: s.region ?? null,
    reserved: reservations.reduce((n, x) => n + x.load, 0),
    reservations,
  };
}

export type CloseResult = { closed: true; shard: ShardInfo } | { closed: false; reasons: string[] };

/**
 * The end of `shards drain`: draining → closed, only while the directory shows no unit placed on
 * the shard and no move onto or off it that has not ended. The shard's row is locked FOR UPDATE
 * first: a placement that would reference it (a new tenant, a switch onto it) takes a key-share
 * lock on that row, so none can commit between these checks and the close. Otherwise it changes
 * nothing and says why, one reason per obstacle.
 */
export async function closeDrainedShard(
  pool: Pool,
  name: string,
  audit: { actor: string; reason?: string },
  opts: { fromOpen?: boolean } = {},
): Promise<CloseResult> {
  validateShardName(name);
  if (!audit?.actor?.trim()) throw invalidInput('audit actor is required');
  const result = await inDirectoryTransaction(pool, async (c): Promise<CloseResult> => {
    const s = await c.query('select status from shardctl.shards where name = $1 for update', [name]);
    if (!s.rowCount) throw new ShardctlError('NotFound', `shard "${name}" is not in the directory`);
    const status: ShardStatus = s.rows[0].status;
    if (status === 'closed') return { closed: true, shard: undefined as unknown as ShardInfo };
    const reasons: string[] = [];
    // `fromOpen`: an operator's `shards set-status closed`, the same checks from open too.
    if (status !== 'draining' && !opts.fromOpen) reasons.push(`${name} is ${status}, not draining (someone reopened it)`);
    const units = await c.query('select unit, state from shardctl.units where shard = $1 order by unit', [name]);
    if (units.rowCount) {
      const shown = units.rows.slice(0, 5).map((u) => `${u.unit}${u.state === 'active' ? '' : ` (${u.state})`}`);
      reasons.push(`${units.rowCount} unit(s) still placed on ${name}: ${shown.join(', ')}${units.rowCount > 5 ? ', ...' : ''}`);
    }
    for (const m of await movesInFlight(c, name))
      reasons.push(`move ${m.moveId} of ${m.unit} ${m.source} -> ${m.target} has not ended (last recorded phase ${m.status})`);
    if (reasons.length) return { closed: false, reasons };
    await c.query(`update shardctl.shards set status = 'closed', updated_at = now() where name = $1`, [name]);
    await c.query('insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, $2, null, $3, $4)', [
      audit.actor,
      'shard.status',
      JSON.stringify({ shard: name, status: 'closed', from: status }),
      audit.reason ?? null,
    ]);
    return { closed: true, shard: undefined as unknown as ShardInfo };
  });
  return result.closed ? { closed: true, shard: (await getShard(pool, name))! } : result;
}

export type UndoDedicationResult = { undone: true; why: string } | { undone: false; state: string[]; undoCommand: string };

/**
 * The end of a cancelled or failed `tenant isolate`: reads, under the shard's row lock, what
 * the judgement needs (its dedication, the tenant's placement, the units on it, where the run's
 * moves off it left their units, moves onto or off it not ended) and clears the dedication only
 * when judgeIsolateEnd says so (audited `shard.dedicate`, with why and the run). `started`: the
 * units whose moves off the shard this run started; `run`: the run's id, so a redelivery
 * answers the same.
 */
export async function undoIsolateDedication(
  pool: Pool,
  req: { shard: string; tenant: string; dedicatedByRun: boolean; started: string[]; run: string },
  audit: { actor: string; reason?: string },
): Promise<UndoDedicationResult> {
  validateShardName(req.shard);
  if (!audit?.actor?.trim()) throw invalidInput('audit actor is required');
  return inDirectoryTransaction(pool, async (c): Promise<UndoDedicationResult> => {
    const s = await c.query('select dedicated_to from shardctl.shards where name = $1 for update', [req.shard]);
    if (!s.rowCount) throw new ShardctlError('NotFound', `shard "${req.shard}" is not in the directory`);
    // Delivered again after it committed: the same answer, nothing changed twice.
    const done = await c.query(
      `select detail->>'why' as why from shardctl.audit where action = 'shard.dedicate' and detail->>'shard' = $1 and detail->>'run' = $2 limit 1`,
      [req.shard, req.run],
    );
    if (done.rowCount) return { undone: true, why: done.rows[0].why };
    const units = await c.query('select unit, shard, state from shardctl.units where shard = $1 or unit = any($2::text[])', [
      req.shard,
      [req.tenant, ...req.started],
    ]);
    const at = new Map(units.rows.map((u) => [u.unit as string, { shard: u.shard as string, state: u.state as string }]));
    const verdict = judgeIsolateEnd({
      shard: req.shard,
      tenant: req.tenant,
      dedicatedByRun: req.dedicatedByRun,
      dedicatedTo: s.rows[0].dedicated_to ?? null,
      tenantAt: at.get(req.tenant),
      othersOnShard: units.rows.filter((u) => u.shard === req.shard && u.unit !== req.tenant).map((u) => u.unit as string),
      // A started move whose unit the directory does not place on the shard counts as moved off (fail closed).
      movedOff: req.started.filter((u) => u !== req.tenant && at.get(u)?.shard !== req.shard),
      inFlight: (await movesInFlight(c, req.shard)).map((m) => `${m.unit} ${m.source} -> ${m.target} (${m.status})`),
    });
    if (!verdict.undo) return { undone: false, state: verdict.state, undoCommand: verdict.undoCommand };
    await c.query('update shardctl.shards set dedicated_to = null, updated_at = now() where name = $1', [req.shard]);
    await c.query('insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, $2, null, $3, $4)', [
      audit.actor,
      'shard.dedicate',
      JSON.stringify({ shard: req.shard, dedicatedTo: null, from: req.tenant, why: verdict.why, run: req.run }),
      audit.reason ?? null,
    ]);
    return { undone: true, why: verdict.why };
  });
}
