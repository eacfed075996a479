// Tenant creation and lookup. Order matters for single write authority: the shard's fence
// (epoch 1, owned) is written before the directory row, so a router can never route to a shard
// that would refuse the tenant; if the directory insert fails, the fence we wrote is removed.
import type { Pool } from 'pg';
import { Config, knownShard } from './config';
import { ShardctlError, invalidInput } from './errors';
import { validateShardName, validateTenantId } from './ids';
import { installOwner, removeFirstFence } from './shard/fence';
import { Placement, getPlacement, insertPlacement, listPlacements } from './directory/placements';
import { getSplit } from './directory/splits';
import { listShards } from './directory/shards';
import { chooseShardForNewUnit } from './directory/choose';
import { setResidency } from './directory/policy';
import { residencyProblem } from './directory/residency';
import { isConnectionError, dsnHost } from './directory/db';

export interface TenantDeps {
  directory: Pool;
  shardPool(name: string): Pool;
  config: Config;
  /** Fault hook for tests: runs after the shard fence is written, before the directory insert. */
  afterFence?: (ctx: { tenant: string; shard: string }) => Promise<void>;
}

export interface CreateTenantInput {
  tenant: string;
  shard?: string;
  expectedLoad?: number;
  /** Residency: the regions it may live in (lib/directory/policy.ts); absent: any. */
  regions?: string[];
  actor: string;
  reason?: string;
}

/** What `tenant show --json` prints. */
export interface TenantView {
  tenant: string;
  shard: string;
  epoch: number;
  state: Placement['state'];
  moveId: string | null;
  expectedLoad: number;
  updatedAt: string;
}

export const DEFAULT_EXPECTED_LOAD = 1;

export function tenantView(p: Placement): TenantView {
  return { tenant: p.unit, shard: p.shard, epoch: p.epoch, state: p.state, moveId: p.moveId, expectedLoad: p.expectedLoad, updatedAt: p.updatedAt };
}

export async function getTenant(directory: Pool, tenant: string): Promise<Placement | undefined> {
  const p = await getPlacement(directory, validateTenantId(tenant));
  return p && p.kind === 'tenant' ? p : undefined;
}

export async function listTenants(directory: Pool): Promise<{ generation: number; tenants: Placement[] }> {
  const { generation, placements } = await listPlacements(directory, { kind: 'tenant' });
  return { generation, tenants: placements };
}

function alreadyExists(p: Placement): ShardctlError {
  return new ShardctlError('AlreadyExists', `tenant ${p.unit} already exists on ${p.shard} (epoch ${p.epoch}, ${p.state})`, { placement: p });
}

export function validateCreateInput(input: CreateTenantInput, config: Config): { tenant: string; shard?: string; expectedLoad: number; actor: string } {
  const tenant = validateTenantId(input.tenant);
  if (typeof input.actor !== 'string' || !input.actor.trim()) throw invalidInput('actor is required (who creates the tenant)');
  const expectedLoad = input.expectedLoad ?? DEFAULT_EXPECTED_LOAD;
  if (!Number.isSafeInteger(expectedLoad) || expectedLoad < 0) throw invalidInput(`expected load must be a non-negative integer, got ${expectedLoad}`);
  let shard: string | undefined;
  if (input.shard !== undefined) {
    shard = knownShard(config, validateShardName(input.shard)).name;
  }
  return { tenant, shard, expectedLoad, actor: input.actor.trim() };
}

