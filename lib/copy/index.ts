// Bulk copy of a unit's rows between shards (DESIGN.md §4 step 2) and the batched delete used
// by cancel and retire. Node-only (pg); never import from workflows.
export { copyTenantTable, type CopyTableInput, type CopyTableResult, type CopyBatchProgress, type CopyPath } from './table';
export { DEFAULT_BATCH_BYTES, DEFAULT_MAX_BATCH_ROWS, nextBatchRows } from './batch-size';
export { copyTenant, estimateRows, type CopyTenantInput } from './tenant';
export { copyProgress, clearCopyProgress, type CopyCheckpoint, type TableCopyProgress } from './checkpoint';
export { deleteTenantRows, type DeleteTenantRowsInput } from './delete';
export { chooseCopyFormat, type CopyFormat } from './format';
export { copyStreamName, STABLE_TEXT_SETTINGS_SQL, REPLICA_ROLE_SQL, type Key } from './sql';
export { DEFAULT_MAX_SOURCE_ACTIVE } from './throttle';
