// Helpers for move tests against the real stack: prepare shards, run a worker, start and watch
// moves, and read the invariants (directory, fences, replication objects, fingerprints).
import { expect } from 'vitest';
import { Client as TemporalClient, Connection, WorkflowHandle } from '@temporalio/client';
import { Pool, type PoolClient } from 'pg';
import { testConfig, shardPool, directoryPool, uniq, closePools } from './stack';
import { prepareAllShards } from '../../lib/shard/prepare';
import { ensureDirectory } from '../../lib/directory/ensure';
import { createTenant } from '../../lib/tenants';
import { getPlacement } from '../../lib/directory/placements';
import { Router } from '../../lib/router';
import { seedTenant } from '../../lib/seed';
import { createDeps, type Deps } from '../../activities/deps';
import { createActivities, type Activities } from '../../activities';
import type { MoveRef } from './blobs';
import { replicationNamePattern } from '../../lib/ids';
import { startMove } from '../../lib/moves/start';
import { startWorker } from '../../worker';
import * as M from '../../workflows/messages';
import { phaseReached, isTerminal, Phase } from '../../workflows/phases';
import { listTenantTables } from '../../lib/shard/tables';
import { fingerprintUnit, TableFingerprint } from '../../lib/validate/fingerprint';
import type { LiveCutoverEnv } from '../../lib/cutover/live';
import type { CutoverPlan } from '../../lib/cutover/steps';
import type { FreezeLease } from '../../lib/cutover/lease';
import { shardByName } from '../../lib/config';

let prepared: Promise<void> | undefined;
export function prepareStack(): Promise<void> {
  return (prepared ??= (async () => {
    const config = testConfig();
    // Tried again (at most 3 times) when a shard's prepare gives up on a table lock, as its message
    // tells an operator to: many test files prepare the shared shards at once, beside tests that
    // hold a tenant table's lock on purpose (seen in CI: activities-twice, "gave up waiting").
    for (let attempt = 1; ; attempt++) {
      const res = await prepareAllShards(config, shardPool, { demoSchema: true });
      const bad = res.filter((r) => r.error);
      if (!bad.length) break;
      const lockOnly = bad.every((b) => /gave up waiting for a table lock/.test(String(b.error)));
      if (!lockOnly || attempt >= 3) throw new Error(`prepare failed: ${bad.map((b) => `${b.shard}: ${b.error}`).join('; ')}`);
      await new Promise((r) => setTimeout(r, 1000 * attempt));
    }
    await ensureDirectory(directoryPool(), config);
  })());
}

export async function temporal(): Promise<{ client: TemporalClient; close: () => Promise<void> }> {
  const config = testConfig();
  const connection = await Connection.connect({ address: config.temporal.address });
  return { client: new TemporalClient({ connection, namespace: config.temporal.namespace }), close: () => connection.close() };
}

/** A prepared stack, an in-process worker on a task queue of its own, and a Temporal client. */
export async function moveEnv(prefix: string) {
  await prepareStack();
  const tq = uniq(prefix);
  const worker = await startWorker(testConfig(), { taskQueue: tq });
  const t = await temporal();
  return {
    tq,
    t,
    /** The worker's own metrics registry (what its /metrics page serves), read without HTTP. */
    metrics: worker.metrics,
    async close() {
      await t.close();
      await worker.shutdown();
    },
  };
}

/** A move's activities built in this process (no Temporal), for tests that call them in workflow order. */
export interface InProcess {
  deps: Deps;
  act: Activities;
  /** Present when asked for (`router: true`). */
  router: Router;
  close(): Promise<void>;
}

/**
 * Activities on a prepared stack. `close` drops the slots and publications of every move in
 * `refs` (a slot pins WAL on the shared server), destroys `clients`, closes the router and pools.
 */
export async function inProcessActivities(
  o: { router?: boolean; faultPoint?: (name: string) => Promise<void>; refs?: MoveRef[]; clients?: { destroy(): void }[] } = {},
): Promise<InProcess> {
  await prepareStack();
  const deps = createDeps(testConfig(), o.faultPoint ? { faultPoint: o.faultPoint } : {});
  const act = createActivities(deps);
  const router = o.router ? await Router.create(testConfig()) : (undefined as unknown as Router);
  return {
    deps,
    act,
    router,
    async close() {
      await dropReplications(act, o.refs ?? []);
      for (const c of o.clients ?? []) c.destroy();
      await router?.close();
      await deps.close();
      await closePools();
    },
  };
}

/** Drops every slot and publication of the moves (a slot pins WAL on the shared server). */
export async function dropReplications(act: Activities, refs: MoveRef[]) {
  for (const ref of refs) {
    for (const direction of ['forward', 'reverse'] as const) await act.dropReplication({ ...ref, direction }).catch(() => {});
  }
}

