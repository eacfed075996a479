// How long a cutover's freeze may last, as durations only (no two clocks are ever compared):
// the source's freeze is a lease of `leaseMs` on the source's clock, and the directory refuses the
// switch `switchWithinMs` after its own freeze compare-and-set, on the directory's clock. Pure.
//
// Why a switch can never let the lease reopen a source that lost the unit (docs/architecture.md,
// "Freeze lease"): the directory's freeze commits before the source's fence is raised, so the
// switch deadline starts earlier than the lease, in real time; both clocks run at nearly the same
// rate, and the margin (leaseMs - switchWithinMs) covers a rate difference of up to 5 % plus the
// directory transaction's own length. So a switch that commits does so before the lease runs out.
// And the switch needs the source's freeze pinned first (lib/shard/fence.ts pinFreeze, refused
// once the lease ran out on the source's clock), so a source that loses the unit is frozen for good
// until its disown reaches it: the lease only ever reopens an owner whose freeze never switched.

export interface FreezeLease {
  /** The source freeze's lease (freezeSource's leaseMs). */
  leaseMs: number;
  /** The directory's switch deadline after its freeze compare-and-set. */
  switchWithinMs: number;
}

/** The smallest margin between the two, whatever the lease: clock-rate drift and the directory transaction. */
export const MIN_SWITCH_MARGIN_MS = 1000;
/** The margin as a share of the lease: covers a clock-rate difference of up to 5 % between the two servers. */
export const SWITCH_MARGIN_FRACTION = 0.1;

/**
 * The lease of a cutover with this fence budget: the budget plus `extraMs` (config
 * `limits.freezeLeaseExtraMs`), at least a quarter of the budget more, so the switch deadline
 * (the lease minus its margin) always leaves the whole budget to the steps before the switch.
 */
export function freezeLease(fenceBudgetMs: number, extraMs: number): FreezeLease {
  if (!(fenceBudgetMs > 0) || !(extraMs > MIN_SWITCH_MARGIN_MS)) {
    throw new Error(`freeze lease needs a positive fence budget and more than ${MIN_SWITCH_MARGIN_MS} ms extra, got ${fenceBudgetMs} and ${extraMs}`);
  }
  const leaseMs = Math.ceil(fenceBudgetMs + Math.max(extraMs, fenceBudgetMs / 4));
  const margin = Math.max(MIN_SWITCH_MARGIN_MS, Math.ceil(leaseMs * SWITCH_MARGIN_FRACTION));
  return { leaseMs, switchWithinMs: leaseMs - margin };
}

/**
 * The fence raise's lock budget on all but the last try and how many such tries (CutoverPlan.fenceLock),
 * from `limits`; none when the wait is off (0) or not shorter than the fence budget.
 */
export function fenceLockOf(
  limits: { fenceLockWaitMs: number; fenceLockRetries: number },
  fenceBudgetMs: number,
): { waitMs: number; retries: number } | undefined {
  return limits.fenceLockWaitMs > 0 && limits.fenceLockWaitMs < fenceBudgetMs && limits.fenceLockRetries > 0
    ? { waitMs: limits.fenceLockWaitMs, retries: limits.fenceLockRetries }
    : undefined;
}
