// `shardctl tenant split T --ways K` (docs/architecture.md, "Splitting a tenant"): T's rows stay
// where they are; its routing unit becomes K sub-units T:0 .. T:K-1 (a row's sub-unit is
// stable_hash(its table's split column) mod K), each with its own epoch, so each can later move on
// its own. Order, so that no instant has a router sent where it would be refused for good, and no
// instant has two shards accepting a row: (1) the shard's sub-unit fences (epoch e + 1, owned);
// (2) the directory's compare-and-set (T at e → T:k at e + 1, same shard); (3) the shard disowns T
// at e + 1 (waiting for T's in-flight writers), so a stale router's T write is refused (SC421) and
// retried on its sub-unit. Every step is idempotent: a re-run after a crash completes the split.
import type { Pool } from 'pg';
import type { Config } from './config';
import { ShardctlError, invalidInput } from './errors';
import { validateTenantId } from './ids';
import { MAX_SPLIT_WAYS, parseUnit, splitUnitName } from './buckets/units';
import { getPlacement } from './directory/placements';
import { getSplit, splitPlacement } from './directory/splits';
import { listTenantTables, tenantTableSelector } from './shard/tables';
import { hasTableFence, tenantRowUnit } from './shard/prepare';
import { disownSplitTenant, installSubUnitFences, removeSubUnitFences } from './shard/split';

export interface SplitTenantInput {
  tenant: string;
  ways: number;
  actor: string;
  reason?: string;
}

export interface SplitTenantResult {
  tenant: string;
  ways: number;
  shard: string;
  /** The sub-units' epoch (the tenant's + 1). */
  epoch: number;
  units: string[];
  /** True when the directory was already split (a re-run that completed the shard's side). */
  resumed: boolean;
}

export function validateSplitInput(input: SplitTenantInput): { tenant: string; ways: number; actor: string } {
  const tenant = validateTenantId(input.tenant);
  if (!Number.isInteger(input.ways) || input.ways < 2 || input.ways > MAX_SPLIT_WAYS) {
    throw invalidInput(`--ways is an integer from 2 to ${MAX_SPLIT_WAYS}, got ${input.ways}`);
  }
  if (typeof input.actor !== 'string' || !input.actor.trim()) throw invalidInput('actor is required (who splits the tenant)');
  return { tenant, ways: input.ways, actor: input.actor.trim() };
}

/**
 * Why the shard cannot fence `tenant`'s sub-units (empty when it can): every tenant table needs a
 * configured split column it has, and the fence of this shardctl (shards prepare) that reads it;
 * the tenant must hold no blobs (the blob index has no split column: a split tenant's blob writes
 * would be refused, so the split is refused first).
 */
export async function splitProblems(pool: Pool, config: Config, tenant: string): Promise<string[]> {
  const out: string[] = [];
  for (const t of await listTenantTables(pool, tenantTableSelector(config.tenant))) {
    const name = `${t.schema}.${t.name}`;
    if (t.schema === 'shardctl' && t.name === 'blob_index') continue;
    const col = config.tenant.splitColumns?.[name];
    if (col === undefined) {
      out.push(`${name} has no split column in config.tenant.splitColumns`);
      continue;
    }
    if (!t.columns.some((c) => c.name === col)) {
      out.push(`${name} has no column ${col} (its split column in config.tenant.splitColumns)`);
      continue;
    }
    if (!(await hasTableFence(pool, t.qualified, config.tenant.column, tenantRowUnit(config, t)))) {
      out.push(`${name}'s fence does not read its split column ${col}: run \`shardctl shards prepare\``);
    }
    // A row with a NULL split column would be in no sub-unit: no move would ever carry it.
    if (t.columns.find((c) => c.name === col)?.notNull === false) {
      const nulls = await pool.query(`select 1 from ${t.qualified} where ${quoteIdent(config.tenant.column)} = $1 and ${quoteIdent(col)} is null limit 1`, [
        tenant,
      ]);
      if (nulls.rowCount)
        out.push(`${name} holds rows of tenant ${tenant} whose split column ${col} is NULL (such a row is in no sub-unit): give them a value first`);
    }
  }
  const blobs = await pool.query(`select 1 from shardctl.blob_index where ${quoteIdent(config.tenant.column)} = $1 limit 1`, [tenant]).catch((e: any) => {
    if (e?.code === '42P01') return { rowCount: 0 };
    throw e;
  });
  if (blobs.rowCount) out.push(`tenant ${tenant} has blobs, and blobs of a split tenant are not supported yet`);
  return out;
}

const quoteIdent = (s: string) => `"${s.replace(/"/g, '""')}"`;

export async function splitTenant(
  deps: { directory: Pool; shardPool(name: string): Pool; config: Config },
  input: SplitTenantInput,
): Promise<SplitTenantResult> {
  const { tenant, ways, actor } = validateSplitInput(input);
  if (parseUnit(tenant).kind !== 'tenant') throw invalidInput(`${tenant} is not a tenant`);
  const units = Array.from({ length: ways }, (_, k) => splitUnitName(tenant, k));
  const p = await getPlacement(deps.directory, tenant);
  if (!p) {
    const s = await getSplit(deps.directory, tenant);
    if (!s) throw new ShardctlError('NotFound', `tenant ${tenant} has no placement in the directory`);
    if (s.ways !== ways) throw new ShardctlError('Conflict', `tenant ${tenant} is already split ${s.ways} ways (on ${s.shard}); nothing was changed`);
    // Already split in the directory: finish the shard's side (a run stopped after the compare-and-set).
    await disownSplitTenant(deps.shardPool(s.shard), tenant, s.parentEpoch + 1);
    return { tenant, ways, shard: s.shard, epoch: s.parentEpoch + 1, units, resumed: true };
  }
  if (p.kind !== 'tenant') throw invalidInput(`${tenant} is a ${p.kind} unit, not a tenant`);
  if (p.state !== 'active') {
    throw new ShardctlError('PreconditionFailed', `tenant ${tenant} is ${p.state} (move ${p.moveId}): a tenant splits only while no move owns it`);
  }
  const pool = deps.shardPool(p.shard);
  const problems = await splitProblems(pool, deps.config, tenant);
  if (problems.length) {
    throw new ShardctlError('PreconditionFailed', `tenant ${tenant} cannot be split on ${p.shard}: ${problems.join('; ')}`, { problems });
  }
  const epoch = p.epoch + 1;
  const fences = await installSubUnitFences(pool, tenant, ways, epoch);
  if (fences.conflicting.length) {
    throw new ShardctlError(
      'Conflict',
      `shard ${p.shard} already has other fences for sub-units of ${tenant}: ${fences.conflicting.map((f) => `${f.unit} (epoch ${f.epoch}, ways ${f.ways ?? 'none'})`).join(', ')}; nothing was changed`,
    );
  }
  const r = await splitPlacement(deps.directory, tenant, ways, { shard: p.shard, epoch: p.epoch }, { actor, reason: input.reason });
  if (!r.ok) {
    // The directory never named these sub-units: their fences are nobody's.
    await removeSubUnitFences(pool, tenant, ways, epoch).catch(() => 0);
    throw new ShardctlError('PreconditionFailed', `tenant ${tenant} was not split: ${r.reason}; nothing was changed`, { current: r.current });
  }
  await disownSplitTenant(pool, tenant, epoch);
  return { tenant, ways, shard: p.shard, epoch, units, resumed: false };
}
