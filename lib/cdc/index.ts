// Change-data-capture (catch-up) engine: the publication and slot on the source, and the
// idempotent apply of the slot's stream onto the target. See apply.ts for the resume contract.
export { ensurePublicationAndSlot, dropPublicationAndSlot, currentWalLsn, slotLagBytes, walBytesSince, slotStatus, releaseSlot } from './publication';
export type { PublicationSpec } from './publication';
export { checkReplicaIdentity } from './replica-identity';
export { applyChangesUntil } from './apply';
export type { ApplyChangesOptions, ApplyResult, ApplyProgress, StopReason } from './apply';
export { compareLsn, parseLsn, formatLsn, maxLsn, lsnDiffBytes, isLsn } from './lsn';
export { readAppliedLsn } from './progress';
