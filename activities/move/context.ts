// Shared plumbing of the move activities: input schemas, table discovery, heartbeats and the
// typed, non-retryable failures workflows branch on.
import { compareBlobPrefixes, copyBlobPrefix, unitBlobPrefix, type CopyBlobPrefixOptions, type CopyBlobPrefixResult, type ShardBucket } from '../../lib/blobs';
import { getPlacement } from '../../lib/directory/placements';
import { listOpenReservations } from '../../lib/directory/reservations';
import { deleteKeys } from '../../lib/blobs/delete';
import { forgetLedger } from '../../lib/blobs/ledger';
import { activityLog } from '../../lib/obs/log';
import { replicationNames } from '../../lib/ids';
import { sameS3Endpoint } from '../../lib/s3';
import { syncIndexedBlobDelta, type IndexDeltaOptions, type IndexDeltaResult } from '../../lib/blobs/index-delta';
import { indexedObjectHashes, unitIndexScope } from '../../lib/blobs/index-table';
import type { Pool } from 'pg';
import { shardByName } from '../../lib/config';
import { z } from 'zod';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Deps } from '../deps';
import { listTenantTables, tenantTableSelector, TenantTable } from '../../lib/shard/tables';
import { ShardctlError, isPermanentErrorType } from '../../lib/errors';
import { unitRows, type UnitRows } from '../../lib/unit-rows';
import { getSplit } from '../../lib/directory/splits';
import type { SubUnitStream } from '../../lib/cdc/sub-unit-filter';
import { parseUnit } from '../../lib/buckets/units';

export const moveRef = z.object({
  moveId: z.string().min(1).max(200),
  unit: z.string().min(1).max(63),
  source: z.string().min(1),
  target: z.string().min(1),
});
export type MoveRef = z.infer<typeof moveRef>;

export async function tenantTables(deps: Deps, shard: string): Promise<TenantTable[]> {
  const t = deps.config.tenant;
  return listTenantTables(deps.shardPool(shard), tenantTableSelector(t));
}

/** The unit's rows (lib/unit-rows.ts): its tables and its predicate; InvalidInput (permanent) for a unit of no kind. */
export async function rowsOf(deps: Deps, unit: string): Promise<UnitRows> {
  const p = parseUnit(unit);
  if (p.kind !== 'tenant' || p.path.length === 0) return unitRows(deps.config, unit);
  return unitRows(deps.config, unit, await splitOf(deps, p.tenant));
}

/** A sub-unit move's stream filter (lib/cdc/sub-unit-filter.ts); undefined for a tenant's or a bucket's. */
export function subUnitStream(deps: Deps, rows: UnitRows): SubUnitStream | undefined {
  if (!rows.subUnit) return undefined;
  const t = deps.config.tenant;
  return { unit: rows.unit, tenant: rows.subUnit.tenant, tenantColumn: t.column, ways: rows.subUnit.ways, columns: { ...(t.splitColumns ?? {}) } };
}

/** Splits are never undone nor changed (lib/tenant-split.ts): K, once read, is kept per deps. */
const splitWays = new WeakMap<Deps, Map<string, number>>();

/** The directory's split of `tenant` (its K), or undefined when it is not split. */
async function splitOf(deps: Deps, tenant: string): Promise<{ ways: number } | undefined> {
  let known = splitWays.get(deps);
  if (!known) splitWays.set(deps, (known = new Map()));
  const have = known.get(tenant);
  if (have !== undefined) return { ways: have };
  const s = await getSplit(deps.directoryPool(), tenant);
  if (!s) return undefined;
  known.set(tenant, s.ways);
  return { ways: s.ways };
}

/** The tables on `shard` that hold the unit's rows (tenant tables, or its dataset's). */
export async function unitTables(deps: Deps, shard: string, rows: UnitRows): Promise<TenantTable[]> {
  return listTenantTables(deps.shardPool(shard), rows.tables);
}

