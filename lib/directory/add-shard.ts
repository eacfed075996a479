// `shardctl shards add NAME --dsn-env VAR --bucket B ...` (issue 13): a new shard joins the fleet.
// The config file is the allowlist (nothing ever connects to a shard that is not in it), so the
// shard is added there, by the name of the environment variable that holds its DSN, never the DSN
// itself; and to the directory's inventory (status open, its class, region and capacities).
//
// Every check runs before anything is written, and each refusal names what to do:
//   - the name is new to the config and to the directory, the bucket is no other shard's;
//   - the variable is set and its server answers, with wal_level=logical and room for a slot;
//   - the database is not one the fleet already knows under another name (a configured shard or
//     the directory): two names for one database would let a move's retire delete its own target;
//   - the bucket exists;
//   - `shards prepare` succeeds on it (schema shardctl, fence triggers, the bucket's marker).
// Then the directory row and its audit entry are written in one transaction, and the config file
// is replaced (write to a temporary file, rename) before that transaction commits; a failed
// commit puts the file's old bytes back. One advisory lock serialises concurrent adds.
import fs from 'node:fs';
import path from 'node:path';
import { HeadBucketCommand, type S3Client } from '@aws-sdk/client-s3';
import type { Pool } from 'pg';
import { parseConfig, type Config } from '../config';
import { sharedBucketProblems } from '../blobs/bucket-identity';
import { openPool } from '../connections';
import { ShardctlError, invalidInput } from '../errors';
import { validateShardName } from '../ids';
import { s3ClientFor } from '../s3';
import { prepareAllShards, type ShardPrepareResult } from '../shard/prepare';
import { inDirectoryTransaction } from './db';
import { DEFAULT_SHARD_CAPACITY } from './shards';
import { REGION_NAME } from './residency';

export type ShardClass = 'shared' | 'dedicated';
export const SHARD_CLASSES: readonly ShardClass[] = ['shared', 'dedicated'];

export interface AddShardRequest {
  name: string;
  /** The environment variable holding the shard's DSN (the config names it; its value is read here). */
  dsnEnv: string;
  bucket: string;
  /** Load capacity (the unit of tenants' expected load, ops/s); default the directory's default. */
  capacityOps?: number;
  capacityBytes?: number;
  region?: string;
  class?: ShardClass;
  actor: string;
  reason?: string;
}

