// Authorization of a router call: which tenants a caller's grant covers. Pure; checked before
// any I/O so a refused call sends nothing anywhere.
import { ShardctlError } from '../errors';

/** What the application's auth layer says this caller may touch. */
export interface Grant {
  tenants: readonly string[] | '*';
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
