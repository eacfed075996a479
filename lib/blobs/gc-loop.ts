// The blob collector run by the worker (issue 15: garbage is collected without an operator): every
// `intervalMs` one pass collects, unit by unit (every tenant, and every bucket unit of a configured
// dataset), the version objects no index row names on each
// tenant's owner (./gc's collectTenantBlobs, with all of its checks: the owner only, the unit
// active with no move holding a reservation for it, the index lock held exclusively, nothing an
// index row names and nothing younger than `graceMs` deleted). A tenant that may not be collected
// now (moving, a move in flight) is skipped until a later pass; one that fails is logged and
// skipped. One pass runs at a time across every worker of the fleet (a session advisory lock on
// the directory): another worker's pass in progress makes this one wait for the next interval. A
// pass records a `blobs.gc` audit entry only for a tenant it deleted something from.
import type { Logger } from 'pino';
import { listPlacements } from '../directory/placements';
import { ShardctlError } from '../errors';
import { parseUnit } from '../buckets/units';
import { collectTenantBlobs, type GcDeps, type GcReport } from './gc';

/** The collector's identity in the audit log. */
export const COLLECTOR_ACTOR = 'shardctl-worker';

/** Session advisory lock (directory) held by the worker whose pass is running. */
const PASS_LOCK_SQL = `hashtext('shardctl.blob-collector')`;

export interface CollectorPass {
  /** False when another worker's pass held the lock: this one did nothing. */
  ran: boolean;
  collected: GcReport[];
  skipped: { tenant: string; reason: string }[];
  failed: { tenant: string; error: string }[];
}

export interface BlobCollectorOptions {
  intervalMs: number;
  graceMs: number;
  log?: Pick<Logger, 'info' | 'warn'>;
  /** Called after each pass (tests, metrics). */
  onPass?: (p: CollectorPass) => void;
}

/** The units a pass collects: every tenant the directory places, and every bucket unit of a dataset in `deps.datasets`. */
export async function collectableUnits(deps: GcDeps): Promise<string[]> {
  const datasets = new Set((deps.datasets ?? []).map((d) => d.name));
  const { placements } = await listPlacements(deps.directoryPool());
  return placements
    .filter((p) => {
      if (p.kind === 'tenant') return !p.unit.includes(':'); // a split's sub-units hold no blobs
      const u = parseUnit(p.unit);
      return u.kind === 'bucket' && datasets.has(u.dataset);
    })
    .map((p) => p.unit);
}

/**
 * One pass over every unit collectableUnits names (see the module comment), or over `units` only
 * (those of them it names): a pass's length follows the fleet, so a test of its rules names its own
 * units rather than wait for every other one's.
 */
export async function collectorPass(deps: GcDeps, o: Pick<BlobCollectorOptions, 'graceMs' | 'log'> & { units?: string[] }): Promise<CollectorPass> {
  const pass: CollectorPass = { ran: false, collected: [], skipped: [], failed: [] };
  const dir = deps.directoryPool();
  const c = await dir.connect();
  let broken: Error | undefined;
  try {
    if (!(await c.query(`select pg_try_advisory_lock(${PASS_LOCK_SQL}) as ok`)).rows[0].ok) return pass;
    pass.ran = true;
    try {
      const only = o.units && new Set(o.units);
      for (const unit of await collectableUnits(deps)) {
        if (only && !only.has(unit)) continue;
        const p = { unit };
        try {
          const r = await collectTenantBlobs(deps, {
            tenant: p.unit,
            graceMs: o.graceMs,
            operator: { actor: COLLECTOR_ACTOR, reason: 'periodic blob collection (worker)' },
            auditOnlyDeletes: true,
          });
          pass.collected.push(r);
          if (r.collected.length > 0)
            o.log?.info({ tenant: r.tenant, shard: r.shard, deleted: r.collected.length }, 'blob collector: deleted unreferenced versions');
        } catch (e) {
          if (e instanceof ShardctlError && e.type === 'PreconditionFailed') pass.skipped.push({ tenant: p.unit, reason: e.message });
          else {
            pass.failed.push({ tenant: p.unit, error: String((e as Error)?.message ?? e) });
            o.log?.warn({ tenant: p.unit, err: String((e as Error)?.message ?? e) }, 'blob collector: tenant not collected');
          }
        }
      }
    } finally {
      await c.query(`select pg_advisory_unlock(${PASS_LOCK_SQL})`).catch((err: Error) => {
        broken = err;
      });
    }
    return pass;
  } finally {
    c.release(broken);
  }
}

/** Runs a pass every `intervalMs` (the first one interval after the start) until stopped. */
export function startBlobCollector(deps: GcDeps, o: BlobCollectorOptions): { stop(): Promise<void> } {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<void> | undefined;
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = collectorPass(deps, o).then(
        (p) => o.onPass?.(p),
        (e) => o.log?.warn({ err: String((e as Error)?.message ?? e) }, 'blob collector: pass failed'),
      );
      void running.finally(schedule);
    }, o.intervalMs);
    timer.unref?.();
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
