// The rebalance workflow's activities: plan from the directory now (the first plan and every
// re-plan after a failed move) and record what the run decided. Each is idempotent: planning
// changes nothing; marking a shard draining or dedicated is a set to a value; closing a drained
// shard is a set to closed that checks, in the same transaction, that nothing is left on it;
// undoing a cancelled isolate's dedication is a compare-and-set under the shard's row lock.
import { z } from 'zod';
import type { Deps } from '../deps';
import { planFromDirectory } from '../../lib/rebalance/fleet';
import { setShardDedication, setShardStatus, getShard, closeDrainedShard, undoIsolateDedication, type UndoDedicationResult } from '../../lib/directory/shards';
import type { RebalancePlan } from '../../lib/rebalance/plan';
import { parse, typed, activityKey } from '../move/context';
import { recordRebalanceEvent } from '../../lib/directory/rebalance-events';
import { directoryNow, planMoveProblems } from '../../lib/rebalance/apply';

export const planScope = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('rebalance') }),
  z.object({ kind: z.literal('drain'), shard: z.string().min(1) }),
  z.object({ kind: z.literal('isolate'), tenant: z.string().min(1), to: z.string().min(1).optional() }),
]);

const planInput = z.object({
  scope: planScope,
  tolerance: z.number().min(0).max(10).optional(),
  maxMoves: z.number().int().positive().optional(),
  exclude: z.array(z.string()).default([]),
  units: z.array(z.string()).optional(),
});

const plannedInput = z.object({
  moves: z.array(
    z.object({ unit: z.string().min(1), from: z.string().min(1), to: z.string().min(1), load: z.number().optional(), reason: z.string().optional() }),
  ),
});

const closeInput = z.object({ shard: z.string().min(1), actor: z.string().min(1) });

const undoInput = z.object({
  shard: z.string().min(1),
  tenant: z.string().min(1),
  dedicatedByRun: z.boolean(),
  started: z.array(z.string()),
  ended: z.enum(['cancelled', 'failed']),
  run: z.string().min(1),
  actor: z.string().min(1),
});

const prepareInput = z.object({
  plan: z.object({ scope: planScope, dedicate: z.object({ shard: z.string(), tenant: z.string() }).optional() }),
  actor: z.string().min(1),
});

const eventInput = z.object({
  action: z.enum(['start', 'pause', 'resume', 'cancel']),
  actor: z.string().min(1),
  reason: z.string().optional(),
  workflowId: z.string().min(1),
  scope: planScope,
});

export function createRebalanceActivities(deps: Deps) {
  return {
    /** An operator verb on the run, in the directory's audit log (`rebalance.<verb>`). */
    async recordRebalanceEvent(input: z.input<typeof eventInput>): Promise<void> {
      const e = parse(eventInput, input);
      return typed(() => recordRebalanceEvent(deps.directoryPool(), e, activityKey()));
    },

    /** A given plan (`rebalance apply --plan`) against the directory now: why each bad move may not start (empty: all may). */
    async checkPlannedMoves(input: z.input<typeof plannedInput>): Promise<string[]> {
      const { moves } = parse(plannedInput, input);
      return typed(async () => planMoveProblems(moves, await directoryNow(deps.directoryPool(), deps.config)));
    },

    async planRebalance(input: z.input<typeof planInput>): Promise<RebalancePlan> {
      const i = parse(planInput, input);
      return typed(() =>
        planFromDirectory(deps.directoryPool(), deps.config, i.scope, { tolerance: i.tolerance, maxMoves: i.maxMoves, exclude: i.exclude, units: i.units }),
      );
    },

    /** Before any move of a drain or isolate: nothing new may be placed where units are leaving. */
    async markPlanShards(input: z.input<typeof prepareInput>): Promise<string[]> {
      const { plan, actor } = parse(prepareInput, input);
      return typed(async () => {
        const done: string[] = [];
        if (plan.scope.kind === 'drain') {
          const s = await getShard(deps.directoryPool(), plan.scope.shard);
          if (s && s.status !== 'draining') {
            await setShardStatus(deps.directoryPool(), plan.scope.shard, 'draining', { actor, reason: 'shards drain' });
            done.push(`${plan.scope.shard} draining`);
          }
        }
        if (plan.dedicate) {
          const s = await getShard(deps.directoryPool(), plan.dedicate.shard);
          if (s && s.dedicatedTo !== plan.dedicate.tenant) {
            await setShardDedication(deps.directoryPool(), plan.dedicate.shard, plan.dedicate.tenant, { actor, reason: 'tenant isolate' });
            done.push(`${plan.dedicate.shard} dedicated to ${plan.dedicate.tenant}`);
          }
        }
        return done;
      });
    },

    /** The end of a cancelled or failed isolate: its dedication undone when nothing took hold, else what it left and how to undo it. */
    async undoIsolateDedication(input: z.input<typeof undoInput>): Promise<UndoDedicationResult> {
      const { actor, ended, ...req } = parse(undoInput, input);
      return typed(() => undoIsolateDedication(deps.directoryPool(), req, { actor, reason: `tenant isolate ${ended}` }));
    },

    /** The end of a drain: closed when no unit and no unfinished move is left on the shard, else why not. */
    async closeDrainedShard(input: z.input<typeof closeInput>): Promise<{ closed: boolean; reasons: string[] }> {
      const { shard, actor } = parse(closeInput, input);
      return typed(async () => {
        const r = await closeDrainedShard(deps.directoryPool(), shard, { actor, reason: 'shards drain: every unit is off it' });
        return r.closed ? { closed: true, reasons: [] } : { closed: false, reasons: r.reasons };
      });
    },
  };
}
