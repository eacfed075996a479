// The fenced job worker: claims, completes and releases rows of the demo `jobs` table through
// the router, so every state change carries the unit's epoch and is gated by the shard fence
// like any other write (a frozen unit's jobs stay queued; a moved unit's jobs are worked on
// the new owner). Claims use FOR UPDATE SKIP LOCKED: two workers never claim the same job.
//
// Leases: a claimed job is held for leaseMs (mandatory, default 60 s), renewed while its handler
// runs; every lease time is the shard's now(), at claim, renewal and expiry alike. A job whose
// lease expired (its worker died) goes back to the queue, and after maxAttempts claims it goes to
// the dead-letter state `dead` with its last error instead of looping. A completion refused
// because the unit is frozen (a cutover) is retried, on the new owner after a switch, for as long
// as the lease lasts: the job is never left running behind a worker that finished it. The lease
// must outlast the cutover's fence budget (a frozen unit renews nothing).
import { setTimeout as delay } from 'node:timers/promises';
import type { PoolClient } from 'pg';
import { ShardctlError, invalidInput } from '../errors';
import type { Grant } from '../router/grant';
import type { Router, TenantCallOptions } from '../router/router';

export type JobState = 'queued' | 'running' | 'done' | 'failed' | 'dead';

/** A job's lease when the worker names none. */
export const DEFAULT_JOB_LEASE_MS = 60_000;

export interface Job {
  tenantId: string;
  id: string;
  kind: string;
  state: JobState;
  runAt: Date;
  attempts: number;
  payload: unknown;
  lockedBy: string | null;
  /** Why its last attempt ended without completing it (a handler error, an expired lease). */
  lastError: string | null;
}

const JOB_COLUMNS = 'tenant_id, id, kind, state, run_at, attempts, payload, locked_by, last_error';
const MAX_ERROR_CHARS = 500;
const errorText = (e: unknown) => String((e as Error)?.message ?? e).slice(0, MAX_ERROR_CHARS);

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
    lastError: r.last_error ?? null,
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
function finishHeld(router: Router, tenant: string, grant: Grant, ref: JobRef & { error?: string }, state: 'done' | 'failed'): Promise<boolean> {
  return transition(
    router,
    tenant,
    grant,
    ref,
    `update public.jobs set state = $4, locked_by = null, updated_at = now(), last_error = coalesce($5, last_error)
      where tenant_id = $1 and id = $2 and state = 'running' and locked_by = $3`,
    [tenant, checkJobId(ref.id), checkWorkerId(ref.workerId), state, ref.error ?? null],
  );
}

/** Extends the lease of a job the worker holds (the shard's now()); false when it no longer holds it. */
export function renewJobLease(router: Router, tenant: string, grant: Grant, ref: JobRef): Promise<boolean> {
  return transition(
    router,
    tenant,
    grant,
    ref,
    `update public.jobs set updated_at = now() where tenant_id = $1 and id = $2 and state = 'running' and locked_by = $3`,
    [tenant, checkJobId(ref.id), checkWorkerId(ref.workerId)],
  );
}

/** Marks a job the worker holds as done; false when the worker no longer holds it. */
export function completeJob(router: Router, tenant: string, grant: Grant, ref: JobRef): Promise<boolean> {
  return finishHeld(router, tenant, grant, ref, 'done');
}

/** Puts a job the worker holds back in the queue (after `delayMs`); false when not held. */
export function releaseJob(router: Router, tenant: string, grant: Grant, ref: JobRef & { delayMs?: number; error?: string }): Promise<boolean> {
  const delayMs = ref.delayMs ?? 0;
  if (!Number.isFinite(delayMs) || delayMs < 0) throw invalidInput('delayMs must be a non-negative number');
  return transition(
    router,
    tenant,
    grant,
    ref,
    `update public.jobs set state = 'queued', locked_by = null, run_at = now() + make_interval(secs => $4::double precision / 1000), updated_at = now(),
            last_error = coalesce($5, last_error)
      where tenant_id = $1 and id = $2 and state = 'running' and locked_by = $3`,
    [tenant, checkJobId(ref.id), checkWorkerId(ref.workerId), delayMs, ref.error ?? null],
  );
}

/** Gives up on a job the worker holds (no more attempts); false when not held. */
export function failJob(router: Router, tenant: string, grant: Grant, ref: JobRef & { error?: string }): Promise<boolean> {
  return finishHeld(router, tenant, grant, ref, 'failed');
}

/**
 * Jobs left running longer than `leaseMs` (their worker died, by the shard's clock): back to the
 * queue, or to the dead-letter state `dead` once they were claimed `maxAttempts` times, each
 * with the reason as its last error. One fenced transaction.
 */