/**
 * Whether the unit has a blob prefix its move carries: a tenant (`tenants/<id>/`) or a bucket unit
 * (`datasets/<dataset>/<n>/`, lib/blobs/prefix.ts). A split sub-unit has none: a split tenant holds
 * no blobs (`tenant split` refuses one with blobs; the blob index has no split column).
 */
export function hasBlobs(unit: string): boolean {
  const p = parseUnit(unit);
  return p.kind === 'bucket' || p.path.length === 0;
}

/**
 * Whether the cutover's window may take the bounded delta of the unit's index rows (shardctl.blob_index,
 * a tenant's): a bucket unit's index (shardctl.blob_index_<dataset>, keyed by bucket, key and name)
 * feeds the syncs' `referenced` (unitIndex) but its window syncs the whole prefix.
 */
export function hasBlobIndex(unit: string): boolean {
  const p = parseUnit(unit);
  return p.kind === 'tenant' && p.path.length === 0;
}

/** What a running activity said it is doing (`doing`) and its latest progress (`details`). */
interface BeatState {
  doing?: string;
  details?: unknown;
}
// Keyed by the activity's Context: concurrent activities in one worker never share a state.
const beats = new WeakMap<object, BeatState>();

/** The heartbeat details the Web UI shows on the pending activity: `{ doing, ...progress }`. */
export function heartbeatDetails(s: BeatState): unknown {
  if (!s.doing) return s.details;
  if (s.details === undefined) return { doing: s.doing };
  if (s.details && typeof s.details === 'object' && !Array.isArray(s.details)) return { doing: s.doing, ...(s.details as object) };
  return { doing: s.doing, details: s.details };
}

/**
 * Heartbeat when running inside an activity; a no-op in direct calls (tests). A beat without
 * details repeats the last ones, so the timer's beats keep showing the latest progress instead
 * of replacing it with nothing.
 */
export function beat(details?: unknown): void {
  let ctx: Context;
  try {
    ctx = Context.current();
  } catch {
    return; /* not in an activity context */
  }
  const s = beats.get(ctx) ?? {};
  if (details !== undefined) s.details = details;
  beats.set(ctx, s);
  ctx.heartbeat(heartbeatDetails(s));
}

/** The last heartbeat's details of the previous attempt of this activity (undefined: a first attempt, or a direct call). */
export function priorHeartbeat(): unknown {
  try {
    return Context.current().info.heartbeatDetails;
  } catch {
    return undefined; /* not in an activity context */
  }
}

/** Says, in the heartbeat, what the activity is doing now (names only: tables, shards, steps). */
export function doing(what: string): void {
  try {
    const ctx = Context.current();
    beats.set(ctx, { doing: what });
  } catch {
    /* not in an activity context */
  }
}

/** Aborts when either does (the caller's own stop, and the activity's cancellation). */
export function eitherSignal(a: AbortSignal | undefined, b: AbortSignal | undefined): AbortSignal | undefined {
  return a && b ? AbortSignal.any([a, b]) : (a ?? b);
}

export function activitySignal(): AbortSignal | undefined {
  try {
    return Context.current().cancellationSignal;
  } catch {
    return undefined;
  }
}

/**
 * Runs an activity body: heartbeats every second while it runs (so a killed worker is noticed
 * within the heartbeat timeout, even during one long SQL call), and turns permanent failures
 * into non-retryable ApplicationFailures carrying the error's `type`. `timerBeats`, when given,
 * stops the timer's beats while it answers false: the body then heartbeats as it makes its way,
 * so a body stuck on a server that stopped answering stops heartbeating and Temporal hands the
 * activity to another attempt (catch-up always, the cutover from its freeze on).
 */
export async function typed<T>(fn: () => Promise<T>, o: { timerBeats?: () => boolean; doing?: string } = {}): Promise<T> {
  if (o.doing) doing(o.doing);
  const timer = setInterval(() => (o.timerBeats?.() ?? true) && beat(), 1000);
  beat();
  try {
    return await fn();
  } catch (e: any) {
    if (e instanceof ShardctlError && !e.retriable && isPermanentErrorType(e.type)) {
      throw ApplicationFailure.create({ type: e.type, message: e.message, nonRetryable: true, details: e.details ? [e.details] : undefined });
    }
    throw e;
  } finally {
    clearInterval(timer);
  }
}

