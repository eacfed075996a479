// Moves by phase, counted at scrape time from Temporal visibility (the ShardctlPhase search
// attribute): the fleet's answer, not this worker's, so every worker reports the same numbers.
// Counts are reused for `cacheMs` so many scrapes cost one round of visibility queries.
import type { Config } from '../lib/config';
import type { Metrics } from '../lib/obs/metrics';
import { temporalClient } from '../lib/temporal-client';
import { MOVE_WORKFLOW_TYPE } from '../lib/moves/start';
import { PHASES, isTerminal } from '../workflows/phases';

/** The phases a running move can be in (terminal ones end the workflow). */
export const LIVE_PHASES = PHASES.filter((p) => !isTerminal(p));

export function runningMovesQuery(extra = ''): string {
  return `WorkflowType = '${MOVE_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'${extra ? ` AND ${extra}` : ''}`;
}

export function movesByPhaseRefresher(config: Config, metrics: Metrics, opts: { cacheMs?: number } = {}) {
  const cacheMs = opts.cacheMs ?? 5_000;
  let client: Awaited<ReturnType<typeof temporalClient>> | undefined;
  let last = 0;
  let inflight: Promise<void> | undefined;
  const once = async () => {
    try {
      client ??= await temporalClient(config);
      const w = client.client.workflow;
      const counts = await Promise.all(LIVE_PHASES.map((p) => w.count(runningMovesQuery(`ShardctlPhase = '${p}'`))));
      const blocked = await w.count(runningMovesQuery('ShardctlBlockedReason IS NOT NULL'));
      LIVE_PHASES.forEach((p, i) => metrics.movesByPhase.set({ phase: p }, counts[i].count));
      metrics.movesBlocked.set(blocked.count);
      metrics.visibilityUp.set(1);
      last = Date.now();
    } catch {
      metrics.visibilityUp.set(0);
    }
  };
  return {
    refresh(): Promise<void> {
      if (Date.now() - last < cacheMs) return Promise.resolve();
      return (inflight ??= once().finally(() => (inflight = undefined)));
    },
    async close() {
      await inflight;
      await client?.close().catch(() => {});
    },
  };
}
