// Load generation and its evidence: `runLoadgen` writes through the router and logs every
// write's outcome; `verifyLog` proves from that log that no acknowledged write was lost and no
// refused write appeared, on each tenant's current owner.
export { startLoadgen, runLoadgen } from './run';
export type { LoadgenOptions, LoadgenHandle } from './run';
export { verifyLog, verifyRecords } from './verify';
export type { VerifyReport, VerifyOptions, RowFinding, BlobFinding, UnlinkedBlobFinding } from './verify';
export { readLog, parseLog, LOAD_TABLES, blobWritesOf } from './log';
export { snapshotUnit, addAcked, checkUnit, unitLeftovers } from './baseline';
export type { UnitBaseline, UnitFinding } from './baseline';
export type { LogRecord, LogOp, LogStatus, LoadTable, BlobWrites } from './log';
export { foldLog } from './expect';
export { formatStats } from './stats';
export type { LoadgenStats, LatencySummary } from './stats';
export { parseDurationMs } from '../duration';
export type { TenantRouter, TenantGrant, S3For } from './route';
