// `shardctl doctor`'s eyes: reads (never writes) the directory, every configured shard and
// Temporal's running moves, each bounded by a short timeout, and reports what it could not reach
// instead of failing. The judgement is lib/doctor/findings.ts.
import { FROZEN_NOW_SQL } from '../shard/fence-sql';
import type { Pool } from 'pg';
import type { Client } from '@temporalio/client';
import { shardByName, type Config } from '../config';
import type { Connections } from '../connections';
import { dsnHost } from '../directory/db';
import { listPlacements } from '../directory/placements';
import { replicationNamePattern, moveWorkflowId } from '../ids';
import { fenceStatus } from '../shard/prepare';
import { MOVE_WORKFLOW_TYPE } from '../moves/start';
import { SA } from '../../workflows/search-attributes';
import * as M from '../../workflows/messages';
import type { Facts, RunningMove, ShardFacts, SlotFact, FenceFact, BucketRowsFact } from './findings';
import { listShards } from '../directory/shards';
import { listTenantTables, quoteIdent } from '../shard/tables';
import { datasetTables } from '../unit-rows';
import { bucketUnitName } from '../buckets/units';
import { listOpenReservations } from '../directory/reservations';
import { foreignBlobFacts } from './blob-facts';

const OURS = replicationNamePattern('');
const short = (e: unknown) =>
  String((e as Error)?.message ?? e)
    .split('\n')[0]
    .slice(0, 300);

export async function shardFacts(pool: Pool, config: Config, shard: string): Promise<ShardFacts> {
  const host = dsnHost(config.shards.find((s) => s.name === shard)!.dsn);
  try {
    const slots = await pool.query(
      `select slot_name, active, wal_status,
              case when restart_lsn is null then null else pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint end as retained
         from pg_replication_slots where slot_name like $1 order by slot_name`,
      [OURS],
    );
    const pubs = await pool.query(`select pubname from pg_publication where pubname like $1 order by pubname`, [OURS]);
    const st = await fenceStatus(pool, config);
    let fences: FenceFact[] = [];
    if (st.schemaInstalled) {
      // "frozen" as the route check sees it: a freeze whose lease ran out refuses nothing.
      const r = await pool.query(`select unit, epoch, owned, ${FROZEN_NOW_SQL} as frozen from shardctl.fence`);
      fences = r.rows.map((x) => ({ unit: x.unit, epoch: Number(x.epoch), owned: x.owned, frozen: x.frozen }));
    }
    // The B each bucketed dataset is recorded with here (`shards prepare`): absent table, none recorded.
    const recorded = st.schemaInstalled
      ? await pool
          .query(`select key, value from shardctl.settings where key like 'dataset.%.buckets'`)
          .then((r) => r.rows as { key: string; value: string }[])
          .catch((e: any) => {
            if (e?.code === '42P01') return [];
            throw e;
          })
      : [];
    const bucketRows = st.schemaInstalled && config.datasets.length ? await bucketRowFacts(pool, config) : undefined;
    return {
      shard,
      host,
      reachable: true,
      ...(bucketRows ? { bucketRows } : {}),
      datasetBuckets: Object.fromEntries(recorded.map((x) => [x.key.slice('dataset.'.length, -'.buckets'.length), Number(x.value)])),
      slots: slots.rows.map((r): SlotFact => ({
        name: r.slot_name,
        active: r.active,
        walStatus: r.wal_status,
        retainedBytes: r.retained === null ? null : Number(r.retained),
      })),
      publications: pubs.rows.map((r) => r.pubname),
      schemaInstalled: st.schemaInstalled,
      fences,
      unfenced: st.unfenced,
      foreignBlobs: [],
    };
  } catch (e) {
    return { shard, host, reachable: false, error: short(e), slots: [], publications: [], schemaInstalled: false, fences: [], unfenced: [], foreignBlobs: [] };
  }
}

