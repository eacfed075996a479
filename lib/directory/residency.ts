// Residency rules (issue 13), pure: which region names are valid, and whether a shard's region is
// one a unit may live in. Read by placement, move plans and reservations (lib/directory/choose.ts,
// policy.ts) and by the planner (lib/rebalance/plan.ts), so all of them judge alike.
import { invalidInput } from '../errors';

/** A region name as `shards add --region` takes it. */
export const REGION_NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** The regions a unit may live in; null when unrestricted. */
export type Residency = readonly string[] | null;

/** `--regions a,b`, checked without I/O: names as `shards add --region` takes them, no repeats. */
export function parseRegions(text: string): string[] {
  const regions = text.split(',').map((r) => r.trim());
  for (const r of regions) {
    if (!REGION_NAME.test(r))
      throw invalidInput(`--regions wants region names of lower-case letters, digits and dashes, separated by commas; got ${JSON.stringify(r)}`);
  }
  if (new Set(regions).size !== regions.length) throw invalidInput(`--regions names a region twice: ${text}`);
  return [...regions].sort();
}

/** Whether a shard in `region` is inside `residency` (none: anywhere; a shard with no region is inside none). */
export function withinResidency(region: string | null | undefined, residency: Residency | undefined): boolean {
  return !residency || (!!region && residency.includes(region));
}

/** Why `unit` may not live on `shard` under `residency`; undefined when it may. */
export function residencyProblem(shard: { name: string; region?: string | null }, unit: string, residency: Residency): string | undefined {
  if (!residency || withinResidency(shard.region, residency)) return undefined;
  const where = shard.region ? `in region ${shard.region}` : 'in no recorded region (`shards add --region`)';
  return `target ${shard.name} is ${where}; ${unit} may reside only in ${residency.join(', ')} (\`shardctl tenant residency ${unit}\`)`;
}