export interface AddShardResult {
  name: string;
  dsnEnv: string;
  bucket: string;
  class: ShardClass;
  region: string | null;
  capacity: number;
  capacityBytes: number | null;
  server: { version: string; database: string; systemIdentifier: string };
  tenantTables: string[];
  warnings: string[];
  configFile: string;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const ADD_LOCK = [421, 9];

function positive(v: number | undefined, what: string): number | undefined {
  if (v === undefined) return undefined;
  if (!Number.isSafeInteger(v) || v <= 0) throw invalidInput(`${what} must be a positive whole number, got ${v}`);
  return v;
}

/** What the request says, checked without I/O (a bad one changes nothing). */
export function checkAddShardRequest(config: Config, req: AddShardRequest, env: NodeJS.ProcessEnv): { dsn: string } {
  validateShardName(req.name);
  if (!req.actor?.trim()) throw invalidInput('an operator (--actor, $SHARDCTL_ACTOR or $USER) is required');
  if (!ENV_NAME.test(req.dsnEnv ?? '')) throw invalidInput(`--dsn-env wants the name of an environment variable, got ${JSON.stringify(req.dsnEnv)}`);
  const dsn = env[req.dsnEnv];
  if (!dsn) throw invalidInput(`environment variable ${req.dsnEnv} is not set: it must hold the new shard's DSN (postgres://user@host:port/db)`);
  try {
    const u = new URL(dsn);
    if (!/^postgres(ql)?:$/.test(u.protocol)) throw new Error('not postgres');
  } catch {
    throw invalidInput(`environment variable ${req.dsnEnv} does not hold a postgres:// DSN`);
  }
  if (typeof req.bucket !== 'string' || req.bucket.length < 3)
    throw invalidInput(`--bucket wants the S3 bucket of the new shard, got ${JSON.stringify(req.bucket)}`);
  if (req.class !== undefined && !SHARD_CLASSES.includes(req.class))
    throw invalidInput(`--class must be one of ${SHARD_CLASSES.join(', ')}, got ${JSON.stringify(req.class)}`);
  if (req.region !== undefined && !REGION_NAME.test(req.region))
    throw invalidInput(`--region wants a region name of lower-case letters, digits and dashes, got ${JSON.stringify(req.region)}`);
  positive(req.capacityOps, '--capacity-ops');
  positive(req.capacityBytes, '--capacity-bytes');
  if (config.shards.some((s) => s.name === req.name)) throw new ShardctlError('AlreadyExists', `shard ${req.name} is in the config already`);
  const shared = sharedBucketProblems([...config.shards, { name: req.name, bucket: req.bucket }], config.s3.endpoint);
  if (shared.length) throw new ShardctlError('PreconditionFailed', `refusing to add ${req.name}: ${shared.join('; ')}`);
  return { dsn };
}

interface ServerIdentity {
  version: string;
  database: string;
  systemIdentifier: string;
}

async function identityOf(pool: Pool, what: string): Promise<ServerIdentity> {
  try {
    const r = await pool.query(
      `select (select system_identifier::text from pg_control_system()) as sid, current_database() as db, current_setting('server_version') as version`,
    );
    return { systemIdentifier: r.rows[0].sid, database: r.rows[0].db, version: r.rows[0].version };
  } catch (e: any) {
    if (e?.code === '42501')
      throw new ShardctlError(
        'PreconditionFailed',
        `cannot read ${what}'s system identifier (${e.message}): its role needs EXECUTE on pg_control_system() (docs/production.md) so a database is never added twice`,
      );
    throw new ShardctlError('Unavailable', `cannot reach ${what}: ${e?.message ?? e}`);
  }
}

async function withPool<T>(dsn: string, fn: (p: Pool) => Promise<T>): Promise<T> {
  const p = openPool(dsn, { max: 1, connectionTimeoutMillis: 5000 });
  try {
    return await fn(p);
  } finally {
    await p.end().catch(() => {});
  }
}

/** The new server answers, is one we can move onto, and is no database the fleet knows already. */
async function probeServer(config: Config, name: string, dsn: string): Promise<{ identity: ServerIdentity; warnings: string[] }> {
  const warnings: string[] = [];
  const identity = await withPool(dsn, async (p) => {
    const id = await identityOf(p, name);
    const s = await p.query(
      `select current_setting('wal_level') as wal, current_setting('max_replication_slots')::int as slots,
              (select count(*) from pg_replication_slots)::int as used, current_setting('server_version_num')::int as num`,
    );
    const x = s.rows[0];
    if (x.num < 150000) throw new ShardctlError('PreconditionFailed', `${name} runs PostgreSQL ${id.version}: shardctl needs 15 or later`);
    if (x.wal !== 'logical')
      throw new ShardctlError(
        'PreconditionFailed',
        `${name} has wal_level=${x.wal}: catch-up needs wal_level=logical (ALTER SYSTEM SET wal_level = logical, then restart it)`,
      );
    if (x.slots - x.used < 1)
      throw new ShardctlError(
        'PreconditionFailed',
        `${name} has no free replication slot (${x.used} of max_replication_slots=${x.slots} used): raise max_replication_slots`,
      );
    if (x.slots - x.used < 2) warnings.push(`${name} has only ${x.slots - x.used} free replication slot(s): a move off it needs one, a rollback one more`);
    return id;
  });
  const key = (i: ServerIdentity) => `${i.systemIdentifier}/${i.database}`;
  const known: [string, string][] = [['the directory', config.directory.dsn], ...config.shards.map((s) => [s.name, s.dsn] as [string, string])];
  for (const [who, other] of known) {
    const id = await withPool(other, (p) => identityOf(p, who));
    if (key(id) === key(identity))
      throw new ShardctlError(
        'PreconditionFailed',
        `refusing to add ${name}: its DSN reaches database ${identity.database} of server ${identity.systemIdentifier}, which is ${who === 'the directory' ? 'the directory' : `shard ${who}`} already (two names for one database would let a move's retire delete its own target)`,
      );
  }
  return { identity, warnings };
}

async function checkBucket(s3: S3Client, name: string, bucket: string): Promise<void> {
  try {
    await s3.send(new HeadBucketCommand({ Bucket: bucket }));
  } catch (e: any) {
    const status = e?.$metadata?.httpStatusCode;
    if (status === 404 || e?.name === 'NotFound' || e?.name === 'NoSuchBucket')
      throw new ShardctlError('PreconditionFailed', `bucket ${bucket} of ${name} does not exist: create it first (each shard has a bucket of its own)`);
    if (status === 403) throw new ShardctlError('PreconditionFailed', `bucket ${bucket} of ${name} refuses shardctl's credentials (403)`);
    throw new ShardctlError('Unavailable', `cannot reach bucket ${bucket} of ${name}: ${e?.message ?? e}`);
  }
}

/** Writes `text` to `file` by a temporary file and a rename, keeping the file's mode. */
function replaceFile(file: string, text: string): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  const mode = fs.statSync(file).mode & 0o777;
  fs.writeFileSync(tmp, text, { mode });
  fs.renameSync(tmp, file);
}