/**
 * A new tenant on `source`, seeded with `rows`, driven by the in-process activities up to the
 * cutover (single deliveries): planned, copied, caught up, validated, reverse replication set up.
 * The stream's delta starts empty here; `token` is the validation's.
 */
export async function validatedMove(
  act: Activities,
  o: { source: string; target: string; prefix: string; rows: number; beforePlan?: (tenant: string) => Promise<void> },
) {
  const tenant = await newTenant(o.source, o.prefix);
  await seed(tenant, o.rows, 0);
  await o.beforePlan?.(tenant);
  const plan = await act.planMove({ unit: tenant, target: o.target });
  expect(plan.ok, plan.reasons.join('; ')).toBe(true);
  const ref = { moveId: plan.moveId, unit: tenant, source: plan.source, target: o.target };
  await act.setupReplication({ ...ref, direction: 'forward' });
  for (const t of plan.tables) await act.copyTable({ ...ref, table: t.table, batchRows: 5000, rowsPerSecond: 0 });
  await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
  const v = await act.validateMove({ ...ref, direction: 'forward' });
  expect(v, v.mismatches.join('\n')).toMatchObject({ ok: true });
  await act.setupReplication({ ...ref, direction: 'reverse' });
  return { tenant, ref, token: v.deltaToken };
}

export async function newTenant(shard: string, prefix = 't'): Promise<string> {
  const config = testConfig();
  const tenant = uniq(prefix);
  await createTenant({ directory: directoryPool(), shardPool, config }, { tenant, shard, actor: 'test' });
  return tenant;
}

export async function seed(tenant: string, rows: number, blobs: number, blobWrites: 'direct' | 'index' = 'direct') {
  const config = testConfig();
  const router = await Router.create(config);
  const deps = createDeps(config);
  try {
    return await seedTenant({ router, s3For: (s) => deps.s3For(s), config, tenant, rows, blobs, blobWrites });
  } finally {
    await router.close();
    await deps.close();
  }
}

export function moveInput(tenant: string, target: string, o: Partial<M.MoveInput> = {}): M.MoveInput {
  return {
    moveId: '',
    unit: tenant,
    tenant,
    target,
    soakSeconds: 2,
    approveCutover: 'auto',
    requestedBy: 'test',
    lagThresholdMs: 1000,
    fenceBudgetMs: 5000,
    rowsPerSecond: 0,
    ...o,
  };
}

export { startMove };

/**
 * Polls the move's status until `pred` holds. A failing query (the workflow not started yet, a
 * worker restarting) is retried until the deadline; whatever `pred` throws propagates at once,
 * so "the move ended in X" fails the test now instead of waiting out the timeout.
 */
