// Validation of a unit's rows between shards (DESIGN.md §4 step 4). compare.ts is Node-only
// (pg); keys.ts, merge.ts and format.ts are pure.
export {
  compareTenantRows,
  validateTenant,
  type CompareInput,
  type TableValidation,
  type TenantValidation,
  type ValidationProgress,
  type RangeEvent,
} from './compare';
export { type EqualRanges, type KeyRange } from './chunks';
export { formatMismatch, formatKey, formatValue } from './format';
export { mergeCompare, excerptPair, type Key, type KeyedRow, type ColumnDifference, type MergeResult } from './merge';
export { keyComparator, keyOrderFor, orderExpression, compareUtf8, type KeyColumn, type KeyOrder } from './keys';
export { persistentMismatches } from './settle';
export { fingerprintUnit, fingerprintTable, fingerprintDiff, type TableFingerprint } from './fingerprint';
