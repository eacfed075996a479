// Tenant blob prefixes. Pure: safe to import from workflows. Invariant: every prefix a blob
// operation copies into or deletes under is exactly `tenants/<valid tenant id>/`, so a bug or a
// hostile id can never widen an irreversible delete to another tenant or the whole bucket.
import { ShardctlError } from '../errors';
import { validateTenantId } from '../ids';

const PREFIX_RE = /^tenants\/([^/]+)\/$/;

/** The prefix under which a tenant's blobs live in its shard's bucket. */
export function tenantBlobPrefix(tenantId: string): string {
  return `tenants/${validateTenantId(tenantId)}/`;
}

/**
 * Returns the tenant id of a prefix of the exact form `tenants/<id>/`, or throws
 * InvalidInput. The trailing slash matters: `tenants/acme` would also match `tenants/acme2/`.
 */
export function assertTenantBlobPrefix(prefix: unknown): string {
  const m = typeof prefix === 'string' ? PREFIX_RE.exec(prefix) : null;
  if (!m) {
    throw new ShardctlError('InvalidInput', `refusing blob prefix ${JSON.stringify(String(prefix).slice(0, 120))}: expected exactly "tenants/<tenant id>/"`);
  }
  try {
    return validateTenantId(m[1]);
  } catch (e: any) {
    throw new ShardctlError('InvalidInput', `refusing blob prefix ${JSON.stringify(String(prefix).slice(0, 120))}: ${e.message}`);
  }
}