/** Creates a tenant at epoch 1, active, on `shard` or on the open shard with the most headroom. */
export async function createTenant(deps: TenantDeps, input: CreateTenantInput): Promise<Placement> {
  const { tenant, shard: asked, expectedLoad, actor } = validateCreateInput(input, deps.config);
  const { directory, config } = deps;

  const existing = await getPlacement(directory, tenant);
  if (existing) throw alreadyExists(existing);
  const split = await getSplit(directory, tenant);
  if (split) {
    throw new ShardctlError(
      'AlreadyExists',
      `tenant ${tenant} already exists, split ${split.ways} ways on ${split.shard} (${tenant}:0 .. ${tenant}:${split.ways - 1})`,
      {
        split,
      },
    );
  }
  const known = new Set(config.shards.map((s) => s.name));
  const shards = (await listShards(directory)).filter((s) => known.has(s.name));
  let shard: string;
  if (asked) {
    const info = shards.find((s) => s.name === asked);
    if (!info)
      throw new ShardctlError('NotFound', `shard "${asked}" is in the config but not in the directory: run \`shardctl directory migrate\` to register it`);
    if (info.status !== 'open') throw new ShardctlError('PreconditionFailed', `shard ${asked} is ${info.status}: new tenants go to open shards only`);
    if (info.dedicatedTo && info.dedicatedTo !== tenant)
      throw new ShardctlError('PreconditionFailed', `shard ${asked} is dedicated to tenant ${info.dedicatedTo}: new tenants go to shared shards only`);
    if (info.class === 'dedicated' && !info.dedicatedTo)
      throw new ShardctlError(
        'PreconditionFailed',
        `shard ${asked} is a dedicated-class shard, kept for an isolated tenant: create the tenant on a shared shard, then \`shardctl tenant isolate --tenant ${tenant}\``,
      );
    const outside = residencyProblem(info, tenant, input.regions ?? null);
    if (outside) throw new ShardctlError('PreconditionFailed', `${outside}: nothing was created`);
    shard = asked;
  } else {
    shard = chooseShardForNewUnit(shards, expectedLoad, config.limits.headroomFraction, input.regions ?? null);
  }

  const shardPool = deps.shardPool(shard);
  await writeFirstFence(directory, shardPool, shard, tenant);

  try {
    await deps.afterFence?.({ tenant, shard });
    const res = await insertPlacement(
      directory,
      { unit: tenant, kind: 'tenant', shard, expectedLoad },
      { actor, action: 'tenant.create', reason: input.reason, detail: { shard, expectedLoad } },
      // A shard chosen for its headroom is re-checked atomically with the insert; an operator's named shard is theirs.
      asked ? {} : { headroomFraction: config.limits.headroomFraction },
    );
    if (res.ok) {
      if (input.regions) await recordResidency(directory, tenant, input.regions, { actor, reason: input.reason });
      return res.placement;
    }
    // A concurrent creator won (necessarily on another shard: the fence CAS serialises one shard).
    if (res.current.shard !== shard) await removeFirstFence(shardPool, tenant);
    throw alreadyExists(res.current);
  } catch (e) {
    if (e instanceof ShardctlError && e.type === 'AlreadyExists') throw e;
    return await undoAfterFailedInsert(deps, shardPool, shard, tenant, e);
  }
}

/** The new tenant's residency, recorded after its placement; a failure says what is left to run. */
async function recordResidency(directory: Pool, tenant: string, regions: string[], who: { actor: string; reason?: string }): Promise<void> {
  try {
    await setResidency(directory, tenant, regions, who);
  } catch (e: any) {
    throw new ShardctlError(
      'Unavailable',
      `tenant ${tenant} was created, but its residency was not recorded (${e?.message ?? e}): run \`shardctl tenant residency ${tenant} --regions ${regions.join(',')}\``,
      undefined,
      true,
    );
  }
}

/** Writes {epoch 1, owned} on the shard, refusing if the shard already has a fence for the unit. */
async function writeFirstFence(directory: Pool, shardPool: Pool, shard: string, tenant: string): Promise<void> {
  let res: Awaited<ReturnType<typeof installOwner>>;
  try {
    res = await installOwner(shardPool, tenant, 1);
  } catch (e: any) {
    if (e?.code === '42P01' || e?.code === '3F000') {
      throw new ShardctlError('PreconditionFailed', `shard ${shard} is not prepared (no shardctl.fence table): run \`shardctl shards prepare\` first`);
    }
    if (isConnectionError(e)) {
      throw new ShardctlError('PreconditionFailed', `shard ${shard} unreachable (${e.code ?? e.message}): nothing was created`, undefined, true);
    }
    throw e;
  }
  if (res.ok) return;
  const now = await getPlacement(directory, tenant).catch(() => undefined);
  if (now) throw alreadyExists(now);
  const f = res.current!;
  throw new ShardctlError(
    'Conflict',
    `shard ${shard} already has a fence for tenant ${tenant} (epoch ${f.epoch}, ${f.owned ? 'owned' : 'not owned'}${f.frozen ? ', frozen' : ''}) ` +
      `but the directory has no such tenant: leftover of an earlier tenant or a creation in progress; nothing was changed`,
    { fence: f },
  );
}

/**
 * The directory insert failed. If the directory shows the tenant on this shard after all (the
 * commit went through before the connection dropped), that is success. Otherwise remove our fence
 * so nothing changed; if the directory cannot be read we cannot tell, so the fence stays (it is
 * harmless while no directory row points at it) and the error says so.
 */
async function undoAfterFailedInsert(deps: TenantDeps, shardPool: Pool, shard: string, tenant: string, err: unknown): Promise<Placement> {
  let now: Placement | undefined;
  try {
    now = await getPlacement(deps.directory, tenant);
  } catch {
    const msg = `${(err as any)?.message ?? err}; the fence for ${tenant} on ${shard} was left in place because the directory could not be checked: remove it if the tenant is not in the directory`;
    if (err instanceof ShardctlError) throw new ShardctlError(err.type, msg, err.details, err.retriable);
    if (isConnectionError(err))
      throw new ShardctlError('DirectoryUnavailable', `placement directory unreachable at ${dsnHost(deps.config.directory.dsn)}: ${msg}`, undefined, true);
    throw err;
  }
  if (now && now.shard === shard && now.epoch === 1) return now;
  await removeFirstFence(shardPool, tenant);
  if (now) throw alreadyExists(now);
  throw err;
}