/** typed() whose body heartbeats as it makes progress (no timer). */
export function typedByProgress<T>(fn: () => Promise<T>, o: { doing?: string } = {}): Promise<T> {
  return typed(fn, { ...o, timerBeats: () => false });
}

export function parse<S extends z.ZodTypeAny>(schema: S, input: unknown): z.infer<S> {
  const r = schema.safeParse(input);
  if (!r.success) {
    throw ApplicationFailure.create({
      type: 'InvalidInput',
      nonRetryable: true,
      message: r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '),
    });
  }
  return r.data;
}

/** The workflow run this activity works for; undefined outside an activity (direct calls, the CLI's dry run). */
export function activityRunId(): string | undefined {
  try {
    return Context.current().info.workflowExecution?.runId;
  } catch {
    return undefined;
  }
}

/** A key unique to this activity execution (stable across its retries and redeliveries). */
export function activityKey(): string | null {
  try {
    const i = Context.current().info;
    return `${i.workflowExecution?.workflowId ?? '-'}/${i.workflowExecution?.runId ?? '-'}/${i.activityId}`;
  } catch {
    return null;
  }
}

/** A shard's bucket as the blob modules want it: the shard that claims it, its client and name. */
export function shardBucket(deps: Deps, shard: string): ShardBucket {
  return { shard, s3: deps.s3For(shard), bucket: shardByName(deps.config, shard).bucket };
}

/** The move and direction a blob sync works for (the cutover's own syncs run inside its freeze and pass none). */
export interface BlobSyncMove {
  moveId: string;
  direction: 'forward' | 'reverse';
}

/**
 * The fence of a blob sync from `from` to `to`: it starts only while the directory shows `from`
 * as the owner, and the check it returns throws once the directory no longer shows `from` at that
 * same epoch, or no longer under the same freeze when it started under one (a cutover's own sync:
 * an attempt that unfroze, or whose freeze a later attempt took over, has no business syncing), or
 * (given the move) the move's slot for this direction is gone. Run after the
 * observation that justifies a delete, it keeps a sync Temporal gave up on (heartbeat timeout, a
 * partitioned worker) from deleting anything from the bucket that owns the unit again after a
 * rollback: whatever made the object vanish from the source after the switch back (the rollback
 * clean-up) happened before the check, so it sees it. The destination's fence is not asked: it
 * accepts the next epoch a moment before the directory switches (and keeps that acceptance when
 * the worker dies there), and until the directory says so the source is still the one to mirror.
 */
