// `shardctl shards adopt NAME` (issue 13, onboarding): an existing database whose tenant tables
// already hold every tenant becomes the fleet's first shard. The verbs, in order:
//   planAdoption   — read-only: the database's tenant tables and tenants (lib/shard/tenant-census.ts),
//                    each reason it cannot be adopted, and what would be recorded for each tenant;
//   prepare        — `shards prepare` on it (schema shardctl, the fence, the bucket's marker);
//   planAdoption   — again, after the fence is on: the tenants placed are those found then;
//   installFirstOwners — each new tenant's fence (epoch 1, owned) before its directory row, as
//                    `tenant create` does, so a router never routes to a shard that refuses it;
//   insertAdoptedPlacements — every new tenant placed in ONE directory transaction and generation.
// A refusal before prepare changes nothing; after it, only the (idempotent) prepare stays, and the
// fences this run wrote are taken back. A re-run places only what is missing (none: a no-op).
import type { Pool } from 'pg';
import type { S3Client } from '@aws-sdk/client-s3';
import { Config, knownShard } from './config';
import { ShardctlError, invalidInput } from './errors';
import { validateShardName } from './ids';
import { getUnitFences, installFirstOwners, removeFirstFence, type FenceState } from './shard/fence';
import { prepareAllShards } from './shard/prepare';
import { takeTenantCensus } from './shard/tenant-census';
import { insertAdoptedPlacements, listPlacements, type Placement } from './directory/placements';
import { getShard } from './directory/shards';
import { listResidency } from './directory/policy';
import { listSplits } from './directory/splits';
import { residencyProblem } from './directory/residency';
import { usableCapacity } from './directory/choose';
import { DEFAULT_EXPECTED_LOAD } from './tenants';

export interface AdoptInput {
  shard: string;
  actor: string;
  reason?: string;
  /** Expected load recorded for each tenant placed (default that of `tenant create`). */
  expectedLoad?: number;
}

export interface AdoptDeps {
  directory: Pool;
  shardPool(name: string): Pool;
  s3For?: (shard: string) => S3Client;
  config: Config;
}

export interface AdoptPlan {
  shard: string;
  /** True when nothing refuses the adoption. */
  ok: boolean;
  /** Why it is refused (empty when ok), each naming what to do. */
  reasons: string[];
  warnings: string[];
  /** Tenant tables found (`schema.name`). */
  tables: string[];
  /** Tables of bucketed datasets: `dataset init` places their buckets, adopt does not. */
  datasetTables: string[];
  /** Tenants found in the tables that would be placed on the shard now (epoch 1, active). */
  place: string[];
  /** Tenants found that the directory already places on the shard, or split there (nothing to record). */
  present: string[];
  /** Tenants whose rows here are a moved tenant's old copy (the directory places them elsewhere and this shard's fence disowns them): left alone. */
  movedAway: { tenant: string; shard: string }[];
  expectedLoad: number;
  /** The shard's load in the directory before and after, against its usable capacity. */
  load: { before: number; after: number; usable: number; capacity: number } | null;
}

export interface AdoptResult extends AdoptPlan {
  dryRun: boolean;
  /** Tenants placed by this run (a re-run: none). */
  created: string[];
  /** The directory generation of this run's placements; null when it placed none. */
  generation: number | null;
  /** Fences this run wrote on the shard (epoch 1, owned). */
  fencesInstalled: number;
}

/** At most this many tenants are named in one reason. */
const NAMED = 5;

export function validateAdoptInput(input: AdoptInput, config: Config): { shard: string; actor: string; expectedLoad: number } {
  const shard = knownShard(config, validateShardName(input.shard)).name;
  if (typeof input.actor !== 'string' || !input.actor.trim()) throw invalidInput('actor is required (who adopts the shard)');
  const expectedLoad = input.expectedLoad ?? DEFAULT_EXPECTED_LOAD;
  if (!Number.isSafeInteger(expectedLoad) || expectedLoad < 0) throw invalidInput(`expected load must be a non-negative integer, got ${expectedLoad}`);
  return { shard, actor: input.actor.trim(), expectedLoad };
}

const named = (xs: string[]) => `${xs.slice(0, NAMED).join(', ')}${xs.length > NAMED ? `, and ${xs.length - NAMED} more` : ''}`;