/**
 * Which buckets of each configured dataset have rows in its tables here: one index probe per
 * bucket present when the primary key leads with the bucket column (as the design asks), else a
 * read of the table. Tables missing on this shard are not its to report.
 */
async function bucketRowFacts(pool: Pool, config: Config): Promise<BucketRowsFact[]> {
  const out: BucketRowsFact[] = [];
  for (const ds of config.datasets) {
    for (const t of await listTenantTables(pool, datasetTables(config, ds)).catch(() => [])) {
      const col = quoteIdent(ds.bucketColumn);
      const r =
        t.primaryKey[0] === ds.bucketColumn
          ? await pool.query(
              `with recursive walk(v) as (
                 (select ${col} from ${t.qualified} order by ${col} limit 1)
                 union all
                 select (select ${col} from ${t.qualified} where ${col} > walk.v order by ${col} limit 1) from walk where walk.v is not null)
               select v::int as bucket from walk where v is not null`,
            )
          : await pool.query(`select distinct ${col}::int as bucket from ${t.qualified} where ${col} is not null`);
      for (const x of r.rows) {
        const bucket = Number(x.bucket);
        if (!Number.isInteger(bucket) || bucket < 0 || bucket >= ds.buckets) continue;
        out.push({ unit: bucketUnitName(ds.name, bucket, ds.buckets), table: t.qualified, column: ds.bucketColumn, bucket });
      }
    }
  }
  return out;
}

/** The move's id, its phase's start and its soak's end from its status query; nulls when no worker answers within `timeoutMs`. */
async function queryMoveStatus(client: Client, workflowId: string, timeoutMs: number): Promise<Pick<RunningMove, 'moveId' | 'phaseSince' | 'soakEndsAt'>> {
  try {
    // A deadline on the call itself: an abandoned query would keep the process alive until the server gives up.
    const s = await client.connection.withDeadline(Date.now() + timeoutMs, () => client.workflow.getHandle(workflowId).query(M.statusQuery));
    return { moveId: s?.moveId || null, phaseSince: (s?.phase && s.phaseTimes?.[s.phase]) || null, soakEndsAt: s?.soakEndsAt ?? null };
  } catch {
    return { moveId: null, phaseSince: null, soakEndsAt: null };
  }
}

/** The custom search attributes the namespace has (names), or the error that kept doctor from asking. */
export async function registeredSearchAttributes(client: Client, namespace: string): Promise<string[]> {
  const r = await client.connection.withDeadline(Date.now() + 5000, () => client.connection.operatorService.listSearchAttributes({ namespace }));
  return Object.keys(r.customAttributes ?? {}).sort();
}

export async function runningMoves(client: Client, opts: { queryTimeoutMs?: number } = {}): Promise<RunningMove[]> {
  const out: RunningMove[] = [];
  for await (const w of client.workflow.list({ query: `WorkflowType = '${MOVE_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'` })) {
    const a = w.typedSearchAttributes;
    out.push({
      unit: a.get(SA.unit) ?? w.workflowId.replace(/^move-/, ''),
      workflowId: w.workflowId,
      moveId: null,
      phase: a.get(SA.phase) ?? null,
      blockedReason: a.get(SA.blockedReason) ?? null,
      phaseSince: null,
      soakEndsAt: null,
    });
  }
  await Promise.all(out.map(async (m) => Object.assign(m, await queryMoveStatus(client, m.workflowId, opts.queryTimeoutMs ?? 3000))));
  return out;
}

/** Whether a move workflow for `unit` runs now: describe is strongly consistent, unlike visibility. */
export async function moveIsRunning(client: Client, unit: string): Promise<boolean> {
  try {
    const d = await client.workflow.getHandle(moveWorkflowId(unit)).describe();
    return d.status.name === 'RUNNING';
  } catch (e) {
    if ((e as Error)?.name === 'WorkflowNotFoundError') return false;
    throw e;
  }
}

