// Unit blob prefixes. Pure: safe to import from workflows. Invariant: every prefix a blob
// operation copies into or deletes under is exactly `tenants/<valid tenant id>/` (a tenant) or
// `datasets/<dataset>/<n>/` (bucket n of a bucketed dataset, n as its unit name spells it), so a
// bug or a hostile id can never widen an irreversible delete to another unit or the whole bucket.
// The two forms start with different top-level segments, so no prefix of one kind contains another's.
import { ShardctlError, invalidInput } from '../errors';
import { validateTenantId } from '../ids';
import { parseUnit } from '../buckets/units';

const PREFIX_RE = /^tenants\/([^/]+)\/$/;
const BUCKET_PREFIX_RE = /^datasets\/([a-z][a-z0-9_]{0,31})\/([0-9]{1,5})\/$/;

/** The prefix under which a tenant's blobs live in its shard's bucket. */
export function tenantBlobPrefix(tenantId: string): string {
  return `tenants/${validateTenantId(tenantId)}/`;
}

/**
 * The prefix of a routing unit's blobs: `tenants/<id>/` for a tenant, `datasets/<dataset>/<n>/`
 * for `bucket:<dataset>:<n>` (n zero-padded as in the unit name). A split sub-unit has none.
 */
export function unitBlobPrefix(unit: string): string {
  const p = parseUnit(unit);
  if (p.kind === 'bucket') return `datasets/${p.dataset}/${unit.slice(unit.lastIndexOf(':') + 1)}/`;
  if (p.path.length > 0) throw invalidInput(`unit ${unit} is a split sub-unit: its blobs are its tenant's (${p.tenant})`);
  return tenantBlobPrefix(p.tenant);
}

const refuse = (prefix: unknown, why: string) =>
  new ShardctlError('InvalidInput', `refusing blob prefix ${JSON.stringify(String(prefix).slice(0, 120))}: ${why}`);

/**
 * Returns the tenant id of a prefix of the exact form `tenants/<id>/`, or throws
 * InvalidInput. The trailing slash matters: `tenants/acme` would also match `tenants/acme2/`.
 */
export function assertTenantBlobPrefix(prefix: unknown): string {
  const m = typeof prefix === 'string' ? PREFIX_RE.exec(prefix) : null;
  if (!m) throw refuse(prefix, 'expected exactly "tenants/<tenant id>/"');
  try {
    return validateTenantId(m[1]);
  } catch (e: any) {
    throw refuse(prefix, e.message);
  }
}

/**
 * Returns the unit of a prefix of the exact form `tenants/<id>/` (the tenant id) or
 * `datasets/<dataset>/<n>/` (`bucket:<dataset>:<n>`), or throws InvalidInput.
 */
export function assertUnitBlobPrefix(prefix: unknown): string {
  const b = typeof prefix === 'string' ? BUCKET_PREFIX_RE.exec(prefix) : null;
  if (b) return `bucket:${b[1]}:${b[2]}`;
  if (typeof prefix === 'string' && prefix.startsWith('datasets/')) throw refuse(prefix, 'expected exactly "datasets/<dataset>/<bucket>/"');
  const m = typeof prefix === 'string' ? PREFIX_RE.exec(prefix) : null;
  if (!m) throw refuse(prefix, 'expected exactly "tenants/<tenant id>/" or "datasets/<dataset>/<bucket>/"');
  return assertTenantBlobPrefix(prefix);
}
