// plan: the preflight of DESIGN.md §4.1. It changes nothing; a failed check is returned as a
// reason the operator can read, never thrown at them. It also runs the cutover's dry-run twin
// (lib/cutover/dry-run.ts) over the same `runCutover` the move uses, so the steps it shows are
// the steps the move will take.
import { moveTargetProblems } from '../../lib/directory/choose';
import { getResidency } from '../../lib/directory/policy';
import { z } from 'zod';
import type { Deps } from '../deps';
import { getPlacement } from '../../lib/directory/placements';
import { shardLoad } from '../../lib/directory/shards';
import { movabilityProblems, countUnitRows, estimateUnitBytes, TenantTable } from '../../lib/shard/tables';
import { measuredCopies } from '../../lib/directory/moves';
import { estimateCopy, type CopyEstimate } from '../../lib/move-progress';
import { fenceStatus } from '../../lib/shard/prepare';
import { replicationCapacity, replicationCapacityProblems } from '../../lib/shard/replication-capacity';
import { feedingSequences, unfedOnTarget } from '../../lib/shard/sequences';
import { hasMoveProgress } from '../../lib/cdc/progress';
import { globalUniqueKeys, firstKeyCollision, collisionReason } from '../../lib/shard/unique-keys';
import { runCutover } from '../../lib/cutover/steps';
import { freezeLease, fenceLockOf } from '../../lib/cutover/lease';
import { dryRunCutoverSteps } from '../../lib/cutover/dry-run';
import { moveIdFor } from '../../lib/ids';
import { rowsOf, unitTables, parse, typed, activityRunId, shardBucket, hasBlobs, activitySignal, unitIndex } from './context';
import type { UnitRows } from '../../lib/unit-rows';
import { bucketTableProblems } from '../../lib/shard/datasets';
import { assertBucketOf, blobCensus, sharedBucketProblems, unitBlobPrefix, type BlobCensus } from '../../lib/blobs';
import { shardByName } from '../../lib/config';
import { ShardctlError } from '../../lib/errors';
import { reserveHeadroom } from '../../lib/directory/reservations';
import { subUnitProblems } from '../../lib/shard/sub-unit-move';

/** Whether the config file (re-read: a `shards add` since this worker started) now names `shard`; a file that does not load names none. */
function learnsShard(deps: Deps, shard: string): boolean {
  try {
    return !!deps.learnShards?.().includes(shard);
  } catch {
    return false;
  }
}

const planInput = z.object({
  unit: z.string().min(1),
  target: z.string().min(1),
  fenceBudgetMs: z.number().int().positive().optional(),
  /** The run the move id is derived from; defaults to the calling workflow's run ('dryrun' outside one). */
  runId: z.string().min(1).optional(),
});

const reserveInput = z.object({
  moveId: z.string().min(1),
  unit: z.string().min(1),
  source: z.string().min(1),
  target: z.string().min(1),
  epoch: z.number().int().positive(),
  workflowId: z.string().min(1),
  actor: z.string().min(1),
});

export interface PlanResult {
  ok: boolean;
  reasons: string[];
  source: string;
  epoch: number;
  moveId: string;
  /** Each table's rows (counted) and bytes (rows × the mean size of a sample of them). */
  tables: { table: string; rowsEstimated: number; bytesEstimated?: number }[];
  /** What the cutover will do, from its dry-run twin (empty when a check failed). */
  cutoverSteps?: string[];
  /** How long the table copies should take, from the throughput earlier moves measured (`move.copied` audit entries). */
  copyEstimate?: CopyEstimate;
  /** A tenant's objects on the source (a bounded listing), and which final blob delta the cutover's window will use. */
  blobs?: BlobCensus;
}

function tableKey(t: TenantTable) {
  return `${t.schema}.${t.name}`;
}

function schemaDiff(src: TenantTable[], dst: TenantTable[]): string[] {
  const out: string[] = [];
  const dm = new Map(dst.map((t) => [tableKey(t), t]));
  for (const s of src) {
    const d = dm.get(tableKey(s));
    if (!d) {
      out.push(`table ${tableKey(s)} is missing on the target; create it there and run \`shardctl shards prepare\``);
      continue;
    }
    // By name: copy, apply and every comparison name their columns, so the physical order may differ.
    const describe = (t: TenantTable) => new Map(t.columns.map((c) => [c.name, `${c.name} ${c.type}${c.generated ? ' generated' : ''}`]));
    const [sc, dc] = [describe(s), describe(d)];
    const onlySource = [...sc].filter(([n, x]) => dc.get(n) !== x).map(([, x]) => x);
    const onlyTarget = [...dc].filter(([n, x]) => sc.get(n) !== x).map(([, x]) => x);
    if (onlySource.length || onlyTarget.length) {
      out.push(
        `table ${tableKey(s)} differs (columns compared by name): source (${onlySource.join(', ') || 'none'}) vs target (${onlyTarget.join(', ') || 'none'})`,
      );
    }
    if (s.primaryKey.join(',') !== d.primaryKey.join(',')) out.push(`table ${tableKey(s)} primary key differs: (${s.primaryKey}) vs (${d.primaryKey})`);
  }
  return out;
}