export async function blobSyncFence(deps: Deps, from: string, to: string, unit: string, move?: BlobSyncMove): Promise<() => Promise<void>> {
  const dir = deps.directoryPool();
  const p0 = await getPlacement(dir, unit);
  if (!p0 || p0.shard !== from) {
    throw new ShardctlError(
      'PreconditionFailed',
      `refusing to sync the blobs of ${unit} from ${from} to ${to}: the directory shows ${p0 ? `${p0.shard} epoch ${p0.epoch}` : 'no placement'}, not ${from}, as the owner`,
    );
  }
  // A cancel, a rollback clean-up or a retire drops the move's slot for this direction first (the
  // epoch does not change on a cancel): a sync of a move that no longer replicates has no business.
  const slot = move && replicationNames(move.moveId, move.direction).slot;
  const slotGone = async () =>
    slot !== undefined && ((await deps.shardPool(from).query('select 1 from pg_replication_slots where slot_name = $1', [slot])).rowCount ?? 0) === 0;
  if (await slotGone()) {
    throw new ShardctlError(
      'PreconditionFailed',
      `refusing to sync the blobs of ${unit} from ${from} to ${to}: move ${move!.moveId} has no ${move!.direction} replication slot (cancelled or finished)`,
    );
  }
  return async () => {
    const [p, gone] = await Promise.all([getPlacement(dir, unit), slotGone()]);
    if (gone) {
      throw new ShardctlError(
        'PreconditionFailed',
        `blob sync of ${unit} from ${from} to ${to} stopped: move ${move!.moveId} dropped its ${move!.direction} slot (cancelled or finished): nothing more is copied or deleted`,
      );
    }
    if (!p || p.shard !== from || p.epoch !== p0.epoch) {
      throw new ShardctlError(
        'PreconditionFailed',
        `blob sync of ${unit} from ${from} to ${to} stopped: it started while ${from} owned the unit at epoch ${p0.epoch}; now the directory shows ` +
          `${p ? `${p.shard} epoch ${p.epoch} ${p.state}` : 'no placement'}: nothing more is copied or deleted`,
      );
    }
    // Started under a freeze: only that freeze (its token) may go on. A sync started before any
    // freeze is not stopped by one: the owner and epoch it mirrors are still the directory's.
    if (p0.freezeToken && p.freezeToken !== p0.freezeToken) {
      throw new ShardctlError(
        'PreconditionFailed',
        `blob sync of ${unit} from ${from} to ${to} stopped: it started under freeze ${p0.freezeToken}; now the directory shows ` +
          `${p.freezeToken ? `freeze ${p.freezeToken}` : `no freeze (${p.state})`}: nothing more is copied or deleted`,
      );
    }
  };
}

/**
 * What a blob sync of `move` does with an object whose write was in flight when the fence moved
 * (lib/blobs/copy.ts `landedAfterFence`): it deletes the key from `to` (and forgets its ledger
 * row) when nobody needs it there — `to` is not the unit's owner, the move's slot for this
 * direction is gone (that direction of the move is over for good: cancelled, rolled back or
 * retired, so no sync of it can write there again), and no other move of the unit is open (one
 * could be copying the same key into `to`). Otherwise it leaves it: in the owner's bucket it is the
 * owner's (a reverse sync's copy landing after a rollback: the object the owner's own index names),
 * and with another move open, doctor reports it.
 */
function removeLandedAfterFence(deps: Deps, from: string, to: string, unit: string, move: BlobSyncMove) {
  const slot = replicationNames(move.moveId, move.direction).slot;
  return async (key: string): Promise<void> => {
    const dir = deps.directoryPool();
    const [p, slotRows, open] = await Promise.all([
      getPlacement(dir, unit),
      deps.shardPool(from).query('select 1 from pg_replication_slots where slot_name = $1', [slot]),
      listOpenReservations(dir),
    ]);
    if (!p || p.shard === to || (slotRows.rowCount ?? 0) > 0 || open.some((r) => r.unit === unit && r.moveId !== move.moveId)) return;
    await deleteKeys(shardBucket(deps, to), [key], { owner: shardBucket(deps, p.shard) });
    await forgetLedger(deps.shardPool(to), unit, [key]);
    activityLog().warn({ unit, key, bucket: to, moveId: move.moveId }, 'blob sync: removed an object whose copy landed after its move stopped syncing');
  };
}

/**
 * Delta-syncs a unit's blob prefix from one shard's bucket to another's (see lib/blobs/copy.ts),
 * fenced by blobSyncFence, stopped by the activity's cancellation, and through both shards' blob
 * ledgers (unchanged objects are not read; objects written behind shardctl's back are left alone).
 * The cutover calls this too (its final delta under the fence).
 */
