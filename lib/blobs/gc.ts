// The blob collector (`shardctl blobs gc`): deletes, from the bucket of the shard that owns a
// unit (a tenant, or a bucket unit of a dataset: its index is shardctl.blob_index_<dataset>, its
// objects under datasets/<dataset>/<n>/), the version objects (lib/blobs/index-table.ts) that no committed index row names — the
// superseded and deleted versions, and uploads whose transaction never committed. It runs only on
// the owner: the directory must place the unit there, active, with no move in flight, the bucket's
// marker must name that shard, and the shard's own fence must accept a write of the unit at the
// directory's epoch (the same check every router write passes, in the transaction that deletes).
// It never deletes an object an index row names: its last look at the index is taken under the
// index lock held exclusively (a put holds it shared from before its upload until its row
// commits), and the deletes run while that lock is held. Objects younger than the grace period are
// kept as well, and objects that are not version objects (a key the application manages itself)
// are never touched. A run that deletes (not a dry run, which changes nothing and records
// nothing, as every dry run) appends one `blobs.gc` audit entry per tenant: who, why, and the
// objects deleted, once they are gone.
import type { Pool } from 'pg';
import { ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import { ShardctlError, invalidInput } from '../errors';
import { appendAudit } from '../directory/audit';
import { getPlacement } from '../directory/placements';
import { listOpenReservations } from '../directory/reservations';
import { openTransactionSql } from '../router/open-tx';
import { assertBucketOf, type ShardBucket } from './marker';
import { deleteKeys } from './delete';
import { unitBlobPrefix } from './prefix';
import { hasBlobIndex, isVersionKey, lockIndexExclusive, missingIndex, referencedKeys, unitIndexScope } from './index-table';

export interface GcDeps {
  tenantColumn: string;
  /** The configured datasets (config.datasets): a bucket unit's index table and columns. */
  datasets?: readonly { name: string; column: string; bucketColumn: string }[];
  directoryPool(): Pool;
  shardPool(shard: string): Pool;
  bucketOf(shard: string): ShardBucket;
}

export interface GcOptions {
  /** The unit: a tenant, or a bucket unit `bucket:<dataset>:<n>` of a configured dataset. */
  tenant: string;
  /** Keep unreferenced objects younger than this (by the shard's clock against the object's LastModified). */
  graceMs: number;
  dryRun?: boolean;
  /** The shard the operator means to collect on; refused unless it is the tenant's owner. */
  shard?: string;
  /** Statement timeout of the deleting transaction (default 60 s). */
  statementTimeoutMs?: number;
  /** Who collects, and why: recorded in the audit log by a run that is not a dry run. */
  operator: { actor: string; reason?: string };
  /** Record the audit entry only when something was deleted (the worker's periodic collector). */
  auditOnlyDeletes?: boolean;
}

export const GC_AUDIT_ACTION = 'blobs.gc';
/** How many deleted keys an audit entry names (the count is always exact). */
export const GC_AUDIT_KEYS = 100;

export interface GcReport {
  tenant: string;
  shard: string;
  epoch: number;
  bucket: string;
  dryRun: boolean;
  /** Objects under the tenant's prefix. */
  scanned: number;
  /** Version objects a committed index row names (kept). */
  referenced: number;
  /** Unreferenced version objects younger than the grace period (kept). */
  young: number;
  /** Objects that are not version objects: the application's own keys (never touched). */
  notVersions: number;
  /** The unreferenced version objects deleted (or, with dryRun, that would be). */
  collected: string[];
}

interface Listed {
  key: string;
  lastModified: Date;
}

async function listWithTimes(s3: S3Client, bucket: string, prefix: string): Promise<Listed[]> {
  const out: Listed[] = [];
  let token: string | undefined;
  do {
    const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }));
    for (const o of page.Contents ?? []) {
      if (o.Key === undefined || !o.Key.startsWith(prefix)) continue;
      // No time: treated as brand new, so it is kept.
      out.push({ key: o.Key, lastModified: o.LastModified ?? new Date(8.64e15) });
    }
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  return out;
}

/** Refusals before anything is listed: what must hold for `shard` to be the one to collect on. */
async function ownerOf(deps: GcDeps, tenant: string, asked: string | undefined) {
  const dir = deps.directoryPool();
  const p = await getPlacement(dir, tenant);
  if (!p) throw new ShardctlError('NotFound', `tenant ${tenant} has no placement in the directory`, { tenant });
  if (asked !== undefined && asked !== p.shard) {
    throw new ShardctlError(
      'PreconditionFailed',
      `refusing to collect ${tenant}'s blobs on ${asked}: its owner is shard ${p.shard} (epoch ${p.epoch}); gc runs on the owner only`,
      {
        tenant,
        shard: asked,
        owner: p.shard,
      },
    );
  }
  if (p.state !== 'active') {
    throw new ShardctlError(
      'PreconditionFailed',
      `refusing to collect ${tenant}'s blobs: the unit is ${p.state} (move ${p.moveId ?? '?'}); run gc after the move`,
      {
        tenant,
      },
    );
  }
  const moving = (await listOpenReservations(dir)).filter((r) => r.unit === tenant);
  if (moving.length > 0) {
    throw new ShardctlError(
      'PreconditionFailed',
      `refusing to collect ${tenant}'s blobs: move ${moving[0].moveId} (${moving[0].source} -> ${moving[0].target}) is in flight; run gc after it ends`,
      { tenant, moveId: moving[0].moveId },
    );
  }
  return p;
}

