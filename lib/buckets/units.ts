// Names and key filters of routing units (docs/architecture.md, "Buckets"). Pure (no I/O, no
// Node builtins): safe to import from workflows. Invariant: every key of a tenant or of a
// bucketed dataset lies in exactly one active unit, and a unit's filter (what a move selects)
// agrees with resolveUnit (what the router picks) — test/unit/buckets-units.test.ts.
//
// Grammar (no unit name is ever two kinds: tenant ids have no ':', dataset names start with a letter):
//   tenant       <tenant id>                    every row of the tenant
//   sub-unit     <unit>:<k>                     a split of <unit> into <unit>:0 .. <unit>:K-1
//   bucket       bucket:<dataset>:<NNNN>        rows whose bucket_of(key, B) = NNNN, zero-padded
//                                               to the digits of B-1 (B = 1024: bucket:events:0042)
import { invalidInput } from '../errors';
import { validateTenantId } from '../ids';

/** The largest B of a bucketed dataset: each bucket is a directory row and a fence row on its shard. */
export const MAX_BUCKETS = 65536;
/** A split's ways, and the product of the ways along a sub-unit's path (its filter's modulus). */
export const MAX_SPLIT_WAYS = 1024;
export const MAX_SPLIT_MODULUS = 2n ** 32n;

const DATASET_RE = /^[a-z][a-z0-9_]{0,31}$/;
const BUCKET_UNIT_RE = /^bucket:([a-z][a-z0-9_]{0,31}):([0-9]{1,5})$/;
const INDEX_RE = /^(0|[1-9][0-9]{0,3})$/;

/** A dataset routed by bucket: B (`buckets`) is fixed when the dataset is created. */
export interface BucketDataset {
  name: string;
  /** The routing key column, hashed as text. */
  column: string;
  buckets: number;
}

export function validateBucketCount(buckets: number): number {
  if (!Number.isInteger(buckets) || buckets < 1 || buckets > MAX_BUCKETS) {
    throw invalidInput(`a bucket count is an integer from 1 to ${MAX_BUCKETS}, got ${buckets}`);
  }
  return buckets;
}

export function validateDatasetName(name: unknown): string {
  if (typeof name !== 'string' || !DATASET_RE.test(name)) {
    throw invalidInput(`invalid dataset name ${JSON.stringify(String(name).slice(0, 80))}: use 1-32 of a-z, 0-9 and '_', starting with a letter`);
  }
  return name;
}

/** `bucket:<dataset>:<bucket>`, zero-padded to the digits of B-1 so names sort as buckets do. */
export function bucketUnitName(dataset: string, bucket: number, buckets: number): string {
  validateBucketCount(buckets);
  if (!Number.isInteger(bucket) || bucket < 0 || bucket >= buckets) throw invalidInput(`bucket ${bucket} is outside 0..${buckets - 1}`);
  return `bucket:${validateDatasetName(dataset)}:${String(bucket).padStart(String(buckets - 1).length, '0')}`;
}

/** `<unit>:<k>`, sub-unit k of a split of `parent` (a tenant or a sub-unit). */
export function splitUnitName(parent: string, index: number): string {
  if (!Number.isInteger(index) || index < 0 || index >= MAX_SPLIT_WAYS) throw invalidInput(`split index ${index} is outside 0..${MAX_SPLIT_WAYS - 1}`);
  return `${parent}:${index}`;
}

export type ParsedUnit = { kind: 'tenant'; tenant: string; path: number[] } | { kind: 'bucket'; dataset: string; bucket: number };

/** What a unit name denotes; throws InvalidInput for a name of no kind. */
export function parseUnit(unit: string): ParsedUnit {
  const b = BUCKET_UNIT_RE.exec(unit);
  if (b) return { kind: 'bucket', dataset: b[1], bucket: Number(b[2]) };
  const [tenant, ...rest] = unit.split(':');
  if (!rest.every((s) => INDEX_RE.test(s)))
    throw invalidInput(`invalid unit ${JSON.stringify(unit.slice(0, 120))}: expected <tenant>[:<k>]... or bucket:<dataset>:<n>`);
  return { kind: 'tenant', tenant: validateTenantId(tenant), path: rest.map(Number) };
}

/**
 * Whether `unit` is tenant `tenant`'s: the tenant itself, or one of its sub-units once it is split
 * (a shard dedicated to a tenant holds its sub-units too). Never throws: a name that is no unit is no one's.
 */
export function isUnitOfTenant(unit: string, tenant: string): boolean {
  if (unit === tenant) return true;
  if (!unit.startsWith(`${tenant}:`)) return false;
  try {
    const p = parseUnit(unit);
    return p.kind === 'tenant' && p.tenant === tenant;
  } catch {
    return false;
  }
}

