// cutover: the named steps of lib/cutover run as ONE activity, so the write pause is not
// stretched by round trips through Temporal. It is idempotent from the directory and fence
// state it finds (see `standing`), and fails closed: before the point of no return any overrun
// or mismatch unfreezes and returns a reason; after it the switch is only completed.
import { shardByName } from '../../lib/config';
import { z } from 'zod';
import type { Deps } from '../deps';
import { moveRef, beat, parse, typed, syncUnitBlobs, syncChangedUnitBlobs, rowsOf, hasBlobIndex, subUnitStream } from './context';
import type { IndexDeltaOptions } from '../../lib/blobs/index-delta';
import { ends } from './data';
import { runCutover, FENCE_APPLY_GRACE_MS, type CutoverResult, type CutoverPlan } from '../../lib/cutover/steps';
import { freezeLease, fenceLockOf } from '../../lib/cutover/lease';
import { listTenantTables } from '../../lib/shard/tables';
import { liveCutoverSteps } from '../../lib/cutover/live';
import { fenceStatus } from '../../lib/shard/prepare';
import { cutoverAbortReason } from '../../lib/obs/metrics';
import { activityLog } from '../../lib/obs/log';

export type { CutoverResult } from '../../lib/cutover/steps';

const cutoverInput = moveRef.extend({
  direction: z.enum(['forward', 'reverse']),
  /** The epoch the current owner holds; the switch makes it epoch + 1. */
  epoch: z.number().int().positive(),
  fenceBudgetMs: z.number().int().positive(),
  actor: z.string().min(1),
  /** validateMove's comparison token: the cutover then compares only what changed since (lib/cdc/delta.ts). */
  deltaToken: z.string().min(1).optional(),
});

/** The attempt's outcome as metrics and one log line; the forward lag series end with a switch. */
function observeCutover(deps: Deps, ref: { unit: string; direction: 'forward' | 'reverse' }, r: CutoverResult): void {
  const m = deps.metrics;
  const log = activityLog();
  // Tries this attempt unfroze to wait for long writers, then froze again: a pause of their own,
  // not an aborted attempt (the aborts alert counts attempts that gave up).
  for (const p of r.abortedPausesMs ?? []) m?.cutoverPause.observe({ direction: ref.direction, outcome: 'retried' }, p);
  const waits = { ...(r.abortedPausesMs ? { abortedPausesMs: r.abortedPausesMs } : {}), ...(r.writersWaitedMs ? { writersWaitedMs: r.writersWaitedMs } : {}) };
  if (r.ok) {
    if (!r.alreadyDone) m?.cutoverPause.observe({ direction: ref.direction, outcome: 'switched' }, r.pauseMs);
    m?.forgetMove(ref.unit, [m.lagBytes, m.lagSeconds, m.tableRowsCopied, m.validationMismatches]);
    log.info({ pauseMs: r.pauseMs, newEpoch: r.newEpoch, alreadyDone: r.alreadyDone, steps: r.steps, ...waits }, 'cutover switched');
    return;
  }
  const reason = cutoverAbortReason(r.reason);
  m?.cutoverAborts.inc({ direction: ref.direction, reason });
  if (r.pauseMs > 0) m?.cutoverPause.observe({ direction: ref.direction, outcome: 'aborted' }, r.pauseMs);
  log.warn({ pauseMs: r.pauseMs, abortReason: reason, reason: r.reason.slice(0, 300), ...waits }, 'cutover aborted');
}

export function createCutoverActivities(deps: Deps) {
  return {
    async cutover(input: z.infer<typeof cutoverInput>): Promise<CutoverResult> {
      const ref = parse(cutoverInput, input);
      // The timer heartbeats until the freeze and inside the frozen window while the attempt is
      // within its budget (plus the final apply's grace): a step of a few seconds on a slow link is
      // not a dead worker. Past that only the steps' progress beats (hooks.progress), so an attempt
      // stuck past its budget goes silent and Temporal hands the cutover on; the takeover, finding
      // no budget left, unfreezes (lib/cutover/steps.ts).
      let frozenAt: number | null = null;
      return typed(
        async () => {
          const { from: owner, to: next } = ends(ref, ref.direction);
          const plan: CutoverPlan = {
            unit: ref.unit,
            moveId: ref.moveId,
            owner,
            next,
            epoch: ref.epoch,
            direction: ref.direction,
            fenceBudgetMs: ref.fenceBudgetMs,
            lease: freezeLease(ref.fenceBudgetMs, deps.config.limits.freezeLeaseExtraMs),
            actor: ref.actor,
            fenceLock: fenceLockOf(deps.config.limits, ref.fenceBudgetMs),
          };
          // Every statement of the cutover runs on the bounded pools: inside the frozen window a
          // blackholed server must fail the step well before the lease runs out, not hang it.
          const pools = deps.frozenWindow;
          const rows = await rowsOf(deps, ref.unit);
          const steps = liveCutoverSteps(plan, {
            directory: pools.directoryPool(),
            ownerPool: pools.shardPool(owner),
            nextPool: pools.shardPool(next),
            ownerDsn: shardByName(deps.config, owner).dsn,
            tenantColumn: rows.column,
            unitValue: rows.value,
            splitWays: rows.subUnit?.ways,
            subUnit: subUnitStream(deps, rows),
            tables: () => listTenantTables(pools.shardPool(owner), rows.tables),
            // The pre-sync (outside the pause) works from the source's index and is fenced by the
            // move's slot like copy and soak (a cancel ends it, and removes a copy of it that lands
            // after the clean-up); the window's prefix sync (a unit not written only through the
            // index) reads neither inside the pause.
            syncBlobs: (signal, o) =>
              syncUnitBlobs(deps, owner, next, ref.unit, {
                hashUnchanged: false,
                signal,
                ...(o?.fromIndex ? { index: true as const, move: { moveId: ref.moveId, direction: ref.direction } } : {}),
              }),
            // Only a tenant's window may take the bounded delta of its index rows: a bucket unit's
            // index names blobs per key (shardctl.blob_index_<dataset>), which the delta's names do
            // not carry, so its window syncs its whole prefix.
            ...(hasBlobIndex(ref.unit)
              ? {
                  syncChangedBlobs: (names: readonly string[], seen?: IndexDeltaOptions['seenAtDestination']) =>
                    syncChangedUnitBlobs(deps, owner, next, ref.unit, names, { src: pools.shardPool(owner), dst: pools.shardPool(next) }, seen),
                }
              : {}),
            unfencedTables: async (side) => (await fenceStatus(pools.shardPool(side === 'owner' ? owner : next), deps.config)).unfenced,
            maxTxBytes: deps.config.limits.applyMaxTxBytes,
            deltaToken: ref.deltaToken,
            longWrites: { longMs: deps.config.limits.longWriteMs, maxWaitMs: deps.config.limits.longWriteMaxWaitMs },
            beat,
            faultPoint: deps.faultPoint,
          });
          deps.metrics?.cutoverAttempts.inc({ direction: ref.direction });
          const r = await runCutover(steps, plan, {
            faultPoint: deps.faultPoint,
            now: Date.now,
            progress: (step) => {
              frozenAt ??= Date.now();
              beat({ step });
            },
          });
          observeCutover(deps, ref, r);
          return r;
        },
        {
          timerBeats: () => frozenAt === null || Date.now() - frozenAt <= ref.fenceBudgetMs + FENCE_APPLY_GRACE_MS,
          doing: `cutover ${ref.direction === 'forward' ? `${ref.source} → ${ref.target}` : `${ref.target} → ${ref.source}`}`,
        },
      );
    },
  };
}
