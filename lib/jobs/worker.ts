// The fenced job worker: claims, completes and releases jobs of routing units through the
// router — a tenant's rows of the demo `jobs` table, a bucket unit's rows of its dataset's jobs
// table (lib/jobs/queue.ts, which holds every statement) — so every state change carries the
// unit's epoch and is gated by the shard fence like any other write (a frozen unit's jobs stay
// queued; a moved unit's jobs are worked on the new owner). Claims use FOR UPDATE SKIP LOCKED:
// two workers never claim the same job.
//
// Leases: a claimed job is held for leaseMs (mandatory, default 60 s), renewed while its handler
// runs; every lease time is the shard's now(), at claim, renewal and expiry alike. A job whose
// lease expired (its worker died) goes back to the queue, and after maxAttempts claims it goes to
// the dead-letter state `dead` with its last error instead of looping. A completion refused
// because the unit is frozen (a cutover) is retried, on the new owner after a switch, for as long
// as the lease lasts: the job is never left running behind a worker that finished it. The lease
// must outlast the cutover's fence budget (a frozen unit renews nothing).
import { setTimeout as delay } from 'node:timers/promises';
import { ShardctlError, invalidInput } from '../errors';
import type { Grant } from '../router/grant';
import type { Router, TenantCallOptions } from '../router/router';
import { bucketJobQueue, claimQueued, insertKeyJob, requeueExpired, tenantJobQueue, updateHeld, type Job, type JobQueue } from './queue';

export type { Job, JobState } from './queue';
export { datasetJobsTableSql } from './queue';

/** A job's lease when the worker names none. */
export const DEFAULT_JOB_LEASE_MS = 60_000;

const MAX_ERROR_CHARS = 500;
const errorText = (e: unknown) => String((e as Error)?.message ?? e).slice(0, MAX_ERROR_CHARS);

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

function checkKind(kind: unknown): string {
  if (typeof kind !== 'string' || kind.length === 0 || kind.length > 200) throw invalidInput('job kind must be a non-empty string of at most 200 characters');
  return kind;
}

export interface EnqueueOptions extends TenantCallOptions {
  /** Not before this time (default now). */
  runAt?: Date;
}