/** Everything adopt would do and every reason it would refuse; changes nothing. */
export async function planAdoption(deps: AdoptDeps, input: AdoptInput): Promise<AdoptPlan> {
  const { shard, expectedLoad } = validateAdoptInput(input, deps.config);
  const reasons: string[] = [];
  const warnings: string[] = [];
  const info = await getShard(deps.directory, shard);
  if (!info) reasons.push(`shard ${shard} is in the config but not in the directory: run \`shardctl directory migrate\` to register it`);
  else {
    if (info.status !== 'open') reasons.push(`shard ${shard} is ${info.status}: adopt places tenants on an open shard only`);
    if (info.dedicatedTo || info.class === 'dedicated')
      reasons.push(
        `shard ${shard} is ${info.dedicatedTo ? `dedicated to tenant ${info.dedicatedTo}` : 'a dedicated-class shard'}: adopt onto a shared shard, then \`shardctl tenant isolate\``,
      );
  }
  const pool = deps.shardPool(shard);
  const census = await takeTenantCensus(pool, deps.config);
  reasons.push(...census.problems);
  if (census.tables.length === 0)
    reasons.push(
      `shard ${shard} has no tenant table (a table in ${deps.config.tenant.schemas.join(', ')} with column ${deps.config.tenant.column}): nothing to adopt`,
    );

  const { placements } = await listPlacements(deps.directory);
  const byUnit = new Map<string, Placement>(placements.map((p) => [p.unit, p]));
  const fences = await getUnitFences(pool, census.tenants);
  const residency = await listResidency(deps.directory);
  // A split tenant lives on as its sub-units (lib/tenant-split.ts): its name is never placed again.
  const splits = await listSplits(deps.directory);
  const place: string[] = [];
  const present: string[] = [];
  const movedAway: AdoptPlan['movedAway'] = [];
  const elsewhere: string[] = [];
  const foreignFence: string[] = [];
  const outside: string[] = [];
  for (const tenant of census.tenants) {
    const p = byUnit.get(tenant);
    const f: FenceState | undefined = fences.get(tenant);
    const split = splits.get(tenant);
    if (split && split.shard === shard) present.push(tenant);
    else if (split) elsewhere.push(`${tenant} (split ${split.ways} ways on ${split.shard})`);
    else if (p && p.shard === shard && p.kind === 'tenant') present.push(tenant);
    else if (p && p.kind === 'tenant' && f && !f.owned) movedAway.push({ tenant, shard: p.shard });
    else if (p) elsewhere.push(`${tenant} (on ${p.shard}, epoch ${p.epoch})`);
    else if (f && !(f.epoch === 1 && f.owned && !f.frozen && !f.leaseExpired))
      foreignFence.push(`${tenant} (epoch ${f.epoch}, ${f.owned ? 'owned' : 'not owned'}${f.frozen || f.leaseExpired ? ', frozen' : ''})`);
    else {
      const why = info && residency.has(tenant) ? residencyProblem(info, tenant, residency.get(tenant)!) : undefined;
      if (why) outside.push(why);
      else place.push(tenant);
    }
  }
  if (elsewhere.length)
    reasons.push(
      `${elsewhere.length} tenant(s) found in ${shard}'s tables are already placed on another shard: ${named(elsewhere)}; their rows here are not theirs to claim (a second copy of the tenant, or stray rows): delete them here, or move the tenant's placement first`,
    );
  if (foreignFence.length)
    reasons.push(
      `${foreignFence.length} tenant(s) not in the directory have a fence on ${shard} that is not a first owner's: ${named(foreignFence)}; leftovers of earlier moves: inspect with \`shardctl doctor\``,
    );
  if (outside.length)
    reasons.push(...outside.slice(0, NAMED), ...(outside.length > NAMED ? [`… and ${outside.length - NAMED} more outside their residency`] : []));
  if (movedAway.length)
    warnings.push(
      `${movedAway.length} tenant(s) have rows here that a move left behind (placed elsewhere, disowned here): ${named(movedAway.map((m) => `${m.tenant} on ${m.shard}`))}; left alone`,
    );
  if (census.datasetTables.length)
    warnings.push(
      `bucketed dataset tables (${named(census.datasetTables)}) are not placed by adopt: run \`shardctl dataset init NAME --shard ${shard}\` for each dataset`,
    );
  if (deps.config.tenant.allowUnfencedWrites)
    warnings.push(
      'tenant.allowUnfencedWrites is true: a tenant written without the router after the census is not placed; re-run adopt once every writer goes through the router',
    );
  let load: AdoptPlan['load'] = null;
  if (info) {
    const usable = usableCapacity(info.capacity, deps.config.limits.headroomFraction);
    load = { before: info.load, after: info.load + place.length * expectedLoad, usable: Math.floor(usable), capacity: info.capacity };
    if (load.after > usable)
      warnings.push(
        `${shard}'s load would be ${load.after}, over its usable ${load.usable} of capacity ${info.capacity}: \`shardctl rebalance plan\` will propose moves off it (add shards first)`,
      );
  }
  return {
    shard,
    ok: reasons.length === 0,
    reasons,
    warnings,
    tables: census.tables,
    datasetTables: census.datasetTables,
    place,
    present,
    movedAway,
    expectedLoad,
    load,
  };
}