/** Whether the fleet's rebalance run (workflow id from the config) is running now (describe, strongly consistent). */
async function rebalanceIsRunning(client: Client, workflowId: string): Promise<boolean> {
  try {
    const d = await client.connection.withDeadline(Date.now() + 5000, () => client.workflow.getHandle(workflowId).describe());
    return d.status.name === 'RUNNING';
  } catch (e) {
    if ((e as Error)?.name === 'WorkflowNotFoundError') return false;
    throw e;
  }
}

const BUCKET_TIMEOUT_MS = 20_000;

/** `p`, or a rejection with `why` after `ms` (doctor reports what it could not reach instead of hanging). */
function withTimeout<T>(p: Promise<T>, ms: number, why: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(why)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

export interface FactSources {
  config: Config;
  conns: Connections;
  /** null when Temporal could not be reached (with why). */
  temporal: { client: Client } | { error: string };
  walThresholdBytes: number;
  /** A move in one phase longer than this is reported (soak: this long past its end). */
  phaseThresholdMs: number;
}

export async function gatherFacts(src: FactSources): Promise<Facts> {
  const { config, conns } = src;
  const shards = await Promise.all(config.shards.map((s) => shardFacts(conns.shardPool(s.name), config, s.name)));
  let directory: Facts['directory'];
  try {
    const dir = conns.directoryPool();
    const { placements } = await listPlacements(dir);
    const moving = placements.filter((p) => p.moveId).map((p) => p.moveId!);
    const targets = moving.length ? await dir.query('select move_id, target from shardctl.moves where move_id = any($1)', [moving]) : { rows: [] };
    directory = {
      reachable: true,
      placements: placements.map((p) => ({ unit: p.unit, shard: p.shard, epoch: p.epoch, state: p.state, moveId: p.moveId })),
      moveTargets: Object.fromEntries(targets.rows.map((r: { move_id: string; target: string }) => [r.move_id, r.target])),
      reservations: await listOpenReservations(dir),
      dedications: (await listShards(dir)).filter((x) => x.dedicatedTo).map((x) => ({ shard: x.name, tenant: x.dedicatedTo! })),
    };
  } catch (e) {
    directory = { reachable: false, error: short(e), placements: [], moveTargets: {}, reservations: [] };
  }
  if (directory.reachable) {
    // Which unit each bucket may hold only as a copy: the directory places it elsewhere.
    const owners = new Map(directory.placements.map((p) => [p.unit, p.shard]));
    await Promise.all(
      shards
        .filter((s) => s.reachable)
        .map(async (s) => {
          try {
            s.foreignBlobs = await withTimeout(
              foreignBlobFacts(conns.s3For(s.shard), shardByName(config, s.shard).bucket, conns.shardPool(s.shard), s.shard, owners),
              BUCKET_TIMEOUT_MS,
              `listing the bucket took over ${BUCKET_TIMEOUT_MS / 1000} s`,
            );
          } catch (e) {
            s.bucketError = short(e);
          }
        }),
    );
  }
  let temporal: Facts['temporal'];
  if ('error' in src.temporal) temporal = { reachable: false, error: src.temporal.error, running: [] };
  else {
    try {
      temporal = { reachable: true, running: await runningMoves(src.temporal.client) };
      temporal.rebalanceRunning = await rebalanceIsRunning(src.temporal.client, config.temporal.rebalanceWorkflowId).catch(() => undefined);
      try {
        temporal.searchAttributes = await registeredSearchAttributes(src.temporal.client, config.temporal.namespace);
      } catch (e) {
        temporal.searchAttributesError = short(e);
      }
    } catch (e) {
      temporal = { reachable: false, error: short(e), running: [] };
    }
  }
  return {
    directory,
    temporal,
    shards,
    walThresholdBytes: src.walThresholdBytes,
    phaseThresholdMs: src.phaseThresholdMs,
    now: new Date().toISOString(),
    namespace: config.temporal.namespace,
    datasets: config.datasets.map((d) => ({ name: d.name, buckets: d.buckets })),
  };
}
