// `rebalance apply --plan FILE`: a plan saved by `rebalance plan --json`, read and checked against
// the directory as it is now before anything starts. Only each move's unit, from and to are needed
// (load, bytes and reason are kept when present; any other field is ignored, so a richer plan format
// still applies). A stale or invalid plan is refused whole, one reason per bad move: each unit
// must still be on its `from` shard and not moving, each target in the config's shard allowlist,
// open and a place the unit may live (residency, dedication, class). Headroom is not re-checked
// here: each move's own reservation does that, in its transaction, and refuses only itself.
import { invalidInput } from '../errors';
import type { Config } from '../config';
import type { Queryable } from '../directory/db';
import { listShards, type ShardInfo } from '../directory/shards';
import { listPlacements } from '../directory/placements';
import { listOpenReservations } from '../directory/reservations';
import { listResidency } from '../directory/policy';
import { residencyProblem } from '../directory/residency';
import { validateUnitName } from '../unit-rows';
import { isUnitOfTenant } from '../buckets/units';
import type { PlannedInputMove } from '../../workflows/rebalance-messages';

/** The moves of a plan file's text: `{moves: [...]}` as `rebalance plan --json` prints it (or `{plan: {moves}}`). */
export function parsePlanFile(text: string, file: string): PlannedInputMove[] {
  let doc: any;
  try {
    doc = JSON.parse(text);
  } catch (e: any) {
    throw invalidInput(`${file} is not JSON (${String(e?.message ?? e).slice(0, 120)}): save a plan with \`shardctl rebalance plan --json > ${file}\``);
  }
  const plan = doc && typeof doc === 'object' && !Array.isArray(doc.moves) && doc.plan && typeof doc.plan === 'object' ? doc.plan : doc;
  if (!plan || typeof plan !== 'object' || !Array.isArray(plan.moves))
    throw invalidInput(`${file} has no "moves" list: save a plan with \`shardctl rebalance plan --json > ${file}\``);
  return plan.moves.map((m: any, i: number) => {
    if (!m || typeof m !== 'object') throw invalidInput(`${file}: move ${i + 1} is not an object`);
    for (const k of ['unit', 'from', 'to'] as const)
      if (typeof m[k] !== 'string' || !m[k]) throw invalidInput(`${file}: move ${i + 1} has no ${k} (each move needs unit, from and to)`);
    const unit = validateUnitName(m.unit);
    const out: PlannedInputMove = { unit, from: m.from, to: m.to };
    if (typeof m.load === 'number' && Number.isFinite(m.load) && m.load >= 0) out.load = m.load;
    if (typeof m.bytes === 'number' && Number.isFinite(m.bytes) && m.bytes >= 0) out.bytes = m.bytes;
    if (typeof m.reason === 'string') out.reason = m.reason.slice(0, 200);
    return out;
  });
}

/** What the directory says now, as the checks need it. */
export interface DirectoryNow {
  /** The config's shard allowlist. */
  allowlist: ReadonlySet<string>;
  shards: ReadonlyMap<string, Pick<ShardInfo, 'name' | 'status' | 'dedicatedTo' | 'class' | 'region'>>;
  placements: ReadonlyMap<string, { shard: string; state: string; moveId: string | null }>;
  /** Units whose move holds an open reservation (in flight, perhaps before its freeze), with the move. */
  inFlight: ReadonlyMap<string, string>;
  residency: ReadonlyMap<string, readonly string[]>;
}

/** Why each move of the plan may not start now, one line per problem, prefixed by the move (empty: every move may start). */
export function planMoveProblems(moves: readonly PlannedInputMove[], now: DirectoryNow): string[] {
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const m of moves) {
    const why: string[] = [];
    if (seen.has(m.unit)) why.push(`${m.unit} is moved more than once in the plan`);
    seen.add(m.unit);
    if (m.from === m.to) why.push(`from and to are both ${m.from}`);
    const p = now.placements.get(m.unit);
    if (!p) why.push(`${m.unit} is not in the directory`);
    else {
      if (p.shard !== m.from) why.push(`${m.unit} is on ${p.shard} now, not ${m.from}: the plan is stale, plan again`);
      const moving = now.inFlight.get(m.unit) ?? (p.state === 'moving' ? (p.moveId ?? 'unknown') : undefined);
      if (moving !== undefined) why.push(`${m.unit} is moving already (move ${moving}): the plan is stale, plan again`);
    }
    if (!now.allowlist.has(m.from)) why.push(`source ${m.from} is not in the config's shards: nothing connects to it`);
    if (!now.allowlist.has(m.to)) why.push(`target ${m.to} is not in the config's shards: nothing connects to it`);
    else {
      const s = now.shards.get(m.to);
      if (!s) why.push(`target ${m.to} is not in the directory's shards (\`shardctl shards add\`)`);
      else {
        if (s.status !== 'open') why.push(`target ${m.to} is ${s.status}, not open`);
        if (s.dedicatedTo && !isUnitOfTenant(m.unit, s.dedicatedTo))
          why.push(`target ${m.to} is dedicated to tenant ${s.dedicatedTo}: no other unit moves there`);
        else if (s.class === 'dedicated' && !s.dedicatedTo) why.push(`target ${m.to} is a dedicated-class shard, kept for an isolated tenant`);
        const outside = residencyProblem(s, m.unit, now.residency.get(m.unit) ?? null);
        if (outside) why.push(outside);
      }
    }
    for (const w of why) problems.push(`move ${m.unit} ${m.from} -> ${m.to}: ${w}`);
  }
  return problems;
}

/** Reads what planMoveProblems needs from the directory (read-only). */
export async function directoryNow(directory: Queryable, config: Config): Promise<DirectoryNow> {
  const [shards, { placements }, reservations, residency] = await Promise.all([
    listShards(directory),
    listPlacements(directory),
    listOpenReservations(directory),
    listResidency(directory),
  ]);
  return {
    allowlist: new Set(config.shards.map((s) => s.name)),
    shards: new Map(shards.map((s) => [s.name, s])),
    placements: new Map(placements.map((p) => [p.unit, p])),
    inFlight: new Map(reservations.map((r) => [r.unit, r.moveId])),
    residency,
  };
}
