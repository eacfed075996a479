// The fenced job worker: claims, completes and releases rows of the demo `jobs` table through
// the router, so every state change carries the unit's epoch and is gated by the shard fence
// like any other write (a frozen unit's jobs stay queued; a moved unit's jobs are worked on
// the new owner). Claims use FOR UPDATE SKIP LOCKED: two workers never claim the same job.
import { setTimeout as delay } from 'node:timers/promises';
import type { PoolClient } from 'pg';
import { ShardctlError, invalidInput } from '../errors';
import type { Grant } from '../router/grant';
import type { Router, TenantCallOptions } from '../router/router';

export type JobState = 'queued' | 'running' | 'done' | 'failed';

export interface Job {
  tenantId: string;
  id: string;
  kind: string;
  state: JobState;
  runAt: Date;
  attempts: number;
  payload: unknown;
  lockedBy: string | null;
}

const JOB_COLUMNS = 'tenant_id, id, kind, state, run_at, attempts, payload, locked_by';

function toJob(r: any): Job {
  return {
    tenantId: r.tenant_id,
    id: r.id,
    kind: r.kind,
    state: r.state,
    runAt: r.run_at,
    attempts: Number(r.attempts),
    payload: r.payload,
    lockedBy: r.locked_by,
  };
}

const WORKER_ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$/;
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function checkWorkerId(w: unknown): string {
  if (typeof w !== 'string' || !WORKER_ID_RE.test(w)) throw invalidInput(`invalid worker id ${JSON.stringify(String(w).slice(0, 80))}`);
  return w;
}

function checkJobId(id: unknown): string {
  if (typeof id !== 'string' || !UUID_RE.test(id)) throw invalidInput(`invalid job id ${JSON.stringify(String(id).slice(0, 80))}`);
  return id;
}

export interface EnqueueOptions extends TenantCallOptions {
  /** Not before this time (default now). */
  runAt?: Date;
}

/** Queues one job for the tenant; returns its id. */
export async function enqueueJob(router: Router, tenant: string, grant: Grant, kind: string, payload: unknown, opts: EnqueueOptions = {}): Promise<string> {
  if (typeof kind !== 'string' || kind.length === 0 || kind.length > 200) throw invalidInput('job kind must be a non-empty string of at most 200 characters');
  const body = JSON.stringify(payload ?? {});
  return router.withTenant(
    tenant,
    grant,
    'write',
    async (tx) => {
      const r = await tx.query(
        `insert into public.jobs (tenant_id, kind, payload, run_at) values ($1, $2, $3::jsonb, coalesce($4::timestamptz, now())) returning id`,
        [tenant, kind, body, opts.runAt ?? null],
      );
      return r.rows[0].id as string;
    },
    opts,
  );
}

export interface ClaimOptions extends TenantCallOptions {
  workerId: string;
  limit: number;
}

/**
 * Claims up to `limit` due queued jobs of the tenant in one fenced write transaction: they
 * become running, locked by the worker, attempts + 1. The candidate set is a MATERIALIZED CTE
 * so the LIMIT ... SKIP LOCKED subquery is evaluated exactly once.
 */
export async function claimJobs(router: Router, tenant: string, grant: Grant, opts: ClaimOptions): Promise<Job[]> {
  const workerId = checkWorkerId(opts.workerId);
  if (!Number.isInteger(opts.limit) || opts.limit < 1 || opts.limit > 10_000) throw invalidInput('limit must be an integer in 1..10000');
  return router.withTenant(
    tenant,
    grant,
    'write',
    async (tx) => {
      const r = await tx.query(
        `with picked as materialized (
           select tenant_id, id from public.jobs
            where tenant_id = $1 and state = 'queued' and run_at <= now()
            order by run_at limit $2
            for update skip locked)
         update public.jobs j
            set state = 'running', locked_by = $3, attempts = j.attempts + 1, updated_at = now()
           from picked p
          where j.tenant_id = p.tenant_id and j.id = p.id
         returning ${JOB_COLUMNS.split(', ')
           .map((c) => `j.${c}`)
           .join(', ')}`,
        [tenant, opts.limit, workerId],
      );
      return r.rows.map(toJob);
    },
    opts,
  );
}

async function transition(router: Router, tenant: string, grant: Grant, opts: TenantCallOptions, sql: string, params: unknown[]): Promise<boolean> {
  return router.withTenant(tenant, grant, 'write', async (tx: PoolClient) => (await tx.query(sql, params)).rowCount === 1, opts);
}

export interface JobRef extends TenantCallOptions {
  id: string;
  workerId: string;
}

/** Ends a job the worker holds in a final state; false when the worker no longer holds it. */
function finishHeld(router: Router, tenant: string, grant: Grant, ref: JobRef, state: 'done' | 'failed'): Promise<boolean> {
  return transition(
    router,
    tenant,
    grant,
    ref,
    `update public.jobs set state = $4, locked_by = null, updated_at = now()
      where tenant_id = $1 and id = $2 and state = 'running' and locked_by = $3`,
    [tenant, checkJobId(ref.id), checkWorkerId(ref.workerId), state],
  );
}

/** Marks a job the worker holds as done; false when the worker no longer holds it. */
export function completeJob(router: Router, tenant: string, grant: Grant, ref: JobRef): Promise<boolean> {
  return finishHeld(router, tenant, grant, ref, 'done');
}