/** Collects one tenant's unreferenced version objects on its owner (see the module comment). */
export async function collectTenantBlobs(deps: GcDeps, opts: GcOptions): Promise<GcReport> {
  const tenant = opts.tenant;
  const scope = unitIndexScope({ tenant: { column: deps.tenantColumn }, datasets: deps.datasets ?? [] }, tenant);
  if (!scope) throw invalidInput(`${tenant} has no blob index to collect by: gc takes a tenant or a bucket unit of a configured dataset`);
  if (!Number.isFinite(opts.graceMs) || opts.graceMs < 0) throw invalidInput(`the grace period must be a non-negative duration, got ${opts.graceMs}`);
  const p = await ownerOf(deps, tenant, opts.shard);
  const bucket = deps.bucketOf(p.shard);
  await assertBucketOf(bucket, `collect ${tenant}'s blobs`);
  const prefix = unitBlobPrefix(tenant);
  const listed = await listWithTimes(bucket.s3, bucket.bucket, prefix);

  const c = await deps.shardPool(p.shard).connect();
  let broken: Error | undefined;
  try {
    // The owner's own write check, at the directory's epoch: refused (stale route, not owned,
    // frozen) exactly when a router's write would be, and it holds the unit's fence lock shared, so
    // no cutover can raise the fence while objects are deleted.
    // Read committed, whatever the server's default: the index is read after the lock is granted,
    // so it must see every row committed while waiting for it (an older snapshot would not).
    await c.query(openTransactionSql(p, 'write', 'read committed', opts.statementTimeoutMs ?? 60_000)).catch((e: any) => {
      throw new ShardctlError(
        'PreconditionFailed',
        `refusing to collect ${tenant}'s blobs: shard ${p.shard} does not accept its writes at epoch ${p.epoch} (${e?.message ?? e}); gc runs on the owner only`,
        { tenant, shard: p.shard, epoch: p.epoch, code: e?.code },
      );
    });
    if (!(await hasBlobIndex(c, scope.table))) throw missingIndex(p.shard, scope.table);
    await lockIndexExclusive(c, tenant);
    const now = new Date((await c.query<{ now: Date }>('select now() as now')).rows[0].now);
    const referenced = await referencedKeys(c, scope);
    const report: GcReport = {
      tenant,
      shard: p.shard,
      epoch: p.epoch,
      bucket: bucket.bucket,
      dryRun: opts.dryRun === true,
      scanned: listed.length,
      referenced: 0,
      young: 0,
      notVersions: 0,
      collected: [],
    };
    for (const o of listed) {
      if (!isVersionKey(o.key)) report.notVersions++;
      else if (referenced.has(o.key)) report.referenced++;
      else if (now.getTime() - o.lastModified.getTime() < opts.graceMs) report.young++;
      else report.collected.push(o.key);
    }
    if (!opts.dryRun && report.collected.length > 0) await deleteKeys(bucket, report.collected);
    await c.query('commit');
    // After the commit: the index lock is not held while the directory is written.
    if (!opts.dryRun && (report.collected.length > 0 || !opts.auditOnlyDeletes)) await recordCollection(deps, opts, report);
    return report;
  } catch (e) {
    await c.query('rollback').catch((err: Error) => {
      broken = err;
    });
    throw e;
  } finally {
    c.release(broken);
  }
}

/** The `blobs.gc` entry of one tenant's collection: what it deleted, and what it kept and why. */
async function recordCollection(deps: GcDeps, opts: GcOptions, r: GcReport): Promise<void> {
  await appendAudit(deps.directoryPool(), {
    ...opts.operator,
    action: GC_AUDIT_ACTION,
    unit: r.tenant,
    detail: {
      shard: r.shard,
      epoch: r.epoch,
      bucket: r.bucket,
      dryRun: false,
      graceMs: opts.graceMs,
      deleted: r.collected.length,
      keys: r.collected.slice(0, GC_AUDIT_KEYS),
      ...(r.collected.length > GC_AUDIT_KEYS ? { keysOmitted: r.collected.length - GC_AUDIT_KEYS } : {}),
      kept: { referenced: r.referenced, young: r.young, notVersions: r.notVersions },
    },
  });
}
