// Prepares a shard for moves: installs schema `shardctl` (with the routing hash; each bucketed
// dataset's B is recorded, and a changed B refused), optionally the demo schema, and the fence
// (lib/shard/fence-sql.ts: two AFTER ROW triggers whose WHEN refuses rows of another unit, the
// route checked once per transaction) on every tenant table — in one transaction under an advisory lock, so two prepares serialize
// and a failure leaves the shard as it was. Idempotent: a table whose fence is already exactly
// ours is left alone (no table lock taken on a re-run); an older shardctl's fence is replaced.
import { writeAuditSchemaSql, installWriteAudit } from './write-audit';
import type { Pool, PoolClient } from 'pg';
import { Config, shardByName } from '../config';
import { ShardctlError } from '../errors';
import { DEMO_SCHEMA_SQL } from '../demo/schema';
import { installShardSchema } from './schema';
import { listTenantTables, movabilityProblems, tenantTableSelector, TenantTable } from './tables';
import { blobIndexDdl, bucketBlobIndexDdl } from '../blobs/index-table';
import { bucketTableProblems, checkRoutingHash, jobsTableProblems, recordDatasetBuckets } from './datasets';
import { bucketUnitSqlExpr, datasetTables } from '../unit-rows';
import type { S3Client } from '@aws-sdk/client-s3';
import { s3ClientFor } from '../s3';
import { ensureBucketMarker } from '../blobs/marker';
import { FENCE_OLD_ROWS_TRIGGER, FENCE_TRIGGER_NAME, fenceTriggerArgs, fenceTriggersSql, fenceVersion, splitRowUnitSql, type RowUnitSql } from './fence-sql';

export { FENCE_TRIGGER_NAME } from './fence-sql';

/** pg_trigger.tgtype, AFTER: ROW (1) | INSERT (4) | UPDATE (16) for new rows; ROW | DELETE (8) | UPDATE for old rows. */
const NEW_ROWS_TRIGGER_TYPE = 21;
const OLD_ROWS_TRIGGER_TYPE = 25;

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

/** How long a prepare waits for another prepare of the same shard to finish (they serialize on an advisory lock). */
export const PREPARE_QUEUE_TIMEOUT_MS = 120_000;