export async function syncUnitBlobs(
  deps: Deps,
  from: string,
  to: string,
  unit: string,
  opts: Pick<CopyBlobPrefixOptions, 'onProgress' | 'hashUnchanged' | 'signal'> & {
    move?: BlobSyncMove;
    /**
     * Sync from the source's blob index (read here after the fence passed, or the snapshot given):
     * version objects only when a row names them, their sha256 from the row (lib/blobs/copy.ts
     * `referenced`). Not inside a freeze: the cutover's syncs pass none.
     */
    index?: true | UnitIndex;
  } = {},
): Promise<CopyBlobPrefixResult> {
  const { move, index, ...rest } = opts;
  if (!hasBlobs(unit))
    return {
      manifest: [],
      copied: 0,
      skipped: 0,
      deleted: 0,
      bytes: 0,
      objectsRead: 0,
      outOfBand: [],
      sourceObjects: 0,
      unversioned: 0,
      unreferenced: 0,
      atDestination: new Map(),
    };
  const stillSyncing = await blobSyncFence(deps, from, to, unit, move);
  // The source's index, read after the fence passed: the objects its rows name and the hashes its
  // puts recorded (one query, not one read per object). Undefined on a shard without the index.
  const referenced = index === true ? await unitIndex(deps, from, unit) : index;
  return copyBlobPrefix({
    referenced,
    src: shardBucket(deps, from),
    dst: shardBucket(deps, to),
    prefix: unitBlobPrefix(unit),
    sameEndpoint: sameS3Endpoint(deps.config, from, to),
    stillSyncing,
    ledger: { src: deps.shardPool(from), dst: deps.shardPool(to), unit },
    ...(move ? { landedAfterFence: removeLandedAfterFence(deps, from, to, unit, move) } : {}),
    ...rest,
    signal: eitherSignal(rest.signal, activitySignal()),
  });
}

/**
 * The cutover's bounded final blob delta (lib/blobs/index-delta.ts): brings the objects named by
 * these changed blob index rows, fenced like syncUnitBlobs, on the pools the caller gives (the
 * cutover's frozen-window pools).
 */
export async function syncChangedUnitBlobs(
  deps: Deps,
  from: string,
  to: string,
  unit: string,
  names: readonly string[],
  pools: { src: Pool; dst: Pool },
  seenAtDestination?: IndexDeltaOptions['seenAtDestination'],
): Promise<IndexDeltaResult> {
  if (!hasBlobs(unit)) return { referenced: 0, present: 0, copied: 0, bytes: 0, requests: 0, outOfBand: [] };
  const stillSyncing = await blobSyncFence(deps, from, to, unit);
  return syncIndexedBlobDelta({
    src: shardBucket(deps, from),
    dst: shardBucket(deps, to),
    srcPool: pools.src,
    dstPool: pools.dst,
    unit,
    tenantColumn: deps.config.tenant.column,
    names,
    sameEndpoint: sameS3Endpoint(deps.config, from, to),
    stillSyncing,
    signal: activitySignal(),
    seenAtDestination,
  });
}

/** What the source's blob index names for the unit (object key -> sha256, size); undefined when the shard has no index. */
export type UnitIndex = ReadonlyMap<string, { sha256: string; size: number }>;

/** The unit's blob index on `shard` (one query), or undefined when the shard has none or the unit has no blobs. */
export async function unitIndex(deps: Deps, shard: string, unit: string): Promise<UnitIndex | undefined> {
  const scope = unitIndexScope(deps.config, unit);
  if (!scope) return undefined;
  return indexedObjectHashes(deps.shardPool(shard), scope);
}

/**
 * Compares the unit's blobs on two shards by key, size and sha256, reading only what the ledgers
 * cannot vouch for. Given the source's index: each object a row names must be on `to` with the
 * size and sha256 the row recorded, and version objects no row names are left out (see syncUnitBlobs).
 */
export async function compareUnitBlobs(deps: Deps, from: string, to: string, unit: string, referenced?: UnitIndex): ReturnType<typeof compareBlobPrefixes> {
  if (!hasBlobs(unit)) return { missing: [], extra: [], different: [], objectsRead: 0 };
  return compareBlobPrefixes({
    referenced,
    src: shardBucket(deps, from),
    dst: shardBucket(deps, to),
    prefix: unitBlobPrefix(unit),
    ledger: { src: deps.shardPool(from), dst: deps.shardPool(to), unit },
    signal: activitySignal(),
  });
}
