// Prepares a shard for moves: installs schema `shardctl` (with the routing hash; each bucketed
// dataset's B is recorded, and a changed B refused), optionally the demo schema, and the
// fence trigger on every tenant table — in one transaction under an advisory lock, so two
// prepares serialize and a failure leaves the shard as it was. Idempotent: a table whose
// trigger is already exactly ours is left alone (no table lock taken on a re-run).
import { writeAuditSchemaSql, installWriteAudit } from './write-audit';
import type { Pool, PoolClient } from 'pg';
import { Config, shardByName } from '../config';
import { ShardctlError } from '../errors';
import { DEMO_SCHEMA_SQL } from '../demo/schema';
import { fenceTriggerFunctionSql, installShardSchema } from './schema';
import { listTenantTables, movabilityProblems, TenantTable } from './tables';
import { checkRoutingHash, recordDatasetBuckets } from './datasets';
import type { S3Client } from '@aws-sdk/client-s3';
import { s3ClientFor } from '../s3';
import { ensureBucketMarker } from '../blobs/marker';

export const FENCE_TRIGGER_NAME = 'shardctl_fence';

/** BEFORE (2) | ROW (1) | INSERT (4) | DELETE (8) | UPDATE (16): pg_trigger.tgtype of our trigger. */
const FENCE_TRIGGER_TYPE = 31;

export interface PrepareResult {
  /** Tenant tables that carry the fence after prepare (`schema.name`). */
  tables: string[];
  /** Why some tables cannot be moved (warnings: they are fenced all the same). */
  problems: string[];
  /** Tables whose trigger was created or repaired by this run (empty on an idempotent re-run). */
  changed: string[];
}

export interface ShardPrepareResult extends PrepareResult {
  shard: string;
  /** The shard's bucket identity marker (lib/blobs/marker.ts): claimed by this run, or already the shard's. */
  bucketMarker?: 'created' | 'present';
  /** Set when this shard failed; the other shards are still attempted. */
  error?: string;
}

export async function prepareShard(pool: Pool, config: Config, opts: { demoSchema?: boolean; lockTimeoutMs?: number } = {}): Promise<PrepareResult> {
  const c = await pool.connect();
  try {
    await c.query('begin');
    // A writer holding a tenant table for long must not stall prepare (and every writer queued
    // behind prepare's trigger DDL) indefinitely: give up and say so.
    await c.query(`select set_config('lock_timeout', $1, true)`, [`${opts.lockTimeoutMs ?? 10_000}ms`]);
    await c.query(`select pg_advisory_xact_lock(hashtextextended('shardctl.prepare', 0))`);
    await installShardSchema(c);
    if (config.datasets.length > 0) {
      await checkRoutingHash(c);
      await recordDatasetBuckets(c, config.datasets);
    }
    if (opts.demoSchema) await c.query(DEMO_SCHEMA_SQL);
    const fn = fenceTriggerFunctionSql(config.tenant.column);
    await c.query(fn.sql);
    const audit = writeAuditSchemaSql(config.tenant.column);
    await c.query(audit.sql);
    const tables = await listTenantTables(c, config.tenant);
    const changed: string[] = [];
    for (const t of tables) {
      // `changed` names each table whose shardctl triggers (fence or write audit) this run created or repaired.
      const auditChanged = await installWriteAudit(c, t, audit.fn);
      if (await hasOurTrigger(c, t, fn.name)) {
        if (auditChanged) changed.push(displayName(t));
        continue;
      }
      await c.query(
        `create or replace trigger ${FENCE_TRIGGER_NAME} before insert or update or delete on ${t.qualified}
           for each row execute function ${fn.name}()`,
      );
      changed.push(displayName(t));
    }
    await c.query(
      `insert into shardctl.settings(key, value) values ('allow_unfenced_writes', $1)
       on conflict (key) do update set value = excluded.value where shardctl.settings.value is distinct from excluded.value`,
      [String(config.tenant.allowUnfencedWrites)],
    );
    await c.query('commit');
    return {
      tables: tables.map(displayName),
      problems: tables.flatMap((t) => movabilityProblems(t, config.tenant.column)),
      changed,
    };
  } catch (err: any) {
    await c.query('rollback').catch(() => {});
    if (err?.code === '55P03') {
      throw new ShardctlError(
        'Conflict',
        `prepare gave up waiting for a table lock (a long transaction holds a tenant table): ${err.message}; retry`,
        undefined,
        true,
      );
    }
    throw err;
  } finally {
    c.release();
  }
}