export async function prepareShard(
  pool: Pool,
  config: Config,
  opts: { demoSchema?: boolean; lockTimeoutMs?: number; queueTimeoutMs?: number } = {},
): Promise<PrepareResult> {
  const c = await pool.connect();
  let queued = true;
  try {
    await c.query('begin');
    // Another prepare of this shard runs to its end first, however many tables it has (it holds no
    // writer up while it waits here); the wait is bounded on its own, with its own message. Before,
    // the table lock's 10 s bound covered this wait too, and a prepare queued behind a long one gave
    // up as if a writer held a table (seen in CI with many test files preparing the same shards).
    await c.query(`select set_config('lock_timeout', $1, true)`, [`${opts.queueTimeoutMs ?? PREPARE_QUEUE_TIMEOUT_MS}ms`]);
    await c.query(`select pg_advisory_xact_lock(hashtextextended('shardctl.prepare', 0))`);
    queued = false;
    // A writer holding a tenant table for long must not stall prepare (and every writer queued
    // behind prepare's trigger DDL) indefinitely: give up and say so.
    await c.query(`select set_config('lock_timeout', $1, true)`, [`${opts.lockTimeoutMs ?? 10_000}ms`]);
    await installShardSchema(c, { fenceLibrary: config.fence.library });
    if (config.datasets.length > 0) {
      await checkRoutingHash(c);
      await recordDatasetBuckets(c, config.datasets);
    }
    if (opts.demoSchema) await c.query(DEMO_SCHEMA_SQL);
    const audit = writeAuditSchemaSql(config.tenant.column);
    await c.query(audit.sql);
    await c.query(blobIndexDdl(config.tenant.column));
    const tables = await listTenantTables(c, tenantTableSelector(config.tenant));
    const changed: string[] = [];
    for (const t of tables) {
      // `changed` names each table whose shardctl triggers (fence or write audit) this run created or repaired.
      const auditChanged = await installWriteAudit(c, t, audit.fn);
      const rowUnit = tenantRowUnit(config, t);
      if (await hasTableFence(c, t.qualified, config.tenant.column, rowUnit)) {
        if (auditChanged) changed.push(displayName(t));
        continue;
      }
      await installTableFence(c, t.qualified, config.tenant.column, rowUnit);
      changed.push(displayName(t));
    }
    // Each bucketed dataset's tables: the same fence and audit, the unit built from the bucket column.
    const problems = tables.flatMap((t) => movabilityProblems(t, config.tenant.column));
    const claimed = new Map<string, string>();
    for (const ds of config.datasets) {
      const dsAudit = writeAuditSchemaSql(ds.bucketColumn, { name: ds.name, rowUnit: (row) => bucketUnitSqlExpr(ds, row) });
      await c.query(dsAudit.sql);
      // The dataset's blob index: one of its tables (fenced, audited and moved like them).
      await c.query(bucketBlobIndexDdl(ds));
      for (const t of await listTenantTables(c, datasetTables(config, ds))) {
        const other = claimed.get(t.qualified);
        if (other) {
          throw new ShardctlError(
            'PreconditionFailed',
            `table ${displayName(t)} would belong to datasets ${other} and ${ds.name}: name each dataset's tables (datasets[].tables)`,
          );
        }
        claimed.set(t.qualified, ds.name);
        const rowUnit = (row: 'new' | 'old') => bucketUnitSqlExpr(ds, row);
        const auditChanged = await installWriteAudit(c, t, dsAudit.fn);
        if (!(await hasTableFence(c, t.qualified, ds.bucketColumn, rowUnit))) {
          await installTableFence(c, t.qualified, ds.bucketColumn, rowUnit);
          changed.push(displayName(t));
        } else if (auditChanged) changed.push(displayName(t));
        tables.push(t);
        problems.push(...(await bucketTableProblems(c, t, ds)));
      }
      const mine = [...claimed].filter(([, d]) => d === ds.name).map(([q]) => q);
      problems.push(...jobsTableProblems(ds, mine));
    }
    await dropUnusedRowCheck(c, config.tenant.column);
    await c.query(
      `insert into shardctl.settings(key, value) values ('allow_unfenced_writes', $1)
       on conflict (key) do update set value = excluded.value where shardctl.settings.value is distinct from excluded.value`,
      [String(config.tenant.allowUnfencedWrites)],
    );
    await c.query('commit');
    return {
      tables: tables.map(displayName),
      problems,
      changed,
    };
  } catch (err: any) {
    await c.query('rollback').catch(() => {});
    if (err?.code === '55P03' && queued) {
      throw new ShardctlError(
        'Conflict',
        `prepare gave up waiting for another prepare of this shard to finish (${opts.queueTimeoutMs ?? PREPARE_QUEUE_TIMEOUT_MS} ms); retry once it has`,
        undefined,
        true,
      );
    }
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
        // Its trigger DDL can be chosen as a deadlock's victim by a writer of the same tables:
        // the transaction rolled back whole, so it is tried again (twice) before it counts as failed.
        let r: PrepareResult | undefined;
        for (let attempt = 1; !r; attempt++) {
          r = await prepareShard(shardPool(shard), config, { demoSchema: opts.demoSchema }).catch((e: any) => {
            if (e?.code === '40P01' && attempt < 3) return undefined;
            throw e;
          });
        }
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
  /** Tenant tables carrying both fence triggers, enabled, on them and on each of their partitions. */
  fenced: string[];
  /** Tenant tables without it (or with it disabled): their writes are not fenced. */
  unfenced: string[];
  /** Which fence checks the writes: the C twin (config `fence.library`) or the plpgsql one; null before prepare. */
  implementation: 'native' | 'plpgsql' | null;
}

/** What `shards list` shows: which tenant tables of a shard are fenced. Read-only. */
export async function fenceStatus(db: Pool | PoolClient, config: Config): Promise<FenceStatus> {
  const r = await db.query(`select to_regclass('shardctl.fence') is not null as installed`);
  const tables = await listTenantTables(db, tenantTableSelector(config.tenant));
  const fenced: string[] = [];
  const unfenced: string[] = [];
  for (const t of tables) ((await hasTableFence(db, t.qualified, config.tenant.column, tenantRowUnit(config, t))) ? fenced : unfenced).push(displayName(t));
  for (const ds of config.datasets) {
    const rowUnit = (row: 'new' | 'old') => bucketUnitSqlExpr(ds, row);
    // Configured dataset tables missing here are not this shard's to report (plan names them missing on a target).
    for (const t of await listTenantTables(db, datasetTables(config, ds)).catch(() => [])) {
      tables.push(t);
      ((await hasTableFence(db, t.qualified, ds.bucketColumn, rowUnit)) ? fenced : unfenced).push(displayName(t));
    }
  }
  const impl = await db.query<{ lang: string | null }>(
    `select (select l.lanname from pg_proc p join pg_language l on l.oid = p.prolang where p.oid = to_regprocedure('shardctl.checked_unit()')) as lang`,
  );
  const lang = impl.rows[0].lang;
  const implementation = lang === null ? null : lang === 'c' ? 'native' : 'plpgsql';
  return { schemaInstalled: r.rows[0].installed, tenantTables: tables.map(displayName), fenced, unfenced, implementation };
}

/**
 * Installs the fence on one tenant table, replacing an older one: its two row triggers (which
 * its partitions inherit, present and future). Takes the table's lock; run inside prepare's
 * transaction. Replacing triggers of our kind (AFTER ROW, the same events: a changed WHEN or
 * arguments) is a CREATE OR REPLACE, whose SHARE ROW EXCLUSIVE lock waits for writers but not for
 * readers; only another kind is dropped first (DROP TRIGGER takes ACCESS EXCLUSIVE).
 */
export async function installTableFence(c: PoolClient, qualified: string, column: string, rowUnit?: RowUnitSql): Promise<void> {
  // Dropped first: an older shardctl's BEFORE trigger of that name has clones on the partitions
  // that CREATE OR REPLACE would not turn into AFTER triggers. A missing one is created.
  const r = await c.query(
    `with tree as (select $1::regclass::oid as relid union select relid::oid from pg_partition_tree($1::regclass))
     select count(*) filter (where (tg.tgname = $2 and tg.tgtype <> $3) or (tg.tgname = $4 and tg.tgtype <> $5))::int as other_kind
       from tree join pg_trigger tg on tg.tgrelid = tree.relid and tg.tgname in ($2, $4)`,
    [qualified, FENCE_TRIGGER_NAME, NEW_ROWS_TRIGGER_TYPE, FENCE_OLD_ROWS_TRIGGER, OLD_ROWS_TRIGGER_TYPE],
  );
  if (r.rows[0].other_kind > 0)
    for (const name of [FENCE_TRIGGER_NAME, FENCE_OLD_ROWS_TRIGGER]) await c.query(`drop trigger if exists ${name} on ${qualified}`);
  for (const sql of fenceTriggersSql(qualified, column, rowUnit)) await c.query(sql);
}

/**
 * Exactly our fence on the table and on each of its partitions: both triggers, ours (function,
 * timing, events, arguments of this version, a WHEN clause), enabled for origin sessions. A
 * missing, disabled, replica-only or older trigger says no.
 */
export async function hasTableFence(db: Pool | PoolClient, qualified: string, column: string, rowUnit?: RowUnitSql): Promise<boolean> {
  const version = fenceVersion(rowUnit);
  const args = (row: 'new' | 'old') => fenceTriggerArgs(column, row, version, rowUnit).map((a) => Buffer.concat([Buffer.from(a, 'utf8'), Buffer.from([0])]));
  const r = await db.query(
    `with tree as (select $1::regclass::oid as relid union select relid::oid from pg_partition_tree($1::regclass)),
          wanted(name, type, args) as (values ($2::name, $3::int2, $4::bytea), ($5::name, $6::int2, $7::bytea))
     select bool_and(exists (
              select 1 from pg_trigger tg
               where tg.tgrelid = tree.relid and tg.tgname = wanted.name and tg.tgfoid = to_regprocedure('shardctl.refuse_row_of_unit()')
                 and tg.tgtype = wanted.type and tg.tgenabled = 'O' and tg.tgqual is not null and tg.tgattr = ''::int2vector
                 and tg.tgargs = wanted.args)) as ok
       from tree cross join wanted`,
    [
      qualified,
      FENCE_TRIGGER_NAME,
      NEW_ROWS_TRIGGER_TYPE,
      Buffer.concat(args('new')),
      FENCE_OLD_ROWS_TRIGGER,
      OLD_ROWS_TRIGGER_TYPE,
      Buffer.concat(args('old')),
    ],
  );
  return r.rows[0].ok === true;
}

/** The per-row trigger function of shardctl before version 2, once no trigger uses it any more. */
async function dropUnusedRowCheck(c: PoolClient, column: string): Promise<void> {
  const fn = `shardctl.fence_check_${column.replace(/[^a-z0-9_]/gi, '_').toLowerCase()}()`;
  await c.query(
    `do $do$ begin
       if to_regprocedure($q$${fn}$q$) is not null and not exists (select 1 from pg_trigger where tgfoid = to_regprocedure($q$${fn}$q$)) then
         drop function ${fn};
       end if;
     end $do$`,
  );
}

/**
 * A tenant table's row-unit expression for its fence: with a split column configured
 * (config.tenant.splitColumns), the sub-unit of a split tenant's row; otherwise the tenant column.
 */
export function tenantRowUnit(config: Pick<Config, 'tenant'>, t: Pick<TenantTable, 'schema' | 'name'>): RowUnitSql | undefined {
  const col = config.tenant.splitColumns?.[`${t.schema}.${t.name}`];
  return col === undefined ? undefined : splitRowUnitSql(config.tenant.column, col);
}

function displayName(t: TenantTable): string {
  return `${t.schema}.${t.name}`;
}
