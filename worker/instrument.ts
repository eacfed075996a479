// The worker's activity interceptor: every activity execution runs with a logger bound to its
// move (moveId, unit, phase, activity, attempt on every line, lib/obs/log.ts), logs its start and
// its end, and counts failures and durations (lib/obs/metrics.ts). The Temporal SDK's own logs
// (worker, workflows' `log`) go through the same JSON logger (`temporalLogger`).
import { Context } from '@temporalio/activity';
import type { ActivityInterceptorsFactory } from '@temporalio/worker';
import type { Logger as TemporalLogger, LogLevel as TemporalLevel, LogMetadata } from '@temporalio/common';
import type { Logger } from '../lib/obs/log';
import { withLogger, errorFields } from '../lib/obs/log';
import type { Metrics } from '../lib/obs/metrics';

/** The move context an activity's input carries (activities take `{...ref, phase}`; plan and the reservation take no phase). */
export function moveContextOf(activity: string, arg: unknown): { moveId: string | null; unit: string | null; phase: string | null; direction?: string } {
  const a = (arg && typeof arg === 'object' ? arg : {}) as Record<string, unknown>;
  const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : null);
  // Plan and the headroom reservation right after it run in the plan phase (their inputs carry none).
  const phase = str(a.phase) ?? (activity === 'planMove' || activity === 'reserveHeadroom' ? 'plan' : null);
  return { moveId: str(a.moveId), unit: str(a.unit), phase, ...(str(a.direction) ? { direction: a.direction as string } : {}) };
}

/** Small, secret-free summary of an activity's result for its completion line. */
function resultFields(result: unknown): Record<string, unknown> {
  if (!result || typeof result !== 'object') return {};
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(result as Record<string, unknown>)) {
    if (typeof v === 'number' || typeof v === 'boolean') out[k] = v;
    else if (typeof v === 'string' && v.length <= 200 && (k === 'moveId' || k === 'reason' || k === 'appliedLsn' || k === 'table' || k === 'source'))
      out[k] = v;
  }
  return out;
}

export function activityInterceptor(log: Logger, metrics?: Metrics): ActivityInterceptorsFactory {
  return (ctx: Context) => ({
    inbound: {
      async execute(input, next) {
        const info = ctx.info;
        const activity = info.activityType;
        const move = moveContextOf(activity, input.args[0]);
        const child = log.child({
          ...move,
          activity,
          attempt: info.attempt,
          workflowId: info.workflowExecution?.workflowId ?? null,
        });
        const t0 = Date.now();
        return withLogger(child, async () => {
          child.debug('activity started');
          try {
            const result = await next(input);
            const ms = Date.now() - t0;
            metrics?.activityDuration.observe({ activity, outcome: 'ok' }, ms / 1000);
            child.info({ durationMs: ms, ...resultFields(result) }, 'activity completed');
            return result;
          } catch (e) {
            const ms = Date.now() - t0;
            const f = errorFields(e);
            metrics?.activityDuration.observe({ activity, outcome: 'failed' }, ms / 1000);
            metrics?.activityFailures.inc({ activity, type: String(f.errType) });
            child.warn({ durationMs: ms, ...f }, 'activity failed');
            throw e;
          }
        });
      },
    },
  });
}

const PINO_LEVEL: Record<TemporalLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
};
const ORDER: TemporalLevel[] = ['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR'];

/**
 * The Temporal SDK's logger over ours. Workflow lines (the move's phase changes) pass from INFO;
 * the SDK's own (worker, core) from `sdkLevel` (SHARDCTL_WORKER_LOG, default WARN): expected
 * activity retries are not news. `target()` is read per line, so the process-wide Runtime follows
 * the latest worker's logger.
 */
export function temporalLogger(target: () => Logger | undefined, sdkLevel: TemporalLevel): TemporalLogger {
  const min = (meta?: LogMetadata) => (meta?.sdkComponent === 'workflow' ? 'INFO' : sdkLevel);
  const log = (level: TemporalLevel, message: string, meta?: LogMetadata) => {
    const l = target();
    // Activity lines come from activityInterceptor, with the move's context; the SDK's own would lack it.
    if (meta?.sdkComponent === 'activity') return;
    if (!l || ORDER.indexOf(level) < ORDER.indexOf(min(meta))) return;
    const fields: Record<string, unknown> = {};
    // The worker's base fields already name the task queue.
    for (const [k, v] of Object.entries(meta ?? {})) if (k !== 'taskQueue') fields[k] = v;
    l[PINO_LEVEL[level]](fields, message);
  };
  return {
    log,
    trace: (m, meta) => log('TRACE', m, meta),
    debug: (m, meta) => log('DEBUG', m, meta),
    info: (m, meta) => log('INFO', m, meta),
    warn: (m, meta) => log('WARN', m, meta),
    error: (m, meta) => log('ERROR', m, meta),
  };
}
