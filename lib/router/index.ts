// The router library: fenced tenant transactions routed by a cached directory snapshot.
export { Router } from './router';
export type { Mode, Isolation, RouterOptions, TenantCallOptions, RouterMetrics, TenantFn } from './router';
export type { Grant } from './grant';
export { grantCovers, assertGrantCovers } from './grant';
export { classifyError, backoffDelayMs, nextWaitMs, FROZEN_BACKOFF, STALE_BACKOFF } from './retry';
export type { ErrorClass, BackoffPolicy } from './retry';
export type { Placement, PlacementState } from './snapshot';
export { PLACEMENT_CHANNEL } from '../directory/placements';