/** Splits in force: unit → K (the unit was split into unit:0 .. unit:K-1 and is no longer active). */
export type Splits = ReadonlyMap<string, number>;

/** A key: a tenant's row (with the hash of its split column) or a bucketed dataset's row. */
export type RoutingKey = { tenant: string; splitKeyHash?: bigint } | { dataset: string; keyHash: bigint };

/**
 * The rows a unit holds, as one residue test on a 64-bit hash (the form a move's row filter
 * takes): tenant rows with stable_hash(split column) mod modulus = residue (modulus 1: all of
 * them); bucket rows with stable_hash(key) mod buckets = bucket. A sub-unit k of a unit (M, r)
 * split K ways is (M·K, r + k·M): mixed radix, so a split moves no row and sub-units of sub-units
 * stay disjoint.
 */
export type UnitFilter =
  { kind: 'tenant'; tenant: string; modulus: bigint; residue: bigint } | { kind: 'bucket'; dataset: string; buckets: number; bucket: number };

export function unitFilter(unit: string, splits: Splits, datasets: readonly BucketDataset[]): UnitFilter {
  const p = parseUnit(unit);
  if (p.kind === 'bucket') {
    const ds = datasets.find((d) => d.name === p.dataset);
    if (!ds) throw invalidInput(`unit ${unit} names unknown dataset ${p.dataset}`);
    if (p.bucket >= ds.buckets || bucketUnitName(ds.name, p.bucket, ds.buckets) !== unit)
      throw invalidInput(`unit ${unit} is not a bucket of ${ds.name} (B = ${ds.buckets})`);
    return { kind: 'bucket', dataset: ds.name, buckets: ds.buckets, bucket: p.bucket };
  }
  let parent = p.tenant;
  let modulus = 1n;
  let residue = 0n;
  for (const k of p.path) {
    const ways = splits.get(parent);
    if (ways === undefined || k >= ways)
      throw invalidInput(`unit ${unit} does not exist: ${parent} is ${ways === undefined ? 'not split' : `split ${ways} ways`}`);
    residue += BigInt(k) * modulus;
    modulus *= BigInt(ways);
    parent = splitUnitName(parent, k);
  }
  return { kind: 'tenant', tenant: p.tenant, modulus, residue };
}

export function filterHoldsKey(f: UnitFilter, key: RoutingKey): boolean {
  if (f.kind === 'bucket') return 'dataset' in key && key.dataset === f.dataset && key.keyHash % BigInt(f.buckets) === BigInt(f.bucket);
  if (!('tenant' in key) || key.tenant !== f.tenant) return false;
  if (f.modulus === 1n) return true;
  return key.splitKeyHash !== undefined && key.splitKeyHash % f.modulus === f.residue;
}

/** The one active unit that holds `key`: what the router names for it. */
export function resolveUnit(key: RoutingKey, splits: Splits, datasets: readonly BucketDataset[]): string {
  if ('dataset' in key) {
    const ds = datasets.find((d) => d.name === key.dataset);
    if (!ds) throw invalidInput(`unknown dataset ${key.dataset}`);
    return bucketUnitName(ds.name, Number(key.keyHash % BigInt(ds.buckets)), ds.buckets);
  }
  let unit = validateTenantId(key.tenant);
  let rest = key.splitKeyHash;
  for (let ways = splits.get(unit); ways !== undefined; ways = splits.get(unit)) {
    if (rest === undefined) throw invalidInput(`tenant ${key.tenant} is split (${unit} into ${ways}): its rows route by the split column, which the key lacks`);
    unit = splitUnitName(unit, Number(rest % BigInt(ways)));
    rest /= BigInt(ways);
  }
  return unit;
}

/** The splits after splitting the active unit `unit` into `ways` sub-units (which start where it was). */
export function withSplit(splits: Splits, unit: string, ways: number): Map<string, number> {
  if (parseUnit(unit).kind !== 'tenant') throw invalidInput(`only tenants and their sub-units split, not ${unit}`);
  if (splits.has(unit)) throw invalidInput(`unit ${unit} is already split`);
  const f = unitFilter(unit, splits, []) as Extract<UnitFilter, { kind: 'tenant' }>;
  if (!Number.isInteger(ways) || ways < 2 || ways > MAX_SPLIT_WAYS) throw invalidInput(`a split has 2 to ${MAX_SPLIT_WAYS} ways, got ${ways}`);
  if (f.modulus * BigInt(ways) > MAX_SPLIT_MODULUS) throw invalidInput(`splitting ${unit} ${ways} ways would make its sub-units' modulus exceed 2^32`);
  return new Map(splits).set(unit, ways);
}
