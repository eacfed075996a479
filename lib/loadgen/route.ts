// What loadgen and seed need from the router, as a structural type (any router with this
// `withTenant` works), and how a write learns which shard its transaction runs on: blobs go
// into that shard's bucket, fenced by the transaction, before the row that names them commits there.
import type { Pool, PoolClient } from 'pg';
import type { S3Client } from '@aws-sdk/client-s3';
import type { Config } from '../config';
import { ShardctlError } from '../errors';
import { shardByName } from '../config';
import { tenantBlobs, type TenantBlobs } from '../blobs/fenced';

export interface TenantGrant {
  tenants: string[] | '*';
}

export interface TenantRouter {
  withTenant<T>(
    tenant: string,
    grant: TenantGrant,
    mode: 'read' | 'write',
    fn: (tx: PoolClient, route?: unknown) => Promise<T>,
    opts?: { deadlineMs?: number; retryBudget?: number; splitKey?: string },
  ): Promise<T>;
}

export type S3For = (shard: string) => S3Client;

interface Endpoint {
  host: string;
  port: number;
  database: string;
}

function endpointOfDsn(dsn: string): Endpoint | undefined {
  try {
    const u = new URL(dsn);
    return { host: decodeURIComponent(u.hostname), port: Number(u.port || 5432), database: decodeURIComponent(u.pathname.replace(/^\//, '')) };
  } catch {
    return undefined;
  }
}

const normHost = (h: string) => (h === 'localhost' || h === '::1' ? '127.0.0.1' : h);

/**
 * The configured shard a transaction runs on: the router's own answer when it passes a route
 * with a `shard`, else the shard whose DSN names the client's host, port and database.
 */
export function shardOfTransaction(config: Config, tx: PoolClient, route?: unknown): string {
  const named = (route as any)?.shard;
  if (typeof named === 'string') return named;
  if (named && typeof named.name === 'string') return named.name;
  const c = tx as any;
  const host = normHost(String(c.host ?? c.connectionParameters?.host ?? ''));
  const port = Number(c.port ?? c.connectionParameters?.port);
  const database = String(c.database ?? c.connectionParameters?.database ?? '');
  for (const s of config.shards) {
    const e = endpointOfDsn(s.dsn);
    if (e && normHost(e.host) === host && e.port === port && e.database === database) return s.name;
  }
  throw new ShardctlError('NotFound', `cannot tell which shard the transaction runs on (${host}:${port}/${database} matches no configured shard DSN)`);
}

export interface Placement {
  shard: string;
  epoch: number;
  state: string;
}

/**
 * The owners now of `tenants`' rows: each unsplit tenant's placement, and a split tenant's
 * sub-units' (`splits`: tenant → K, from the directory), so a row's owner is the placement of
 * `tenantUnitForRow(tenant, its split key, splits)`. A tenant with neither is an error naming it.
 */
export async function currentOwners(directory: Pool, tenants: string[]): Promise<{ placements: Map<string, Placement>; splits: Map<string, number> }> {
  const sp = await directory.query('select unit, ways from shardctl.splits where unit = any($1::text[])', [tenants]);
  const splits = new Map<string, number>(sp.rows.map((r) => [r.unit, Number(r.ways)]));
  const units = tenants.flatMap((t) => (splits.has(t) ? Array.from({ length: splits.get(t)! }, (_, k) => `${t}:${k}`) : [t]));
  return { placements: await currentPlacements(directory, units), splits };
}

/** Current owners from the directory; a tenant without a unit is an error naming it. */
export async function currentPlacements(directory: Pool, tenants: string[]): Promise<Map<string, Placement>> {
  const r = await directory.query('select unit, shard, epoch, state from shardctl.units where unit = any($1::text[])', [tenants]);
  const out = new Map<string, Placement>();
  for (const row of r.rows) out.set(row.unit, { shard: row.shard, epoch: Number(row.epoch), state: row.state });
  const missing = tenants.filter((t) => !out.has(t));
  if (missing.length) throw new ShardctlError('NotFound', `no placement in the directory for tenant(s) ${missing.join(', ')}`);
  return out;
}

/**
 * The tenant's blobs in the bucket of the shard the transaction runs on, fenced by that
 * transaction (lib/blobs/fenced.ts): the router's own when it passes them, else over `tx`.
 */
export function blobsOfTransaction(config: Config, tx: PoolClient, route: unknown, unit: string, s3For: S3For): TenantBlobs {
  const own = (route as { blobs?: TenantBlobs } | undefined)?.blobs;
  if (own && typeof own.put === 'function') return own;
  const shard = shardOfTransaction(config, tx, route);
  return tenantBlobs(tx, unit, { shard, s3: s3For(shard), bucket: shardByName(config, shard).bucket }, { tenantColumn: config.tenant.column });
}
