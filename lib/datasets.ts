// A bucketed dataset's units in the directory: `shardctl dataset init NAME --shard S` places all
// B buckets of NAME on one shard, each a unit `bucket:<name>:<n>` at epoch 1, active; a fleet then
// spreads them by moving buckets, exactly as it moves tenants. Per bucket the order is the
// tenants' (lib/tenants.ts): the shard's fence (epoch 1, owned) before the directory row, so a
// router never routes to a shard that would refuse the bucket. Idempotent: a re-run (after a crash
// or a partial run) skips what is placed and completes the rest; a bucket placed elsewhere, or a
// fence that is not a fresh first owner, is reported and left alone (nothing is overwritten).
import type { Pool } from 'pg';
import { Config, knownShard } from './config';
import { ShardctlError, invalidInput } from './errors';
import { validateShardName } from './ids';
import { bucketUnitName, validateDatasetName } from './buckets/units';
import { getUnitFence, installOwner } from './shard/fence';
import { getPlacement, insertPlacement } from './directory/placements';
import { listShards } from './directory/shards';

export interface InitDatasetInput {
  dataset: string;
  shard: string;
  actor: string;
  reason?: string;
  /** Expected load of each bucket (default 0: a bucket's share is measured, not declared). */
  expectedLoad?: number;
}

export interface InitDatasetResult {
  dataset: string;
  shard: string;
  buckets: number;
  created: number;
  /** Already placed on `shard` (a re-run). */
  present: number;
  /** Placed on another shard already (moved since, or initialised elsewhere): left alone. */
  elsewhere: string[];
}

export function validateInitDatasetInput(input: InitDatasetInput, config: Config) {
  const name = validateDatasetName(input.dataset);
  const ds = config.datasets.find((d) => d.name === name);
  if (!ds) throw invalidInput(`dataset ${name} is not in config.datasets (known: ${config.datasets.map((d) => d.name).join(', ') || 'none'})`);
  const shard = knownShard(config, validateShardName(input.shard)).name;
  if (typeof input.actor !== 'string' || !input.actor.trim()) throw invalidInput('actor is required (who initialises the dataset)');
  const expectedLoad = input.expectedLoad ?? 0;
  if (!Number.isSafeInteger(expectedLoad) || expectedLoad < 0) throw invalidInput(`expected load must be a non-negative integer, got ${expectedLoad}`);
  return { ds, shard, expectedLoad, actor: input.actor.trim() };
}

/** Places every bucket of the dataset on `shard` (fence first, then the directory row, per bucket). */
export async function initDataset(
  deps: { directory: Pool; shardPool(name: string): Pool; config: Config },
  input: InitDatasetInput,
): Promise<InitDatasetResult> {
  const { ds, shard, expectedLoad, actor } = validateInitDatasetInput(input, deps.config);
  const info = (await listShards(deps.directory)).find((s) => s.name === shard);
  if (!info)
    throw new ShardctlError('NotFound', `shard "${shard}" is in the config but not in the directory: run \`shardctl directory migrate\` to register it`);
  if (info.status !== 'open') throw new ShardctlError('PreconditionFailed', `shard ${shard} is ${info.status}: a dataset starts on an open shard`);
  const pool = deps.shardPool(shard);
  // The shard must know the dataset with this B (shards prepare records it, and refuses another).
  const b = await pool.query(`select value from shardctl.settings where key = $1`, [`dataset.${ds.name}.buckets`]).catch((e: any) => {
    if (e?.code === '42P01' || e?.code === '3F000') return { rows: [] };
    throw e;
  });
  if (b.rows[0]?.value !== String(ds.buckets)) {
    throw new ShardctlError(
      'PreconditionFailed',
      `shard ${shard} does not record dataset ${ds.name} with ${ds.buckets} buckets (${b.rows[0] ? `it records ${b.rows[0].value}` : 'not prepared for it'}): run \`shardctl shards prepare --shard ${shard}\` first`,
    );
  }
  const out: InitDatasetResult = { dataset: ds.name, shard, buckets: ds.buckets, created: 0, present: 0, elsewhere: [] };
  for (let n = 0; n < ds.buckets; n++) {
    const unit = bucketUnitName(ds.name, n, ds.buckets);
    const p = await getPlacement(deps.directory, unit);
    if (p) {
      if (p.shard === shard) out.present++;
      else out.elsewhere.push(`${unit} on ${p.shard}`);
      continue;
    }
    const f = await installOwner(pool, unit, 1);
    if (!f.ok) {
      // A first owner's fence with no directory row: this init's own earlier run, stopped between
      // the two writes. Anything else (moved, frozen, disowned) is not ours to claim.
      const now = await getUnitFence(pool, unit);
      if (!now || now.epoch !== 1 || !now.owned || now.frozen) {
        throw new ShardctlError(
          'Conflict',
          `shard ${shard} already has a fence for ${unit} (epoch ${now?.epoch}, ${now?.owned ? 'owned' : 'not owned'}${now?.frozen ? ', frozen' : ''}) but the directory has no such unit; nothing was changed for it`,
        );
      }
    }
    const r = await insertPlacement(
      deps.directory,
      { unit, kind: 'bucket', shard, expectedLoad },
      { actor, action: 'dataset.init', reason: input.reason, detail: { dataset: ds.name, bucket: n, buckets: ds.buckets, shard } },
    );
    if (r.ok) out.created++;
    else if (r.current.shard === shard) out.present++;
    else out.elsewhere.push(`${unit} on ${r.current.shard}`);
  }
  return out;
}