export function createPlanActivities(deps: Deps) {
  /** The same question `shards list` answers: tenant tables carrying the enabled fence trigger. */
  const fenced = async (shard: string) => new Set((await fenceStatus(deps.shardPool(shard), deps.config)).fenced);

  /** Two shards on one bucket: by the config's spelling, then by the buckets' identity markers. */
  async function bucketProblems(source: string, target: string, unit: string): Promise<string[]> {
    const shared = sharedBucketProblems([shardByName(deps.config, source), shardByName(deps.config, target)], deps.config.s3.endpoint);
    if (shared.length) return shared;
    const out: string[] = [];
    const markers = await Promise.all(
      [source, target].map((shard) =>
        assertBucketOf(shardBucket(deps, shard), `move ${unit} from ${source} to ${target}`).catch((e: Error) => {
          out.push(e.message);
          return undefined;
        }),
      ),
    );
    if (markers[0] && markers[1] && markers[0].id === markers[1].id)
      out.push(`shards ${source} and ${target} share one bucket (identity marker id ${markers[0].id})`);
    return out;
  }

  return {
    async planMove(input: z.infer<typeof planInput>): Promise<PlanResult> {
      const { unit, target, fenceBudgetMs, runId } = parse(planInput, input);
      return typed(async () => {
        const reasons: string[] = [];
        let rows: UnitRows;
        try {
          rows = await rowsOf(deps, unit);
        } catch (e: any) {
          return { ok: false, reasons: [e?.message ?? String(e)], source: '', epoch: 0, moveId: '', tables: [] };
        }
        // The unit's row predicate (lib/unit-rows.ts): `<col> = <value>`, a tenant's or a bucket's.
        const col = rows.column;
        const value = rows.value;
        const p = await getPlacement(deps.directoryPool(), unit);
        if (!p) {
          const hint = rows.kind === 'bucket' ? `run \`shardctl dataset init ${rows.dataset!.name}\` first` : 'create the tenant first';
          return { ok: false, reasons: [`unit ${unit} is not in the directory (${hint})`], source: '', epoch: 0, moveId: '', tables: [] };
        }
        const base = { source: p.shard, epoch: p.epoch, moveId: moveIdFor(unit, p.epoch, runId ?? activityRunId() ?? 'dryrun') };
        if (p.state !== 'active') reasons.push(`unit ${unit} is ${p.state} (owned by move ${p.moveId}); one move per unit at a time`);
        if (p.shard === target) reasons.push(`unit ${unit} is already on ${target}`);
        try {
          shardByName(deps.config, target);
        } catch (e: any) {
          // Added to the config file since this worker started (`shards add`)? Learn it, then look again.
          let learned = false;
          try {
            learned = !!deps.learnShards?.().includes(target);
          } catch (le: any) {
            reasons.push(`the config file does not load: ${le?.message ?? le}`);
          }
          if (!learned) reasons.push(e.message);
        }
        // The inventory is an allowlist: a unit placed on a shard the config does not name stays
        // where it is, since nothing may connect to that shard to copy it.
        if (!deps.config.shards.some((x) => x.name === p.shard) && !learnsShard(deps, p.shard))
          reasons.push(
            `unit ${unit} is on ${p.shard}, which the config does not name: nothing connects to a shard outside the config (add it with \`shardctl shards add\` to move the unit)`,
          );
        if (reasons.length) return { ok: false, reasons, ...base, tables: [] };
        // Moves in flight count on the target too (their reservations), but not this unit's own.
        const s = await shardLoad(deps.directoryPool(), target, { exceptUnit: unit });
        if (!s) reasons.push(`target ${target} is not in the directory's shard inventory`);
        else reasons.push(...moveTargetProblems(s, unit, p.expectedLoad, deps.config.limits.headroomFraction, await getResidency(deps.directoryPool(), unit)));
        // Configured tables missing on the target are a reason (schemaDiff names each), not a throw.
        // Only that answer: a target that did not answer (a reset connection, a timeout) is an error
        // the activity retries, never "every table is missing" (seen on a lossy link: the move failed).
        const [src, dst] = await Promise.all([
          unitTables(deps, p.shard, rows),
          unitTables(deps, target, rows).catch((e) => {
            if (e instanceof ShardctlError && e.type === 'InvalidInput') return [];
            throw e;
          }),
        ]);
        if (src.length === 0)
          reasons.push(`no ${rows.kind === 'tenant' ? 'tenant' : `dataset ${rows.dataset!.name}`} tables (column ${col}) found on ${p.shard}`);
        for (const t of src) {
          if (rows.kind === 'tenant') reasons.push(...movabilityProblems(t, col));
          else reasons.push(...(await bucketTableProblems(deps.shardPool(p.shard), t, rows.dataset!)));
        }
        if (rows.subUnit) reasons.push(...(await subUnitProblems(deps.shardPool(p.shard), p.shard, unit, rows.subUnit, src)));
        reasons.push(...schemaDiff(src, dst));
        // A column a sequence feeds on the source must be fed on the target too, or the tenant's
        // next insert without an explicit id fails on its new owner (DESIGN.md §5.9).
        const both = dst.filter((d) => src.some((x) => tableKey(x) === tableKey(d)));
        const [fedSrc, fedDst] = await Promise.all([feedingSequences(deps.shardPool(p.shard), src), feedingSequences(deps.shardPool(target), both)]);
        const fedBoth = fedSrc.filter((f) => both.some((d) => d.qualified === f.table));
        reasons.push(...unfedOnTarget(fedBoth, fedDst, p.shard, target));
        const [fs, fd] = await Promise.all([fenced(p.shard), fenced(target)]);
        for (const t of src) {
          if (!fs.has(tableKey(t)))
            reasons.push(`table ${tableKey(t)} on ${p.shard} has no enabled fence trigger; run \`shardctl shards prepare --shard ${p.shard}\``);
          if (dst.some((d) => tableKey(d) === tableKey(t)) && !fd.has(tableKey(t))) {
            reasons.push(`table ${tableKey(t)} on ${target} has no enabled fence trigger; run \`shardctl shards prepare --shard ${target}\``);
          }
        }
        reasons.push(...(await bucketProblems(p.shard, target, unit)));
        const [capSource, capTarget] = await Promise.all([replicationCapacity(deps.shardPool(p.shard)), replicationCapacity(deps.shardPool(target))]);
        reasons.push(...replicationCapacityProblems(p.shard, 'source', capSource), ...replicationCapacityProblems(target, 'target', capTarget));
        const tables: PlanResult['tables'] = [];
        if (reasons.length === 0) {
          const tp = deps.shardPool(target);
          const resumed = await hasMoveProgress(tp, base.moveId);
          for (const t of src) {
            const rowsEstimated = await countUnitRows(deps.shardPool(p.shard), t, col, value);
            tables.push({ table: tableKey(t), rowsEstimated, bytesEstimated: await estimateUnitBytes(deps.shardPool(p.shard), t, col, value, rowsEstimated) });
            if (!resumed) {
              const left = await countUnitRows(tp, t, col, value);
              if (left > 0)
                reasons.push(`target ${target} already holds ${left} rows of ${unit} in ${tableKey(t)} (left over from an earlier move?); remove them first`);
            }
            // A key unique across tenants must not already be taken on the target by another unit.
            for (const key of await globalUniqueKeys(tp, t, col)) {
              const hit = await firstKeyCollision(deps.shardPool(p.shard), tp, t, key, col, value);
              if (hit) reasons.push(collisionReason(target, t, hit, col, unit));
            }
          }
        }
        if (reasons.length) return { ok: false, reasons, ...base, tables };
        const plan = {
          unit,
          moveId: base.moveId,
          owner: p.shard,
          next: target,
          epoch: p.epoch,
          direction: 'forward' as const,
          fenceBudgetMs: fenceBudgetMs ?? deps.config.limits.fenceBudgetMs,
          lease: freezeLease(fenceBudgetMs ?? deps.config.limits.fenceBudgetMs, deps.config.limits.freezeLeaseExtraMs),
          actor: 'plan',
          fenceLock: fenceLockOf(deps.config.limits, fenceBudgetMs ?? deps.config.limits.fenceBudgetMs),
        };
        const dry = dryRunCutoverSteps(plan, { tables: tables.map((t) => t.table), longWrites: deps.config.limits });
        // A still clock: the dry run's text (budgets left) must be the same on every delivery of plan.
        await runCutover(dry.steps, plan, { faultPoint: async () => {}, now: () => 0 });
        const total = { rows: tables.reduce((n, t) => n + t.rowsEstimated, 0), bytes: tables.reduce((n, t) => n + (t.bytesEstimated ?? 0), 0) };
        const copyEstimate = estimateCopy(total, await measuredCopies(deps.directoryPool()), deps.config.limits.rowsPerSecond);
        const source = shardBucket(deps, p.shard);
        const blobs = hasBlobs(unit)
          ? await blobCensus(source.s3, source.bucket, unitBlobPrefix(unit), {
              signal: activitySignal(),
              referenced: await unitIndex(deps, p.shard, unit),
            })
          : undefined;
        return { ok: true, reasons, ...base, tables, cutoverSteps: dry.log, copyEstimate, ...(blobs ? { blobs } : {}) };
      });
    },

    /**
     * After a plan that passed: reserves the unit's load on the target, re-checking its headroom
     * with every other move's reservation in the same transaction (lib/directory/reservations.ts).
     * A refusal is a reason, like plan's; the move then fails having changed nothing.
     */
    async reserveHeadroom(input: z.infer<typeof reserveInput>): Promise<{ ok: boolean; reasons: string[] }> {
      const req = parse(reserveInput, input);
      return typed(async () => {
        const r = await reserveHeadroom(deps.directoryPool(), req, deps.config.limits.headroomFraction);
        return r.ok ? { ok: true, reasons: [] } : { ok: false, reasons: r.reasons };
      });
    },
  };
}