/**
 * Adds a shard (see the file's comment). `config` is the one loaded from `file`; `env` holds
 * `req.dsnEnv`. Nothing is written unless every check passed.
 */
export async function addShard(
  config: Config,
  file: string,
  directory: Pool,
  req: AddShardRequest,
  env: NodeJS.ProcessEnv = process.env,
): Promise<AddShardResult> {
  const { dsn } = checkAddShardRequest(config, req, env);
  const original = fs.readFileSync(file, 'utf8');
  const raw = JSON.parse(original);
  const entry = { name: req.name, dsnEnv: req.dsnEnv, bucket: req.bucket };
  raw.shards = [...(Array.isArray(raw.shards) ? raw.shards : []), entry];
  // The file as it will be: it must still be a valid config (and the new entry's variable resolve).
  const next = parseConfig(structuredClone(raw), file, { baseDir: path.dirname(path.resolve(file)), env });

  const exists = await directory.query('select 1 from shardctl.shards where name = $1', [req.name]);
  if (exists.rowCount) throw new ShardctlError('AlreadyExists', `shard ${req.name} is in the directory already (shards list)`);

  const { identity, warnings } = await probeServer(config, req.name, dsn);
  const s3 = s3ClientFor(next, req.name);
  let prepared: ShardPrepareResult;
  try {
    await checkBucket(s3, req.name, req.bucket);
    const pool = openPool(dsn, { max: 2, connectionTimeoutMillis: 5000 });
    try {
      [prepared] = await prepareAllShards(next, () => pool, { shard: req.name, s3For: () => s3 });
    } finally {
      await pool.end().catch(() => {});
    }
  } finally {
    s3.destroy();
  }
  if (prepared.error) throw new ShardctlError('PreconditionFailed', `shards prepare failed on ${req.name}: ${prepared.error}`);

  const capacity = req.capacityOps ?? DEFAULT_SHARD_CAPACITY;
  const cls = req.class ?? 'shared';
  // What the directory and its audit entry record, and the result repeats.
  const recorded = { dsnEnv: req.dsnEnv, bucket: req.bucket, class: cls, region: req.region ?? null, capacity, capacityBytes: req.capacityBytes ?? null };
  let replaced = false;
  await inDirectoryTransaction(directory, async (c) => {
    await c.query('select pg_advisory_xact_lock($1, $2)', ADD_LOCK);
    // Another add may have won between the checks and the lock: the insert says so.
    const r = await c.query(
      `insert into shardctl.shards(name, capacity, status, class, region, capacity_bytes)
       values ($1, $2, 'open', $3, $4, $5)
       on conflict (name) do nothing returning name`,
      [req.name, capacity, cls, req.region ?? null, req.capacityBytes ?? null],
    );
    if (!r.rowCount) throw new ShardctlError('AlreadyExists', `shard ${req.name} is in the directory already (shards list)`);
    await c.query(`insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, 'shard.add', null, $2, $3)`, [
      req.actor,
      JSON.stringify({ shard: req.name, ...recorded }),
      req.reason ?? null,
    ]);
    // The config must not have changed under us (another add, an editor): compare, then replace.
    if (fs.readFileSync(file, 'utf8') !== original) throw new ShardctlError('Conflict', `${file} changed while ${req.name} was being added: run it again`);
    replaceFile(file, JSON.stringify(raw, null, 2) + '\n');
    replaced = true;
  }).catch((e) => {
    // Rolled back: the file, if this replaced it, gets its old bytes back.
    if (replaced) replaceFile(file, original);
    throw e;
  });
  return {
    name: req.name,
    ...recorded,
    server: identity,
    tenantTables: prepared.tables,
    warnings: [...warnings, ...prepared.problems],
    configFile: file,
  };
}
