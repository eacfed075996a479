// The evidence retire relies on: writes that reach a unit's rows on a shard by a session that
// bypasses the fence (session_replication_role = replica) and is not one of shardctl's own
// data-plane sessions. Routed writes are fenced; this catches the rest (manual fixes, foreign tools).
//
// Two triggers per tenant table, both enabled for replica sessions only (ENABLE REPLICA), so
// ordinary writes never see them:
// - the audit (AFTER ROW): every row a replica session not named shardctl… writes is recorded with
//   its transaction id, whether or not the unit is owned here. Its WHEN clause is evaluated without
//   a function call, so the move's copy and apply pay no per-row PL/pgSQL call;
// - the guard (BEFORE STATEMENT, WHEN named shardctl…): a session named so must have registered
//   itself (shardctl.enter_data_plane, by process id and start time), or its statement is refused.
//   A name is a setting any client controls; the registration is not.
// Every check counts by commit, not by when the writer began: an audited write counts unless its
// transaction is visible in the snapshot taken at the reference point (a freeze, a delta start).
import type { Pool, PoolClient } from 'pg';
import type { TenantTable } from './tables';
import { PINNED_SEARCH_PATH } from './schema';
import { addColumnOnce, createIndexOnce } from './ddl-once';

export const WRITE_AUDIT_TRIGGER = 'shardctl_write_audit';

/**
 * The audit's table and its trigger function for tables whose unit is `column` (tenant tables),
 * or, with `dataset`, for a bucketed dataset's tables (the unit built from the bucket column:
 * `rowUnit`, lib/unit-rows.ts), one function per dataset.
 */
export function writeAuditSchemaSql(column: string, dataset?: { name: string; rowUnit: (row: 'new' | 'old') => string }): { fn: string; sql: string } {
  const safe = column.replace(/[^a-z0-9_]/gi, '_').toLowerCase();
  const fn = dataset ? `shardctl.audit_unowned_write_ds_${dataset.name}` : `shardctl.audit_unowned_write_${safe}`;
  const col = `"${column.replace(/"/g, '""')}"`;
  const unitOf = dataset?.rowUnit ?? ((row: 'new' | 'old') => `${row}.${col}::text`);
  return {
    fn,
    sql: `
create table if not exists shardctl.unowned_writes (
  id bigserial primary key,
  unit text not null,
  at timestamptz not null default now(),
  table_name text not null,
  op text not null,
  application_name text,
  username text
);
${createIndexOnce('shardctl', 'unowned_writes_unit', 'shardctl.unowned_writes (unit, at)')}
-- The writer's transaction (its commit decides whether a check counts it) and whether this shard
-- owned the unit at the write.
${addColumnOnce('shardctl.unowned_writes', 'xid', 'xid8')}
${addColumnOnce('shardctl.unowned_writes', 'owned', 'boolean')}
create or replace function ${fn}() returns trigger language plpgsql volatile ${PINNED_SEARCH_PATH} as $fn$
declare v_unit text;
begin
  if pg_catalog.current_setting('application_name') like 'shardctl%' then
    return null;
  end if;
  v_unit := case when tg_op = 'DELETE' then ${unitOf('old')} else ${unitOf('new')} end;
  insert into shardctl.unowned_writes(unit, table_name, op, application_name, username, xid, owned)
  values (v_unit, tg_table_schema || '.' || tg_table_name, tg_op, pg_catalog.current_setting('application_name'), current_user,
          pg_catalog.pg_current_xact_id(), coalesce((select f.owned from shardctl.fence f where f.unit = v_unit), false));
  return null;
end
$fn$;`,
  };
}

/** When the audit fires, within replica sessions (ENABLE REPLICA): a session that is not one of shardctl's own. */
const AUDIT_WHEN = `pg_catalog.current_setting('application_name') operator(pg_catalog.!~~) 'shardctl%'`;

async function hasAuditTrigger(c: PoolClient, t: TenantTable, fn: string): Promise<boolean> {
  // An older install (WHEN on the replica role alone) fired for the move's own sessions: replaced.
  const r = await c.query(
    `select 1 from pg_trigger g where g.tgrelid = $1::regclass and g.tgname = $2 and g.tgenabled = 'R'
        and g.tgfoid = $3::regproc and pg_catalog.pg_get_triggerdef(g.oid) like '%application_name%shardctl%'`,
    [t.qualified, WRITE_AUDIT_TRIGGER, fn],
  );
  return (r.rowCount ?? 0) > 0;
}