/** Queues one job for the tenant; returns its id. */
export async function enqueueJob(router: Router, tenant: string, grant: Grant, kind: string, payload: unknown, opts: EnqueueOptions = {}): Promise<string> {
  checkKind(kind);
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

/**
 * Queues one job of bucketed dataset `dataset` for `key`: a row of the dataset's jobs table in
 * the key's bucket, written through the router at the bucket unit's epoch; returns its id.
 */
export function enqueueKeyJob(
  router: Router,
  dataset: string,
  key: string,
  grant: Grant,
  kind: string,
  payload: unknown,
  opts: EnqueueOptions = {},
): Promise<string> {
  checkKind(kind);
  return insertKeyJob(router, dataset, key, grant, kind, JSON.stringify(payload ?? {}), opts.runAt ?? null, opts);
}

export interface ClaimOptions extends TenantCallOptions {
  workerId: string;
  limit: number;
}

function checkLimit(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw invalidInput('limit must be an integer in 1..10000');
  return limit;
}

/** Claims up to `limit` due queued jobs of the tenant (see claimQueued). */
export async function claimJobs(router: Router, tenant: string, grant: Grant, opts: ClaimOptions): Promise<Job[]> {
  return claimFrom(tenantJobQueue(router, tenant, grant), opts);
}

/** Claims up to `limit` due queued jobs of bucket `bucket` of `dataset`, at the bucket unit's epoch. */
export async function claimBucketJobs(router: Router, dataset: string, bucket: number, grant: Grant, opts: ClaimOptions): Promise<Job[]> {
  return claimFrom(bucketJobQueue(router, dataset, bucket, grant), opts);
}

function claimFrom(q: JobQueue, opts: ClaimOptions): Promise<Job[]> {
  return claimQueued(q, checkWorkerId(opts.workerId), checkLimit(opts.limit), opts);
}

export interface JobRef extends TenantCallOptions {
  id: string;
  workerId: string;
}

const FINISH_SQL = 'state = $4, locked_by = null, updated_at = now(), last_error = coalesce($5, last_error)';
const RENEW_SQL = 'updated_at = now()';
const RELEASE_SQL = `state = 'queued', locked_by = null, run_at = now() + make_interval(secs => $4::double precision / 1000), updated_at = now(),
            last_error = coalesce($5, last_error)`;

function held(q: JobQueue, set: string, ref: JobRef, extra: unknown[]): Promise<boolean> {
  return updateHeld(q, set, checkJobId(ref.id), checkWorkerId(ref.workerId), extra, ref);
}

/** Extends the lease of a job the worker holds (the shard's now()); false when it no longer holds it. */
export function renewLease(q: JobQueue, ref: JobRef): Promise<boolean> {
  return held(q, RENEW_SQL, ref, []);
}

/** Marks a job the worker holds as done; false when the worker no longer holds it. */
export function complete(q: JobQueue, ref: JobRef): Promise<boolean> {
  return held(q, FINISH_SQL, ref, ['done', null]);
}

/** Puts a job the worker holds back in the queue (after `delayMs`); false when not held. */
export function release(q: JobQueue, ref: JobRef & { delayMs?: number; error?: string }): Promise<boolean> {
  const delayMs = ref.delayMs ?? 0;
  if (!Number.isFinite(delayMs) || delayMs < 0) throw invalidInput('delayMs must be a non-negative number');
  return held(q, RELEASE_SQL, ref, [delayMs, ref.error ?? null]);
}

/** Gives up on a job the worker holds (no more attempts); false when not held. */
export function fail(q: JobQueue, ref: JobRef & { error?: string }): Promise<boolean> {
  return held(q, FINISH_SQL, ref, ['failed', ref.error ?? null]);
}

/** Extends the lease of a tenant's job the worker holds; false when it no longer holds it. */
export function renewJobLease(router: Router, tenant: string, grant: Grant, ref: JobRef): Promise<boolean> {
  return renewLease(tenantJobQueue(router, tenant, grant), ref);
}

/** Marks a tenant's job the worker holds as done; false when the worker no longer holds it. */
export function completeJob(router: Router, tenant: string, grant: Grant, ref: JobRef): Promise<boolean> {
  return complete(tenantJobQueue(router, tenant, grant), ref);
}

/** Puts a tenant's job the worker holds back in the queue (after `delayMs`); false when not held. */
export function releaseJob(router: Router, tenant: string, grant: Grant, ref: JobRef & { delayMs?: number; error?: string }): Promise<boolean> {
  return release(tenantJobQueue(router, tenant, grant), ref);
}

/** Gives up on a tenant's job the worker holds (no more attempts); false when not held. */
export function failJob(router: Router, tenant: string, grant: Grant, ref: JobRef & { error?: string }): Promise<boolean> {
  return fail(tenantJobQueue(router, tenant, grant), ref);
}

/** Re-queues (or dead-letters) a tenant's jobs whose lease expired (see requeueExpired). */
export async function requeueExpiredJobs(
  router: Router,
  tenant: string,
  grant: Grant,
  opts: TenantCallOptions & { leaseMs: number; maxAttempts: number },
): Promise<{ requeued: number; dead: number }> {
  return requeueFrom(tenantJobQueue(router, tenant, grant), opts);
}

function requeueFrom(q: JobQueue, opts: TenantCallOptions & { leaseMs: number; maxAttempts: number }): Promise<{ requeued: number; dead: number }> {
  if (!(opts.leaseMs > 0)) throw invalidInput('leaseMs must be positive');
  if (!Number.isInteger(opts.maxAttempts) || opts.maxAttempts < 1) throw invalidInput('maxAttempts must be a positive integer');
  return requeueExpired(q, opts.leaseMs, opts.maxAttempts, opts);
}

export type JobHandler = (job: Job, ctx: { signal: AbortSignal }) => Promise<void>;

export interface JobWorkerOptions {
  router: Router;
  /** Tenants whose jobs this worker runs. */
  tenants?: readonly string[];
  /** Bucket units whose jobs this worker runs (a dataset's jobs table, one claim per bucket unit). */
  buckets?: readonly { dataset: string; bucket: number }[];
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
  onError?: (err: unknown, ctx: { unit: string; jobId?: string }) => void;
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

/** Every bucket of a dataset with B buckets, for JobWorkerOptions.buckets. */
export function allBuckets(dataset: string, buckets: number): { dataset: string; bucket: number }[] {
  return Array.from({ length: buckets }, (_, bucket) => ({ dataset, bucket }));
}

/**
 * Polls the units' queues round-robin until `signal` aborts. A refused call (Frozen, StaleRoute,
 * DirectoryUnavailable) is a pause, not a failure: the unit is skipped for this round and
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
  const queues: JobQueue[] = [
    ...(o.tenants ?? []).map((t) => tenantJobQueue(o.router, t, o.grant)),
    ...(o.buckets ?? []).map((b) => bucketJobQueue(o.router, b.dataset, b.bucket, o.grant)),
  ];
  if (queues.length === 0) throw invalidInput('a job worker needs tenants or buckets to work on');
  const call = o.call ?? {};
  const report = (err: unknown, unit: string, jobId?: string) => {
    if (isRefusal(err)) stats.refusals++;
    else stats.errors++;
    o.onError?.(err, { unit, jobId });
  };
  while (!o.signal.aborted) {
    let worked = false;
    let refused = false;
    for (const q of queues) {
      if (o.signal.aborted) break;
      try {
        const expired = await requeueFrom(q, { ...call, leaseMs, maxAttempts });
        stats.requeued += expired.requeued;
        stats.dead += expired.dead;
        const claimedAt = Date.now();
        const jobs = await claimQueued(q, workerId, batch, call);
        stats.claimed += jobs.length;
        if (jobs.length) worked = true;
        for (const job of jobs) await runOne(o, q, job, claimedAt, workerId, maxAttempts, leaseMs, call, stats, report);
      } catch (err) {
        if (isRefusal(err)) refused = true;
        report(err, q.unit);
      }
    }
    if (!worked || refused) await sleep(o.pollMs, o.signal);
  }
  return stats;
}

async function runOne(
  o: JobWorkerOptions,
  q: JobQueue,
  job: Job,
  claimedAt: number,
  workerId: string,
  maxAttempts: number,
  leaseMs: number,
  call: TenantCallOptions,
  stats: JobWorkerStats,
  report: (err: unknown, unit: string, jobId?: string) => void,
): Promise<void> {
  const ref = { ...call, id: job.id, workerId };
  const unit = q.unit;
  // When the lease was last taken or renewed (by our clock; the shard's decides expiry).
  let leasedAt = claimedAt;
  // A job of a batch waits for the ones before it: renew its lease before starting it.
  if (Date.now() - leasedAt > leaseMs / 3) {
    try {
      const renewedAt = Date.now();
      if (!(await renewLease(q, ref))) {
        stats.leasesLost++;
        return; // re-queued meanwhile: another worker runs it
      }
      leasedAt = renewedAt;
    } catch (e) {
      report(e, unit, job.id);
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
        if (await renewLease(q, ref)) leasedAt = renewedAt;
        else {
          stats.leasesLost++;
          job$.abort(new ShardctlError('Conflict', `job ${job.id}: its lease was lost (re-queued after ${leaseMs} ms without renewal)`));
        }
      } catch (e) {
        report(e, unit, job.id); // frozen or unreachable: try again at the next renewal
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
    report(failure, unit, job.id);
    try {
      if (job.attempts >= maxAttempts) {
        if (await fail(q, { ...ref, error: errorText(failure) })) stats.failed++;
      } else if (await release(q, { ...ref, delayMs: o.retryDelayMs ?? 1000, error: errorText(failure) })) {
        stats.released++;
      }
    } catch (e) {
      report(e, unit, job.id);
    }
    return;
  }
  // Completed: record it, retrying a refusal (a frozen unit, a route gone stale at a switch) for as
  // long as the claim's lease lasts. Past it the job may be re-queued and run again: at least once.
  for (;;) {
    try {
      if (await complete(q, ref)) stats.completed++;
      else stats.leasesLost++;
      return;
    } catch (err) {
      report(err, unit, job.id);
      if (!isRefusal(err) || Date.now() - leasedAt > leaseMs || o.signal.aborted) return;
      await sleep(o.pollMs, o.signal);
    }
  }
}