export async function waitFor(handle: WorkflowHandle, pred: (s: M.MoveStatus) => boolean, timeoutMs = 90_000): Promise<M.MoveStatus> {
  const deadline = Date.now() + timeoutMs;
  let s: M.MoveStatus | undefined;
  let queryError: unknown;
  while (Date.now() < deadline) {
    let current: M.MoveStatus | undefined;
    try {
      current = await handle.query(M.statusQuery);
      queryError = undefined;
    } catch (e) {
      queryError = e;
    }
    if (current) {
      s = current;
      if (pred(current)) return current;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  const why = queryError ? `; last query error: ${(queryError as Error).message ?? queryError}` : '';
  throw new Error(`timed out after ${timeoutMs} ms; last status ${JSON.stringify(s)}${why}`);
}

export async function waitPhase(handle: WorkflowHandle, phase: Phase, timeoutMs = 90_000): Promise<M.MoveStatus> {
  return waitFor(
    handle,
    (s) => {
      if (phaseReached(s.phase, phase)) return true;
      if (isTerminal(s.phase)) throw new Error(`move ended in ${s.phase} before ${phase}: ${s.lastError}`);
      return false;
    },
    timeoutMs,
  );
}

/** Slots and publications left on any shard by every move whose id starts with `moveIdPrefix` (invariant 5). */
export async function replicationLeftovers(moveIdPrefix: string): Promise<string[]> {
  const like = replicationNamePattern(moveIdPrefix);
  const out: string[] = [];
  for (const s of testConfig().shards) {
    const p = shardPool(s.name);
    const slots = await p.query(`select slot_name from pg_replication_slots where slot_name like $1`, [like]);
    const pubs = await p.query(`select pubname from pg_publication where pubname like $1`, [like]);
    out.push(...slots.rows.map((r) => `${s.name} slot ${r.slot_name}`), ...pubs.rows.map((r) => `${s.name} publication ${r.pubname}`));
  }
  return out;
}

export async function fingerprint(shard: string, tenant: string): Promise<TableFingerprint[]> {
  const config = testConfig();
  const pool: Pool = shardPool(shard);
  const tables = await listTenantTables(pool, config.tenant);
  return fingerprintUnit(pool, tables, config.tenant.column, tenant);
}

export async function rowCount(shard: string, tenant: string): Promise<number> {
  const f = await fingerprint(shard, tenant);
  return f.reduce((n, t) => n + t.rows, 0);
}

/** A forward cutover plan of `tenant` at epoch 1, owner to next, for driving the live steps by hand. */
export function forwardCutoverPlan(tenant: string, o: { owner: string; next: string; fenceBudgetMs: number; lease: FreezeLease; actor: string }): CutoverPlan {
  return {
    unit: tenant,
    moveId: `${tenant}.e1`,
    owner: o.owner,
    next: o.next,
    epoch: 1,
    direction: 'forward',
    fenceBudgetMs: o.fenceBudgetMs,
    lease: o.lease,
    actor: o.actor,
  };
}

/** The live cutover's environment on the test stack's pools, without tables or blobs: for driving its steps by hand. */
export function bareCutoverEnv(owner: string, next: string, faultPoint?: (name: string) => Promise<void>): LiveCutoverEnv {
  const config = testConfig();
  return {
    faultPoint,
    directory: directoryPool(),
    ownerPool: shardPool(owner),
    nextPool: shardPool(next),
    ownerDsn: shardByName(config, owner).dsn,
    tenantColumn: config.tenant.column,
    tables: async () => [],
    syncBlobs: async () => ({ sourceObjects: 0, unversioned: 0 }),
    unfencedTables: async () => [],
    maxTxBytes: config.limits.applyMaxTxBytes,
    beat: () => {},
  };
}

export async function placement(tenant: string) {
  return getPlacement(directoryPool(), tenant);
}

/**
 * Tries a direct write under an explicit epoch, rolled back; returns the SQLSTATE or 'ok'. `via`:
 * a writer outside the router that sets unit and epoch (checked at its first write), or a
 * transaction opened as the router opens it (`open_unit_write`, checked at once).
 */
/** Runs `sql` on `shard` in a transaction opened for `unit` at `epoch` as the router opens one (no unit: none opened): 'ok' or the SQLSTATE; rolled back either way. */
export async function inUnitTx(shard: string, unit: string | null, epoch: number, sql: string, params: unknown[] = []): Promise<string> {
  const c = await shardPool(shard).connect();
  try {
    await c.query('begin');
    if (unit) await c.query('call shardctl.open_unit_write($1, $2)', [unit, epoch]);
    await c.query(sql, params);
    await c.query('rollback');
    return 'ok';
  } catch (e: any) {
    await c.query('rollback').catch(() => {});
    return e.code ?? String(e);
  } finally {
    c.release();
  }
}

export async function tryWrite(shard: string, tenant: string, epoch: number, via: 'settings' | 'router' = 'settings'): Promise<string> {
  const c = await shardPool(shard).connect();
  try {
    await c.query('begin');
    if (via === 'router') await c.query('call shardctl.open_unit_write($1, $2)', [tenant, epoch]);
    else await c.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', $2, true)`, [tenant, String(epoch)]);
    await c.query(`insert into public.events(tenant_id, kind) values ($1, 'probe')`, [tenant]);
    await c.query('rollback');
    return 'ok';
  } catch (e: any) {
    await c.query('rollback').catch(() => {});
    return e.code ?? String(e.message);
  } finally {
    c.release();
  }
}

export async function blobCount(shard: string, tenant: string): Promise<number> {
  const { listBlobs, tenantBlobPrefix } = await import('../../lib/blobs');
  const config = testConfig();
  const deps = createDeps(config);
  try {
    const b = config.shards.find((s) => s.name === shard)!.bucket;
    return (await listBlobs(deps.s3For(shard), b, tenantBlobPrefix(tenant))).length;
  } finally {
    await deps.close();
  }
}

/**
 * A writer of `tenant` on `shard` as the router opens it (`open_unit_write`), its transaction left
 * open after one insert into public.events of kind 'long-write': a long write in flight, holding
 * the unit's write lock until `commit` (or `rollback`) ends it and releases the session.
 */
export async function openUnitWriter(
  shard: string,
  tenant: string,
  epoch = 1,
): Promise<{ c: PoolClient; pid: number; commit(): Promise<void>; rollback(): Promise<void> }> {
  const c = await shardPool(shard).connect();
  const end = async (sql: string) => {
    try {
      await c.query(sql);
    } finally {
      c.release();
    }
  };
  try {
    const pid = (await c.query('select pg_backend_pid() as p')).rows[0].p as number;
    await c.query('begin');
    await c.query('call shardctl.open_unit_write($1, $2)', [tenant, epoch]);
    await c.query(`insert into public.events(tenant_id, kind) values ($1, 'long-write')`, [tenant]);
    return { c, pid, commit: () => end('commit'), rollback: () => end('rollback') };
  } catch (e) {
    await end('rollback').catch(() => {});
    throw e;
  }
}
