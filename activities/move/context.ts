// Shared plumbing of the move activities: input schemas, table discovery, heartbeats and the
// typed, non-retryable failures workflows branch on.
import { copyBlobPrefix, tenantBlobPrefix, type CopyBlobPrefixOptions } from '../../lib/blobs';
import { sameS3Endpoint } from '../../lib/s3';
import { shardByName } from '../../lib/config';
import { z } from 'zod';
import { ApplicationFailure, Context } from '@temporalio/activity';
import type { Deps } from '../deps';
import { listTenantTables, TenantTable } from '../../lib/shard/tables';
import { ShardctlError, isPermanentErrorType } from '../../lib/errors';

export const moveRef = z.object({
  moveId: z.string().min(1).max(200),
  unit: z.string().min(1).max(63),
  source: z.string().min(1),
  target: z.string().min(1),
});
export type MoveRef = z.infer<typeof moveRef>;

export async function tenantTables(deps: Deps, shard: string): Promise<TenantTable[]> {
  const t = deps.config.tenant;
  return listTenantTables(deps.shardPool(shard), { column: t.column, schemas: t.schemas, tables: t.tables });
}

/** Heartbeat when running inside an activity; a no-op in direct calls (tests). */
export function beat(details?: unknown): void {
  try {
    Context.current().heartbeat(details);
  } catch {
    /* not in an activity context */
  }
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
 * into non-retryable ApplicationFailures carrying the error's `type`.
 */
export async function typed<T>(fn: () => Promise<T>): Promise<T> {
  const timer = setInterval(() => beat(), 1000);
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

/** Delta-syncs a unit's blob prefix from one shard's bucket to another's (see lib/blobs/copy.ts). */
export function syncUnitBlobs(deps: Deps, from: string, to: string, unit: string, opts: Pick<CopyBlobPrefixOptions, 'onProgress' | 'hashUnchanged'> = {}) {
  const src = shardByName(deps.config, from);
  const dst = shardByName(deps.config, to);
  return copyBlobPrefix({
    src: { s3: deps.s3For(from), bucket: src.bucket },
    dst: { s3: deps.s3For(to), bucket: dst.bucket },
    prefix: tenantBlobPrefix(unit),
    sameEndpoint: sameS3Endpoint(deps.config, from, to),
    ...opts,
  });
}