/** Installs the audit trigger on a tenant table (idempotent); ENABLE REPLICA: only replica sessions fire it. */
export async function installWriteAudit(c: PoolClient, t: TenantTable, fn: string): Promise<boolean> {
  const guarded = await installDataPlaneGuard(c, t);
  if (await hasAuditTrigger(c, t, fn)) return guarded;
  await c.query(
    `create or replace trigger ${WRITE_AUDIT_TRIGGER} after insert or update or delete on ${t.qualified}
       for each row when (${AUDIT_WHEN}) execute function ${fn}()`,
  );
  await c.query(`alter table ${t.qualified} enable replica trigger ${WRITE_AUDIT_TRIGGER}`);
  return true;
}

export const DATA_PLANE_GUARD_TRIGGER = 'shardctl_data_plane_guard';
const GUARD_WHEN = `pg_catalog.current_setting('application_name') operator(pg_catalog.~~) 'shardctl%'`;

/**
 * The guard on the table and on each of its partitions (a statement on a partition fires only the
 * partition's statement triggers); a partition attached later is guarded by the next prepare.
 */
async function installDataPlaneGuard(c: PoolClient, t: TenantTable): Promise<boolean> {
  const r = await c.query<{ rel: string; guarded: boolean }>(
    `select p.relid::regclass::text as rel,
            exists (select 1 from pg_trigger g where g.tgrelid = p.relid and g.tgname = $2 and g.tgenabled = 'R'
                       and g.tgfoid = 'shardctl.data_plane_guard()'::regprocedure) as guarded
       from (select $1::regclass as relid union select t.relid from pg_catalog.pg_partition_tree($1::regclass) t) p`,
    [t.qualified, DATA_PLANE_GUARD_TRIGGER],
  );
  let changed = false;
  for (const { rel, guarded } of r.rows) {
    if (guarded) continue;
    await c.query(
      `create or replace trigger ${DATA_PLANE_GUARD_TRIGGER} before insert or update or delete on ${rel}
         for each statement when (${GUARD_WHEN}) execute function shardctl.data_plane_guard()`,
    );
    await c.query(`alter table ${rel} enable replica trigger ${DATA_PLANE_GUARD_TRIGGER}`);
    changed = true;
  }
  return changed;
}

/**
 * Writes that reached the unit's rows on this shard bypassing the fence after the snapshot
 * `sinceSnapshot` (pg_snapshot text): by commit — a writer that began before it and committed
 * after counts. Without a snapshot (a delta started by an older shardctl), by time from `since`
 * (epoch seconds, the database's clock) less a margin, as before.
 */
export async function unownedWritesSince(
  pool: Pool,
  unit: string,
  since: { snapshot?: string | null; epochSeconds: string },
  marginSeconds = 30,
): Promise<{ count: number; example: string | null }> {
  const r = await pool.query(
    `select count(*)::int as n, min(application_name) as app from shardctl.unowned_writes
      where unit = $1
        and case when $2::pg_snapshot is not null and xid is not null then not pg_catalog.pg_visible_in_snapshot(xid, $2::pg_snapshot)
                 else at >= pg_catalog.to_timestamp($3::float8 - $4) end`,
    [unit, since.snapshot ?? null, since.epochSeconds, marginSeconds],
  );
  return { count: Number(r.rows[0].n), example: r.rows[0].app ?? null };
}

/**
 * Writes that reached the unit's rows on this shard, bypassing the fence, that the change stream
 * may not have carried before the switch: every one not visible in the snapshot of the freeze
 * that the switch followed (its transaction committed after the freeze began, whenever it began),
 * or, for a fence frozen by an older shardctl, since the fence last changed (the disown).
 * `auditUnit`: the unit the audit names the rows by, when it is not `unit`: a replica session has
 * no checked unit, so a split tenant's rows are audited as the tenant's, and a sub-unit's move
 * counts every bypassing write of its tenant (more than its own rows: it errs on the side of refusing).
 */
export async function unownedWritesSinceDisown(pool: Pool, unit: string, auditUnit = unit): Promise<{ count: number; example: string | null }> {
  const r = await pool.query(
    `select count(*)::int as n, min(w.application_name) as app
       from shardctl.unowned_writes w join shardctl.fence f on f.unit = $1
      where w.unit = $2
        and case when f.freeze_snapshot is not null and w.xid is not null then not pg_catalog.pg_visible_in_snapshot(w.xid, f.freeze_snapshot)
                 else w.at >= f.updated_at and not coalesce(w.owned, false) end`,
    [unit, auditUnit],
  );
  return { count: Number(r.rows[0].n), example: r.rows[0].app ?? null };
}
