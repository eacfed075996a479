// The router library: fenced tenant transactions routed by a cached directory snapshot, and
// bounded fleet reads (scatter) with explicit partial results.
export { Router } from './router';
export type { Mode, Isolation, RouterOptions, TenantCallOptions, RouterMetrics, TenantFn, TenantRoute, KeyFn } from './router';
export type { TenantBlobs, PutBlobOptions } from '../blobs/fenced';
export type { Grant } from './grant';
export { grantCovers, grantCoversAll, assertGrantCovers } from './grant';
export type { ScatterOptions, ScatterResult, ScatterRow, ShardTiming } from './scatter';
export type { OrderKey, OrderSpec } from './topk';
export { IncompleteResult } from '../errors';
export type { MissingShard, MissingReason } from '../errors';
export { classifyError, backoffDelayMs, nextWaitMs, FROZEN_BACKOFF, STALE_BACKOFF } from './retry';
export type { ErrorClass, BackoffPolicy } from './retry';
export type { Placement, PlacementState } from './snapshot';
export { PLACEMENT_CHANNEL } from '../directory/placements';