export async function requeueExpiredJobs(
  router: Router,
  tenant: string,
  grant: Grant,
  opts: TenantCallOptions & { leaseMs: number; maxAttempts: number },
): Promise<{ requeued: number; dead: number }> {
  if (!(opts.leaseMs > 0)) throw invalidInput('leaseMs must be positive');
  if (!Number.isInteger(opts.maxAttempts) || opts.maxAttempts < 1) throw invalidInput('maxAttempts must be a positive integer');
  return router.withTenant(
    tenant,
    grant,
    'write',
    async (tx) => {
      const r = await tx.query(
        `update public.jobs set state = case when attempts >= $3 then 'dead' else 'queued' end, locked_by = null, updated_at = now(),
                last_error = 'lease expired: worker ' || coalesce(locked_by, '?') || ' stopped without finishing attempt ' || attempts ||
                             case when attempts >= $3 then ' of ' || $3 || ' (dead-letter)' else '' end
          where tenant_id = $1 and state = 'running' and updated_at < now() - make_interval(secs => $2::double precision / 1000)
          returning state`,
        [tenant, opts.leaseMs, opts.maxAttempts],
      );
      const dead = r.rows.filter((x) => x.state === 'dead').length;
      return { requeued: r.rows.length - dead, dead };
    },
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
  /**
   * How long a claim holds a job without renewal (default DEFAULT_JOB_LEASE_MS). The worker renews
   * it every leaseMs / 3 while the handler runs, and re-queues other workers' expired claims each
   * round. Longer than the cutover's fence budget.
   */
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
  /** Expired claims of dead workers put back in the queue, and those sent to dead-letter. */
  requeued: number;
  dead: number;
  /** Jobs whose lease was lost while their handler ran (another worker may run them again). */
  leasesLost: number;
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
 * A refused completion is retried within the lease; past it, the job is re-queued — never lost.
 */
export async function runJobWorker(o: JobWorkerOptions): Promise<JobWorkerStats> {
  const workerId = checkWorkerId(o.workerId);
  const stats: JobWorkerStats = { claimed: 0, completed: 0, released: 0, failed: 0, refusals: 0, errors: 0, requeued: 0, dead: 0, leasesLost: 0 };
  const batch = o.batch ?? 10;
  const maxAttempts = o.maxAttempts ?? 5;
  const leaseMs = o.leaseMs ?? DEFAULT_JOB_LEASE_MS;
  if (!Number.isFinite(leaseMs) || leaseMs <= 0) throw invalidInput('leaseMs must be a positive number of milliseconds (a lease is mandatory)');
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1) throw invalidInput('maxAttempts must be a positive integer');
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
        const expired = await requeueExpiredJobs(o.router, tenant, o.grant, { ...call, leaseMs, maxAttempts });
        stats.requeued += expired.requeued;
        stats.dead += expired.dead;
        const claimedAt = Date.now();
        const jobs = await claimJobs(o.router, tenant, o.grant, { ...call, workerId, limit: batch });
        stats.claimed += jobs.length;
        if (jobs.length) worked = true;
        for (const job of jobs) await runOne(o, job, claimedAt, tenant, workerId, maxAttempts, leaseMs, call, stats, report);
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
  claimedAt: number,
  tenant: string,
  workerId: string,
  maxAttempts: number,
  leaseMs: number,
  call: TenantCallOptions,
  stats: JobWorkerStats,
  report: (err: unknown, tenant: string, jobId?: string) => void,
): Promise<void> {
  const ref = { ...call, id: job.id, workerId };
  // When the lease was last taken or renewed (by our clock; the shard's decides expiry).
  let leasedAt = claimedAt;
  // A job of a batch waits for the ones before it: renew its lease before starting it.
  if (Date.now() - leasedAt > leaseMs / 3) {
    try {
      const renewedAt = Date.now();
      if (!(await renewJobLease(o.router, tenant, o.grant, ref))) {
        stats.leasesLost++;
        return; // re-queued meanwhile: another worker runs it
      }
      leasedAt = renewedAt;
    } catch (e) {
      report(e, tenant, job.id);
      return; // still ours; its lease expires and it is re-queued
    }
  }
  const job$ = new AbortController();
  const stopJob = () => job$.abort(o.signal.reason);
  o.signal.addEventListener('abort', stopJob, { once: true });
  // Renew the lease while the handler runs; a lease found lost stops the handler (its signal).
  let renewing = true;
  const renewals = (async () => {
    while (renewing && !job$.signal.aborted) {
      await sleep(leaseMs / 3, job$.signal);
      if (!renewing || job$.signal.aborted) break;
      try {
        const renewedAt = Date.now();
        if (await renewJobLease(o.router, tenant, o.grant, ref)) leasedAt = renewedAt;
        else {
          stats.leasesLost++;
          job$.abort(new ShardctlError('Conflict', `job ${job.id}: its lease was lost (re-queued after ${leaseMs} ms without renewal)`));
        }
      } catch (e) {
        report(e, tenant, job.id); // frozen or unreachable: try again at the next renewal
      }
    }
  })();
  let failure: unknown;
  try {
    await o.handler(job, { signal: job$.signal });
  } catch (err) {
    failure = err;
  } finally {
    renewing = false;
    job$.abort();
    o.signal.removeEventListener('abort', stopJob);
    await renewals;
  }
  if (failure !== undefined) {
    report(failure, tenant, job.id);
    try {
      if (job.attempts >= maxAttempts) {
        if (await failJob(o.router, tenant, o.grant, { ...ref, error: errorText(failure) })) stats.failed++;
      } else if (await releaseJob(o.router, tenant, o.grant, { ...ref, delayMs: o.retryDelayMs ?? 1000, error: errorText(failure) })) {
        stats.released++;
      }
    } catch (e) {
      report(e, tenant, job.id);
    }
    return;
  }
  // Completed: record it, retrying a refusal (a frozen unit, a route gone stale at a switch) for as
  // long as the claim's lease lasts. Past it the job may be re-queued and run again: at least once.
  for (;;) {
    try {
      if (await completeJob(o.router, tenant, o.grant, ref)) stats.completed++;
      else stats.leasesLost++;
      return;
    } catch (err) {
      report(err, tenant, job.id);
      if (!isRefusal(err) || Date.now() - leasedAt > leaseMs || o.signal.aborted) return;
      await sleep(o.pollMs, o.signal);
    }
  }
}