/**
 * Adopts the shard (or, with `dryRun`, only plans it). Refused (PreconditionFailed, with every
 * reason) before anything changes; see the head of this file for the order.
 */
export async function adoptShard(deps: AdoptDeps, input: AdoptInput, opts: { dryRun?: boolean } = {}): Promise<AdoptResult> {
  const { shard, actor, expectedLoad } = validateAdoptInput(input, deps.config);
  const first = await planAdoption(deps, input);
  const none = { created: [] as string[], generation: null, fencesInstalled: 0 };
  if (opts.dryRun) return { ...first, dryRun: true, ...none };
  if (!first.ok) throw refused(shard, first.reasons, 'nothing was changed');

  const [prep] = await prepareAllShards(deps.config, deps.shardPool, { shard, s3For: deps.s3For });
  if (prep.error)
    throw new ShardctlError('PreconditionFailed', `refusing to adopt ${shard}: \`shards prepare\` failed on it: ${prep.error}; nothing else was changed`);
  // The fence is on now: a writer without the router can add no tenant (unless unfenced writes
  // are allowed), so the tenants found now are the ones to place.
  const plan = await planAdoption(deps, input);
  if (!plan.ok) throw refused(shard, plan.reasons, 'it was prepared (fence installed), nothing else was changed');
  if (plan.place.length === 0) return { ...plan, dryRun: false, ...none };

  const pool = deps.shardPool(shard);
  const fences = await installFirstOwners(pool, plan.place);
  const takeBack = async () => {
    for (const u of fences.installed) await removeFirstFence(pool, u);
  };
  if (fences.conflicting.length) {
    await takeBack();
    throw refused(
      shard,
      [
        `a fence appeared on ${shard} meanwhile for ${named(fences.conflicting.map((f) => `${f.unit} (epoch ${f.epoch}, ${f.owned ? 'owned' : 'not owned'})`))}: another operation is placing these tenants`,
      ],
      'it was prepared, nothing else was changed',
    );
  }
  // A failure here may follow a commit the connection did not report: the fences stay then (they
  // are the placements' own if it committed, harmless if not); a re-run tells and completes.
  const r = await insertAdoptedPlacements(deps.directory, shard, plan.place, expectedLoad, {
    actor,
    reason: input.reason,
    detail: { tables: plan.tables.length },
  });
  if (!r.ok) {
    await takeBack();
    const why =
      'elsewhere' in r
        ? `${r.elsewhere.length} tenant(s) were placed on another shard meanwhile: ${named(r.elsewhere.map((p) => `${p.unit} on ${p.shard}`))}`
        : `shard ${shard} became ${r.shardStatus} meanwhile`;
    throw refused(shard, [why], 'it was prepared, nothing else was changed');
  }
  return { ...plan, dryRun: false, created: r.created, generation: r.generation, fencesInstalled: fences.installed.length };
}

function refused(shard: string, reasons: string[], what: string): ShardctlError {
  return new ShardctlError('PreconditionFailed', `refusing to adopt ${shard} (${what}):\n  - ${reasons.join('\n  - ')}`, { reasons });
}
