// Blob writes fenced like rows (DESIGN.md §3): inside a tenant transaction on the shard that owns
// the unit, a PUT or DELETE first runs the shard's write check (shardctl.assert_writable: stale
// epoch, not owned, frozen — and the unit's shared lock, held until the transaction ends), then
// touches the object in that shard's bucket. A cutover's fence takes that lock exclusively, so it
// waits for every blob write in flight, and once it is up no blob write under the old epoch reaches
// the old owner's bucket. Reads check ownership like every router read (assert_readable).
//
// What this does not cover: an S3 request the client gave up on that the server still applies
// later, and writers that bypass the router (foreign tools, old configs). Those are what the blob
// ledger (./ledger) catches: they block retire and rollback clean-up with the key.
//
// Two APIs: `put`/`get`/`delete` touch the object named by the key directly (the application
// keeps the key in its own rows); `write`/`read`/`stat`/`unlink` go through the blob index
// (./index-table), the authority: a new immutable object per version, its sha256 recorded in the
// index row that this same transaction commits.
import { createHash } from 'node:crypto';
import type { PoolClient } from 'pg';
import { DeleteObjectCommand, GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { ShardctlError, invalidInput } from '../errors';
import { isNotFound, normalizeEtag } from './list';
import type { ShardBucket } from './marker';
import { parseUnit } from '../buckets/units';
import { unitBlobPrefix } from './prefix';
import {
  deleteIndexRow,
  findIndexRow,
  lockIndexShared,
  looksLikeVersionName,
  newVersionId,
  tenantIndexScope,
  upsertIndexRow,
  versionKeyOf,
  type BlobVersion,
  type IndexScope,
} from './index-table';

export interface PutBlobOptions {
  contentType?: string;
  metadata?: Record<string, string>;
}

/** A tenant's blobs inside one fenced transaction (see Router.withTenant's route). */
export interface TenantBlobs {
  /** The object key of `name` (under the unit's prefix: `tenants/<id>/`, or `datasets/<dataset>/<n>/` for a bucket unit). */
  keyOf(name: string): string;
  put(name: string, body: Uint8Array | string, opts?: PutBlobOptions): Promise<{ key: string; etag: string }>;
  /** The object's bytes, or undefined when there is none. */
  get(name: string): Promise<Buffer | undefined>;
  delete(name: string): Promise<{ key: string }>;
  /** Through the index: uploads a new immutable version of `name`, then records it in the index (committed with the transaction). */
  write(name: string, body: Uint8Array | string, opts?: PutBlobOptions): Promise<BlobVersion>;
  /** Through the index: the current version of `name`, or undefined. */
  stat(name: string): Promise<BlobVersion | undefined>;
  /** Through the index: the current version's bytes, or undefined when the index has no row. */
  read(name: string): Promise<Buffer | undefined>;
  /** Through the index: removes the row (the object stays for the collector); true when there was one. */
  unlink(name: string): Promise<boolean>;
}

export interface TenantBlobsOptions {
  signal?: AbortSignal;
  /** The tenant column (config tenant.column): a tenant's index rows (shardctl.blob_index), unless `index` is given. */
  tenantColumn?: string;
  /**
   * Where the index's methods keep this route's blob names: one key's rows of a bucket's dataset
   * index (`bucketIndexScope(ds, bucket, key)`, with `key`, whose folder its version objects go in).
   */
  index?: { scope: IndexScope; key: string };
}

const MAX_NAME_BYTES = 900;

/** `name` under the unit's prefix: relative, no empty, `.` or `..` segments, no control characters. */
export function blobKeyOf(unit: string, name: string): string {
  if (typeof name !== 'string' || name.length === 0) throw invalidInput('a blob name is a non-empty string');
  const segments = name.split('/');
  // eslint-disable-next-line no-control-regex
  if (segments.some((s) => s === '' || s === '.' || s === '..') || /[\u0000-\u001f\u007f]/.test(name) || Buffer.byteLength(name) > MAX_NAME_BYTES) {
    throw invalidInput(
      `invalid blob name ${JSON.stringify(name.slice(0, 80))}: relative, '/'-separated, no empty, '.' or '..' segments, no control characters, at most ${MAX_NAME_BYTES} bytes`,
    );
  }
  return `${unitBlobPrefix(unit)}${name}`;
}

/** The name of a key under the unit's prefix (the inverse of blobKeyOf). */
export function blobNameOf(unit: string, key: string): string {
  const prefix = unitBlobPrefix(unit);
  if (!key.startsWith(prefix)) throw invalidInput(`blob key ${JSON.stringify(key.slice(0, 120))} is not under ${prefix}`);
  return key.slice(prefix.length);
}

/**
 * The unit's blobs in `bucket` (the bucket of the shard `tx` runs on), fenced by `tx`. The caller
 * keeps `tx` open until the object calls return, and commits after them.
 */
export function tenantBlobs(client: Pick<PoolClient, 'query'>, unit: string, bucket: ShardBucket, opts: TenantBlobsOptions = {}): TenantBlobs {
  const signal = opts.signal;
  // Blob calls may run concurrently (several uploads of one transaction at once); their
  // statements on the transaction's one connection go one after another, as pg requires.
  const tx = serialQueries(client);
  // Once passed, the check holds until the transaction ends: the unit's shared lock it took keeps
  // every fence change out. So it runs once per transaction (also keeping concurrent puts from
  // issuing queries on one client at once).
  let checked: Promise<unknown> | undefined;
  const writable = () => (checked ??= tx.query('select shardctl.assert_writable($1)', [unit]));
  // The index lock, shared, held from before the first upload until the transaction ends: the
  // collector cannot look at the index between this put's upload and its row's commit.
  let indexLocked: Promise<unknown> | undefined;
  const lockIndex = () => (indexLocked ??= writable().then(() => lockIndexShared(tx, unit)));
  // A bucket unit's blob names live per key in its dataset's index (shardctl.blob_index_<dataset>,
  // moved with the bucket): only a route opened for one key (withKey) has them.
  const isBucket = parseUnit(unit).kind === 'bucket';
  const scope = (): IndexScope => {
    if (opts.index) return opts.index.scope;
    if (isBucket)
      throw new ShardctlError(
        'PreconditionFailed',
        `the blob index of bucket unit ${unit} keeps names per key: use route.blobs under router.withKey (the key's blobs), not a route without a key`,
      );
    if (!opts.tenantColumn) throw invalidInput('the blob index needs the tenant column (tenantBlobs opts.tenantColumn)');
    return tenantIndexScope(opts.tenantColumn, unit);
  };
  const checkedName = (name: string) => {
    blobKeyOf(unit, name);
    if (looksLikeVersionName(name))
      throw invalidInput(`invalid blob name ${JSON.stringify(name.slice(0, 80))}: it ends like a version object key (@<version>)`);
    return name;
  };
  return {
    keyOf: (name) => blobKeyOf(unit, name),
    async put(name, body, opts = {}) {
      // Never a key the collector could take for an unreferenced version of the index.
      const key = blobKeyOf(unit, checkedName(name));
      await writable();
      const r = await bucket.s3.send(
        new PutObjectCommand({
          Bucket: bucket.bucket,
          Key: key,
          Body: body,
          ContentType: opts.contentType ?? 'application/octet-stream',
          Metadata: opts.metadata,
        }),
        { abortSignal: signal },
      );
      return { key, etag: normalizeEtag(r.ETag) };
    },
    async get(name) {
      const key = blobKeyOf(unit, name);
      try {
        const r = await bucket.s3.send(new GetObjectCommand({ Bucket: bucket.bucket, Key: key }), { abortSignal: signal });
        return Buffer.from(await r.Body!.transformToByteArray());
      } catch (e) {
        if (isNotFound(e)) return undefined;
        throw e;
      }
    },
    async delete(name) {
      const key = blobKeyOf(unit, name);
      await writable();
      await bucket.s3.send(new DeleteObjectCommand({ Bucket: bucket.bucket, Key: key }), { abortSignal: signal });
      return { key };
    },
    async write(name, body, putOpts = {}) {
      const where = scope();
      checkedName(name);
      await lockIndex();
      const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
      const v: BlobVersion = {
        name,
        key: '',
        version: newVersionId(),
        size: bytes.byteLength,
        sha256: createHash('sha256').update(bytes).digest('hex'),
        contentType: putOpts.contentType ?? 'application/octet-stream',
      };
      v.key = versionKeyOf(unit, name, v.version, opts.index?.key);
      // Create-only: a version key is never overwritten (an existing one would be a bug, not a retry).
      await bucket.s3.send(
        new PutObjectCommand({ Bucket: bucket.bucket, Key: v.key, Body: bytes, ContentType: v.contentType!, Metadata: putOpts.metadata, IfNoneMatch: '*' }),
        { abortSignal: signal },
      );
      await upsertIndexRow(tx, where, v);
      return v;
    },
    stat: (name) => findIndexRow(tx, scope(), checkedName(name)),
    async read(name) {
      const v = await findIndexRow(tx, scope(), checkedName(name));
      if (!v) return undefined;
      const r = await bucket.s3.send(new GetObjectCommand({ Bucket: bucket.bucket, Key: v.key }), { abortSignal: signal }).catch((e) => {
        if (isNotFound(e)) {
          throw new ShardctlError('Conflict', `the blob index names ${v.key} for ${name}, and bucket ${bucket.bucket} has no such object`, {
            key: v.key,
            bucket: bucket.bucket,
          });
        }
        throw e;
      });
      return Buffer.from(await r.Body!.transformToByteArray());
    },
    async unlink(name) {
      const where = scope();
      checkedName(name);
      await writable();
      return deleteIndexRow(tx, where, name);
    },
  };
}

/** `client` with its queries issued one at a time, in call order (a query waits for the previous one to settle). */
function serialQueries(client: Pick<PoolClient, 'query'>): Pick<PoolClient, 'query'> {
  let last: Promise<unknown> = Promise.resolve();
  const query = (...args: unknown[]) => {
    const run = last.then(
      () => (client.query as (...a: unknown[]) => Promise<unknown>)(...args),
      () => (client.query as (...a: unknown[]) => Promise<unknown>)(...args),
    );
    last = run.catch(() => undefined);
    return run;
  };
  return { query } as unknown as Pick<PoolClient, 'query'>;
}
