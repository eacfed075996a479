// A routing unit's job queue: every statement on a jobs table. A tenant's jobs are rows of the
// demo `public.jobs` (tenant_id = T); a bucket unit's jobs are rows of its dataset's jobs table
// (config.datasets[].jobsTable, bucket column = n), a dataset table like any other, so a bucket
// move carries them with the bucket's rows. Invariant: every claim, renewal, completion and
// re-queue runs in one router transaction opened for the queue's unit at its epoch (withTenant,
// withBucket), so the shard's fence gates it like any write: a frozen unit's jobs wait, a stale
// owner refuses (SC421) and the router retries on the new owner, and SKIP LOCKED keeps two
// workers from claiming one job.
import type { PoolClient } from 'pg';
import { invalidInput, ShardctlError } from '../errors';
import { bucketUnitName } from '../buckets/units';
import type { Grant } from '../router/grant';
import type { Router, TenantCallOptions } from '../router/router';
import type { DatasetConfig } from '../unit-rows';

export type JobState = 'queued' | 'running' | 'done' | 'failed' | 'dead';

export interface Job {
  /** The routing unit whose queue holds the job: a tenant, or `bucket:<dataset>:<n>`. */
  unit: string;
  /** A tenant's job: the tenant. */
  tenantId?: string;
  /** A bucket unit's job: its dataset, bucket and the key it was enqueued for. */
  dataset?: string;
  bucket?: number;
  key?: string;
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

const quoteIdent = (s: string) => `"${s.replace(/"/g, '""')}"`;
const JOB_STATE_COLUMNS = ['id', 'kind', 'state', 'run_at', 'attempts', 'payload', 'locked_by', 'last_error'];

/**
 * The DDL of a dataset's jobs table (what `config.datasets[].jobsTable` names): the bucket column
 * leads the primary key and a CHECK binds it to the key's hash, as `shards prepare` requires of
 * every dataset table, so its rows move with their bucket.
 */
export function datasetJobsTableSql(qualified: string, ds: Pick<DatasetConfig, 'column' | 'bucketColumn' | 'buckets'>): string {
  const [schema, table] = splitQualified(qualified);
  const b = quoteIdent(ds.bucketColumn);
  const k = quoteIdent(ds.column);
  return `create table if not exists ${schema}.${table} (
  ${b} int not null,
  ${k} text not null,
  id uuid not null default gen_random_uuid(),
  kind text not null,
  state text not null default 'queued' check (state in ('queued', 'running', 'done', 'failed', 'dead')),
  run_at timestamptz not null default now(),
  attempts int not null default 0,
  payload jsonb not null default '{}',
  locked_by text,
  updated_at timestamptz not null default now(),
  last_error text,
  primary key (${b}, id),
  check (${b} = shardctl.bucket_of((${k})::text, ${Number(ds.buckets)}))
);
create index if not exists ${quoteIdent(`${table.replace(/"/g, '')}_claim`)} on ${schema}.${table} (${b}, state, run_at);`;
}

function splitQualified(qualified: string): [string, string] {
  const parts = qualified.split('.');
  if (parts.length !== 2 || !parts[0] || !parts[1]) throw invalidInput(`a jobs table is named schema.table, got ${JSON.stringify(qualified.slice(0, 80))}`);
  return [quoteIdent(parts[0]), quoteIdent(parts[1])];
}

/** One unit's queue: its table, the predicate selecting its rows, and the fenced transaction it runs in. */
export interface JobQueue {
  unit: string;
  /** The quoted table. */
  table: string;
  /** The quoted column and value of the unit's predicate (`tenant_id = T`, `bucket = n`). */
  unitColumn: string;
  unitValue: string | number;
  /** Runs `fn` in a write transaction opened for the unit at its epoch (the router's unit path). */
  run<T>(fn: (tx: PoolClient) => Promise<T>, opts: TenantCallOptions): Promise<T>;
  /** The columns every statement returns, as `returning`/`select` items over alias `j`. */
  columns: string;
  toJob(row: any): Job;
}

function baseJob(r: any): Omit<Job, 'unit'> {
  return {
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

/** The queue of a tenant: rows of `public.jobs` with its tenant id. */
export function tenantJobQueue(router: Router, tenant: string, grant: Grant): JobQueue {
  return {
    unit: tenant,
    table: 'public.jobs',
    unitColumn: 'tenant_id',
    unitValue: tenant,
    run: (fn, opts) => router.withTenant(tenant, grant, 'write', (tx) => fn(tx), opts),
    columns: ['tenant_id', ...JOB_STATE_COLUMNS].map((c) => `j.${c}`).join(', '),
    toJob: (r) => ({ unit: tenant, tenantId: r.tenant_id, ...baseJob(r) }),
  };
}

/** The queue of bucket `bucket` of dataset `dataset`: rows of the dataset's jobs table in that bucket. */
export function bucketJobQueue(router: Router, dataset: string, bucket: number, grant: Grant): JobQueue {
  const ds = router.datasetOf(dataset);
  const unit = bucketUnitName(ds.name, bucket, ds.buckets);
  const [schema, table] = splitQualified(jobsTableOf(ds));
  const b = quoteIdent(ds.bucketColumn);
  const k = quoteIdent(ds.column);
  return {
    unit,
    table: `${schema}.${table}`,
    unitColumn: b,
    unitValue: bucket,
    run: (fn, opts) => router.withBucket(ds.name, bucket, grant, 'write', (tx) => fn(tx), opts),
    columns: [`j.${b} as job_bucket`, `j.${k} as job_key`, ...JOB_STATE_COLUMNS.map((c) => `j.${c}`)].join(', '),
    toJob: (r) => ({ unit, dataset: ds.name, bucket: Number(r.job_bucket), key: r.job_key, ...baseJob(r) }),
  };
}

/** The dataset's jobs table; PreconditionFailed when the config names none. */
export function jobsTableOf(ds: Pick<DatasetConfig, 'name'> & { jobsTable?: string }): string {
  if (!ds.jobsTable) {
    throw new ShardctlError('PreconditionFailed', `dataset ${ds.name} has no jobs table: set config.datasets[].jobsTable (docs/architecture.md, "Buckets")`, {
      dataset: ds.name,
    });
  }
  return ds.jobsTable;
}

/** Queues one job in the bucket of `key`; returns its id. */
export async function insertKeyJob(
  router: Router,
  dataset: string,
  key: string,
  grant: Grant,
  kind: string,
  body: string,
  runAt: Date | null,
  opts: TenantCallOptions,
): Promise<string> {
  const ds = router.datasetOf(dataset);
  const [schema, table] = splitQualified(jobsTableOf(ds));
  return router.withKey(
    ds.name,
    key,
    grant,
    'write',
    async (tx, route) => {
      const r = await tx.query(
        `insert into ${schema}.${table} (${quoteIdent(ds.bucketColumn)}, ${quoteIdent(ds.column)}, kind, payload, run_at)
         values ($1, $2, $3, $4::jsonb, coalesce($5::timestamptz, now())) returning id`,
        [route.bucket, key, kind, body, runAt],
      );
      return r.rows[0].id as string;
    },
    opts,
  );
}

/**
 * Claims up to `limit` due queued jobs of the queue's unit in one fenced write transaction: they
 * become running, locked by the worker, attempts + 1. The candidate set is a MATERIALIZED CTE
 * so the LIMIT ... SKIP LOCKED subquery is evaluated exactly once.
 */
export function claimQueued(q: JobQueue, workerId: string, limit: number, opts: TenantCallOptions): Promise<Job[]> {
  return q.run(async (tx) => {
    const r = await tx.query(
      `with picked as materialized (
         select ${q.unitColumn} as unit_value, id from ${q.table}
          where ${q.unitColumn} = $1 and state = 'queued' and run_at <= now()
          order by run_at limit $2
          for update skip locked)
       update ${q.table} j
          set state = 'running', locked_by = $3, attempts = j.attempts + 1, updated_at = now()
         from picked p
        where j.${q.unitColumn} = p.unit_value and j.id = p.id
       returning ${q.columns}`,
      [q.unitValue, limit, workerId],
    );
    return r.rows.map(q.toJob);
  }, opts);
}

/** Runs one statement on a job the worker holds ($1 unit, $2 id, $3 worker, then `extra`); true when it changed that row. */
export function updateHeld(q: JobQueue, set: string, id: string, workerId: string, extra: unknown[], opts: TenantCallOptions): Promise<boolean> {
  return q.run(
    async (tx) =>
      (
        await tx.query(`update ${q.table} set ${set} where ${q.unitColumn} = $1 and id = $2 and state = 'running' and locked_by = $3`, [
          q.unitValue,
          id,
          workerId,
          ...extra,
        ])
      ).rowCount === 1,
    opts,
  );
}

/**
 * Jobs of the unit left running longer than `leaseMs` (their worker died, by the shard's clock):
 * back to the queue, or to the dead-letter state `dead` once they were claimed `maxAttempts`
 * times, each with the reason as its last error. One fenced transaction.
 */
export function requeueExpired(q: JobQueue, leaseMs: number, maxAttempts: number, opts: TenantCallOptions): Promise<{ requeued: number; dead: number }> {
  return q.run(async (tx) => {
    const r = await tx.query(
      `update ${q.table} set state = case when attempts >= $3 then 'dead' else 'queued' end, locked_by = null, updated_at = now(),
              last_error = 'lease expired: worker ' || coalesce(locked_by, '?') || ' stopped without finishing attempt ' || attempts ||
                           case when attempts >= $3 then ' of ' || $3 || ' (dead-letter)' else '' end
        where ${q.unitColumn} = $1 and state = 'running' and updated_at < now() - make_interval(secs => $2::double precision / 1000)
        returning state`,
      [q.unitValue, leaseMs, maxAttempts],
    );
    const dead = r.rows.filter((x) => x.state === 'dead').length;
    return { requeued: r.rows.length - dead, dead };
  }, opts);
}
