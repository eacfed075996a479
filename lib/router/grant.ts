// Authorization of a router call: which tenants a caller's grant covers. Pure; checked before
// any I/O so a refused call sends nothing anywhere.
import { ShardctlError } from '../errors';

/** What the application's auth layer says this caller may touch. */
export interface Grant {
  tenants: readonly string[] | '*';
  /** Bucketed datasets (config.datasets) the caller may touch by key; absent: none. */
  datasets?: readonly string[] | '*';
}

export function grantCovers(grant: unknown, tenantId: string): boolean {
  if (!grant || typeof grant !== 'object') return false;
  const tenants = (grant as { tenants?: unknown }).tenants;
  if (tenants === '*') return true;
  return Array.isArray(tenants) && tenants.some((t) => t === tenantId);
}

/** True for a grant over every tenant (what a fleet read across shards needs). */
export function grantCoversAll(grant: unknown): boolean {
  return !!grant && typeof grant === 'object' && (grant as { tenants?: unknown }).tenants === '*';
}

export function assertGrantCovers(grant: unknown, tenantId: string): void {
  if (!grantCovers(grant, tenantId)) {
    throw new ShardctlError('Forbidden', `this caller's grant does not cover tenant ${tenantId}`, { tenant: tenantId });
  }
}

/** A bucketed dataset's keys are covered by `datasets` naming it (or '*'). */
export function assertGrantCoversDataset(grant: unknown, dataset: string): void {
  const ds = grant && typeof grant === 'object' ? (grant as { datasets?: unknown }).datasets : undefined;
  if (ds === '*' || (Array.isArray(ds) && ds.includes(dataset))) return;
  throw new ShardctlError('Forbidden', `this caller's grant does not cover dataset ${dataset}`, { dataset });
}
