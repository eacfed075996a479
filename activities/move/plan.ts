// plan: the preflight of DESIGN.md §4.1. It changes nothing; a failed check is returned as a
// reason the operator can read, never thrown at them.
import { z } from 'zod';
import type { Deps } from '../../worker/deps';
import { getPlacement } from '../../lib/directory/placements';
import { movabilityProblems, TenantTable } from '../../lib/shard/tables';
import { tenantTables, parse, typed } from './context';
import { shardByName } from '../../lib/config';

const planInput = z.object({ unit: z.string().min(1), target: z.string().min(1) });

export interface PlanResult {
  ok: boolean;
  reasons: string[];
  source: string;
  epoch: number;
  moveId: string;
  tables: { table: string; rowsEstimated: number }[];
}

/** The move id is derived from the unit and its epoch when the move starts: one per ownership. */
export function moveIdFor(unit: string, epoch: number): string {
  return `${unit}.e${epoch}`;
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
    const sc = s.columns.map((c) => `${c.name} ${c.type}${c.generated ? ' generated' : ''}`).join(', ');
    const dc = d.columns.map((c) => `${c.name} ${c.type}${c.generated ? ' generated' : ''}`).join(', ');
    if (sc !== dc) out.push(`table ${tableKey(s)} differs: source (${sc}) vs target (${dc})`);
    if (s.primaryKey.join(',') !== d.primaryKey.join(',')) out.push(`table ${tableKey(s)} primary key differs: (${s.primaryKey}) vs (${d.primaryKey})`);
  }
  return out;
}

async function fencedTables(deps: Deps, shard: string, tables: TenantTable[]): Promise<Set<string>> {
  const r = await deps.shardPool(shard).query(
    `select n.nspname || '.' || c.relname as t from pg_trigger g join pg_class c on c.oid = g.tgrelid
       join pg_namespace n on n.oid = c.relnamespace where g.tgname = 'shardctl_fence' and not g.tgisinternal`,
  );
  const have = new Set(r.rows.map((x) => x.t as string));
  return new Set(tables.map(tableKey).filter((t) => have.has(t)));
}

export function createPlanActivities(deps: Deps) {
  return {
    async planMove(input: z.infer<typeof planInput>): Promise<PlanResult> {
      const { unit, target } = parse(planInput, input);
      return typed(async () => {
        const reasons: string[] = [];
        const col = deps.config.tenant.column;
        const p = await getPlacement(deps.directoryPool(), unit);
        if (!p) return { ok: false, reasons: [`unit ${unit} is not in the directory (create the tenant first)`], source: '', epoch: 0, moveId: '', tables: [] };
        const base = { source: p.shard, epoch: p.epoch, moveId: moveIdFor(unit, p.epoch) };
        if (p.state !== 'active') reasons.push(`unit ${unit} is ${p.state} (owned by move ${p.moveId}); one move per unit at a time`);
        if (p.shard === target) reasons.push(`unit ${unit} is already on ${target}`);
        try {
          shardByName(deps.config, target);
        } catch (e: any) {
          reasons.push(e.message);
        }
        if (reasons.length) return { ok: false, reasons, ...base, tables: [] };
        const shard = await deps.directoryPool().query(
          `select s.status, s.capacity, coalesce((select sum(expected_load) from shardctl.units u where u.shard = s.name), 0) as load
             from shardctl.shards s where s.name = $1`,
          [target],
        );
        if (!shard.rowCount) reasons.push(`target ${target} is not in the directory's shard inventory`);
        else {
          const s = shard.rows[0];
          const usable = Number(s.capacity) * (1 - deps.config.limits.headroomFraction);
          if (s.status !== 'open') reasons.push(`target ${target} is ${s.status}, not open`);
          if (Number(s.load) + p.expectedLoad > usable) {
            reasons.push(`target ${target} lacks headroom: load ${s.load} + ${p.expectedLoad} > usable ${usable.toFixed(0)} of capacity ${s.capacity}`);
          }
        }
        const [src, dst] = await Promise.all([tenantTables(deps, p.shard), tenantTables(deps, target)]);
        if (src.length === 0) reasons.push(`no tenant tables (column ${col}) found on ${p.shard}`);
        for (const t of src) reasons.push(...movabilityProblems(t, col));
        reasons.push(...schemaDiff(src, dst));
        const [fs, fd] = await Promise.all([fencedTables(deps, p.shard, src), fencedTables(deps, target, dst)]);
        for (const t of src) {
          if (!fs.has(tableKey(t))) reasons.push(`table ${tableKey(t)} on ${p.shard} has no fence trigger; run \`shardctl shards prepare --shard ${p.shard}\``);
          if (dst.some((d) => tableKey(d) === tableKey(t)) && !fd.has(tableKey(t))) {
            reasons.push(`table ${tableKey(t)} on ${target} has no fence trigger; run \`shardctl shards prepare --shard ${target}\``);
          }
        }
        const tables: PlanResult['tables'] = [];
        if (reasons.length === 0) {
          const tp = deps.shardPool(target);
          const progress = await tp.query('select 1 from shardctl.move_progress where move_id = $1 limit 1', [base.moveId]);
          for (const t of src) {
            const n = Number((await deps.shardPool(p.shard).query(`select count(*) as n from ${t.qualified} where "${col}" = $1`, [unit])).rows[0].n);
            tables.push({ table: tableKey(t), rowsEstimated: n });
            if (!progress.rowCount) {
              const left = Number((await tp.query(`select count(*) as n from ${t.qualified} where "${col}" = $1`, [unit])).rows[0].n);
              if (left > 0) reasons.push(`target ${target} already holds ${left} rows of ${unit} in ${tableKey(t)} (left over from an earlier move?); remove them first`);
            }
          }
        }
        return { ok: reasons.length === 0, reasons, ...base, tables };
      });
    },
  };
}