/**
 * Prepares every configured shard (or the one named): its Postgres, then its bucket's identity
 * marker (written once; a bucket another shard already claimed fails this shard). An unknown
 * name throws before any I/O. S3 clients come from `s3For`, or from the config (closed after).
 */
export async function prepareAllShards(
  config: Config,
  shardPool: (name: string) => Pool,
  opts: { shard?: string; demoSchema?: boolean; s3For?: (shard: string) => S3Client } = {},
): Promise<ShardPrepareResult[]> {
  const names = opts.shard ? [shardByName(config, opts.shard).name] : config.shards.map((s) => s.name);
  const own = new Map<string, S3Client>();
  const s3For = opts.s3For ?? ((name: string) => own.get(name) ?? own.set(name, s3ClientFor(config, name)).get(name)!);
  const out: ShardPrepareResult[] = [];
  try {
    for (const shard of names) {
      try {
        const r = await prepareShard(shardPool(shard), config, { demoSchema: opts.demoSchema });
        const m = await ensureBucketMarker({ shard, s3: s3For(shard), bucket: shardByName(config, shard).bucket });
        out.push({ shard, ...r, bucketMarker: m.created ? 'created' : 'present' });
      } catch (e: any) {
        out.push({ shard, tables: [], problems: [], changed: [], error: e?.message ?? String(e) });
      }
    }
  } finally {
    for (const c of own.values()) c.destroy();
  }
  return out;
}

export interface FenceStatus {
  schemaInstalled: boolean;
  tenantTables: string[];
  /** Tenant tables carrying an enabled shardctl_fence trigger. */
  fenced: string[];
  /** Tenant tables without it (or with it disabled): their writes are not fenced. */
  unfenced: string[];
}

/** What `shards list` shows: which tenant tables of a shard are fenced. Read-only. */
export async function fenceStatus(db: Pool | PoolClient, config: Config): Promise<FenceStatus> {
  const r = await db.query(`select to_regclass('shardctl.fence') is not null as installed`);
  const tables = await listTenantTables(db, config.tenant);
  const fn = fenceTriggerFunctionSql(config.tenant.column);
  const fenced: string[] = [];
  const unfenced: string[] = [];
  for (const t of tables) ((await hasOurTrigger(db, t, fn.name)) ? fenced : unfenced).push(displayName(t));
  return { schemaInstalled: r.rows[0].installed, tenantTables: tables.map(displayName), fenced, unfenced };
}

/** Exactly our trigger: right function, BEFORE ROW on all three events, no WHEN, enabled for origin sessions. */
async function hasOurTrigger(db: Pool | PoolClient, t: TenantTable, fnName: string): Promise<boolean> {
  const r = await db.query(
    `select 1 from pg_trigger tg
      where tg.tgrelid = $1::regclass and tg.tgname = $2 and tg.tgfoid = to_regprocedure($3 || '()')
        and tg.tgtype = $4 and tg.tgenabled = 'O' and tg.tgqual is null and tg.tgattr = ''::int2vector`,
    [t.qualified, FENCE_TRIGGER_NAME, fnName, FENCE_TRIGGER_TYPE],
  );
  return (r.rowCount ?? 0) > 0;
}

function displayName(t: TenantTable): string {
  return `${t.schema}.${t.name}`;
}