/** Puts a job the worker holds back in the queue (after `delayMs`); false when not held. */
export function releaseJob(router: Router, tenant: string, grant: Grant, ref: JobRef & { delayMs?: number }): Promise<boolean> {
  const delayMs = ref.delayMs ?? 0;
  if (!Number.isFinite(delayMs) || delayMs < 0) throw invalidInput('delayMs must be a non-negative number');
  return transition(
    router,
    tenant,
    grant,
    ref,
    `update public.jobs set state = 'queued', locked_by = null, run_at = now() + make_interval(secs => $4::double precision / 1000), updated_at = now()
      where tenant_id = $1 and id = $2 and state = 'running' and locked_by = $3`,
    [tenant, checkJobId(ref.id), checkWorkerId(ref.workerId), delayMs],
  );
}

/** Gives up on a job the worker holds (no more attempts); false when not held. */
export function failJob(router: Router, tenant: string, grant: Grant, ref: JobRef): Promise<boolean> {
  return finishHeld(router, tenant, grant, ref, 'failed');
}

/** Re-queues jobs left running longer than `leaseMs` (their worker died); returns how many. */
export async function requeueExpiredJobs(router: Router, tenant: string, grant: Grant, opts: TenantCallOptions & { leaseMs: number }): Promise<number> {
  if (!(opts.leaseMs > 0)) throw invalidInput('leaseMs must be positive');
  return router.withTenant(
    tenant,
    grant,
    'write',
    async (tx) =>
      (
        await tx.query(
          `update public.jobs set state = 'queued', locked_by = null, updated_at = now()
            where tenant_id = $1 and state = 'running' and updated_at < now() - make_interval(secs => $2::double precision / 1000)`,
          [tenant, opts.leaseMs],
        )
      ).rowCount ?? 0,
    opts,
  );
}

export type JobHandler = (job: Job, ctx: { signal: AbortSignal }) => Promise<void>;

export interface JobWorkerOptions {
  router: Router;
  tenants: readonly string[];
  grant: Grant;
  workerId: string;
  /** Sleep between rounds that found nothing (or after a refusal). */
  pollMs: number;
  handler: JobHandler;
  signal: AbortSignal;
  /** Jobs per claim (default 10). */
  batch?: number;
  /** After this many attempts a failing job is marked failed (default 5). */
  maxAttempts?: number;
  /** Delay before a failed job is retried (default 1000 ms). */
  retryDelayMs?: number;
  /** When set, running jobs older than this are re-queued each round (dead workers). */
  leaseMs?: number;
  /** Per-call router options (e.g. a short deadline so a frozen unit does not stall others). */
  call?: TenantCallOptions;
  /** Errors the loop survived (refusals, handler failures, anything unexpected). */
  onError?: (err: unknown, ctx: { tenant: string; jobId?: string }) => void;
}

export interface JobWorkerStats {
  claimed: number;
  completed: number;
  released: number;
  failed: number;
  refusals: number;
  errors: number;
}

const isRefusal = (e: unknown) => e instanceof ShardctlError && (e.type === 'Frozen' || e.type === 'StaleRoute' || e.type === 'DirectoryUnavailable');

/** Sleeps ms, or less if the signal aborts first (an abort ends the wait, it is not an error). */
function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return delay(Math.max(0, ms), undefined, { signal }).catch(() => {});
}

/**
 * Polls the tenants round-robin until `signal` aborts. A refused call (Frozen, StaleRoute,
 * DirectoryUnavailable) is a pause, not a failure: the tenant is skipped for this round and
 * the loop goes on. Handler errors release the job with a delay, or fail it after maxAttempts.
 * A job whose completion is refused stays running until requeued (leaseMs) — never lost.
 */
export async function runJobWorker(o: JobWorkerOptions): Promise<JobWorkerStats> {
  const workerId = checkWorkerId(o.workerId);
  const stats: JobWorkerStats = { claimed: 0, completed: 0, released: 0, failed: 0, refusals: 0, errors: 0 };
  const batch = o.batch ?? 10;
  const maxAttempts = o.maxAttempts ?? 5;
  const call = o.call ?? {};
  const report = (err: unknown, tenant: string, jobId?: string) => {
    if (isRefusal(err)) stats.refusals++;
    else stats.errors++;
    o.onError?.(err, { tenant, jobId });
  };
  while (!o.signal.aborted) {
    let worked = false;
    let refused = false;
    for (const tenant of o.tenants) {
      if (o.signal.aborted) break;
      try {
        if (o.leaseMs) await requeueExpiredJobs(o.router, tenant, o.grant, { ...call, leaseMs: o.leaseMs });
        const jobs = await claimJobs(o.router, tenant, o.grant, { ...call, workerId, limit: batch });
        stats.claimed += jobs.length;
        if (jobs.length) worked = true;
        for (const job of jobs) await runOne(o, job, tenant, workerId, maxAttempts, call, stats, report);
      } catch (err) {
        if (isRefusal(err)) refused = true;
        report(err, tenant);
      }
    }
    if (!worked || refused) await sleep(o.pollMs, o.signal);
  }
  return stats;
}

async function runOne(
  o: JobWorkerOptions,
  job: Job,
  tenant: string,
  workerId: string,
  maxAttempts: number,
  call: TenantCallOptions,
  stats: JobWorkerStats,
  report: (err: unknown, tenant: string, jobId?: string) => void,
): Promise<void> {
  const ref = { ...call, id: job.id, workerId };
  try {
    await o.handler(job, { signal: o.signal });
  } catch (err) {
    report(err, tenant, job.id);
    try {
      if (job.attempts >= maxAttempts) {
        if (await failJob(o.router, tenant, o.grant, ref)) stats.failed++;
      } else if (await releaseJob(o.router, tenant, o.grant, { ...ref, delayMs: o.retryDelayMs ?? 1000 })) {
        stats.released++;
      }
    } catch (e) {
      report(e, tenant, job.id);
    }
    return;
  }
  try {
    if (await completeJob(o.router, tenant, o.grant, ref)) stats.completed++;
  } catch (err) {
    report(err, tenant, job.id);
  }
}
