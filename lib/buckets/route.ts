// How the router names the routing unit of a key: a bucketed dataset's key → `bucket:<ds>:<NNNN>`,
// a tenant's row → the tenant, or its sub-unit when the tenant is split (by the hash of the
// split column's text). Node (the hash is node:crypto); the pure rules are in ./units.
import { invalidInput } from '../errors';
import { stableHash64 } from './hash';
import { BucketDataset, resolveUnit, Splits } from './units';

/** The bucket unit of `key` in dataset `dataset` (config.datasets). */
export function bucketUnitForKey(datasets: readonly BucketDataset[], dataset: string, key: string): string {
  if (!datasets.some((d) => d.name === dataset)) throw invalidInput(`unknown dataset ${dataset} (known: ${datasets.map((d) => d.name).join(', ') || 'none'})`);
  return resolveUnit({ dataset, keyHash: stableHash64(key) }, new Map(), datasets);
}

/** The unit of a tenant row: the tenant itself unless it is split, then the sub-unit `splitKey` falls in. */
export function tenantUnitForRow(tenant: string, splitKey: string | undefined, splits: Splits): string {
  return resolveUnit({ tenant, splitKeyHash: splitKey === undefined ? undefined : stableHash64(splitKey) }, splits, []);
}
