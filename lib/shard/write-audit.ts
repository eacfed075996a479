// The evidence retire relies on: writes that reach a unit's rows on a shard that does not own
// it, by a session that bypasses the fence (session_replication_role = replica) and is not one
// of shardctl's own data-plane sessions (application_name 'shardctl…'). Routed writes to an
// unowned unit are refused by the fence; this catches the rest (manual fixes, foreign tools).
// The trigger is enabled for replica sessions only (ENABLE REPLICA), and its WHEN clause (evaluated
// without a function call) skips shardctl's own sessions: ordinary writes never see it, and the
// move's copy and apply pay only the WHEN: no per-row PL/pgSQL call, no queued after-trigger event.
import type { Pool, PoolClient } from 'pg';
import type { TenantTable } from './tables';
import { PINNED_SEARCH_PATH } from './schema';

export const WRITE_AUDIT_TRIGGER = 'shardctl_write_audit';

export function writeAuditSchemaSql(column: string): { fn: string; sql: string } {
  const safe = column.replace(/[^a-z0-9_]/gi, '_').toLowerCase();
  const fn = `shardctl.audit_unowned_write_${safe}`;
  const col = `"${column.replace(/"/g, '""')}"`;
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
create index if not exists unowned_writes_unit on shardctl.unowned_writes (unit, at);
create or replace function ${fn}() returns trigger language plpgsql volatile ${PINNED_SEARCH_PATH} as $fn$
declare v_unit text;
begin
  if pg_catalog.current_setting('application_name') like 'shardctl%' then
    return null;
  end if;
  v_unit := case when tg_op = 'DELETE' then old.${col}::text else new.${col}::text end;
  if not exists (select 1 from shardctl.fence where unit = v_unit and owned) then
    insert into shardctl.unowned_writes(unit, table_name, op, application_name, username)
    values (v_unit, tg_table_schema || '.' || tg_table_name, tg_op, pg_catalog.current_setting('application_name'), current_user);
  end if;
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
  if (await hasAuditTrigger(c, t, fn)) return false;
  await c.query(
    `create or replace trigger ${WRITE_AUDIT_TRIGGER} after insert or update or delete on ${t.qualified}
       for each row when (${AUDIT_WHEN}) execute function ${fn}()`,
  );
  await c.query(`alter table ${t.qualified} enable replica trigger ${WRITE_AUDIT_TRIGGER}`);
  return true;
}

/**
 * Writes that reached the unit's rows on this shard bypassing the fence since `since` (epoch seconds, the database's clock)
 * less a margin: an audited writer's time is its transaction's start, which may
 * precede `since` while it commits after.
 */
export async function unownedWritesSince(pool: Pool, unit: string, since: string, marginSeconds = 30): Promise<{ count: number; example: string | null }> {
  const r = await pool.query(
    `select count(*)::int as n, min(application_name) as app from shardctl.unowned_writes
      where unit = $1 and at >= pg_catalog.to_timestamp($2::float8 - $3)`,
    [unit, since, marginSeconds],
  );
  return { count: Number(r.rows[0].n), example: r.rows[0].app ?? null };
}

/** Writes that reached the unit's rows on this shard, bypassing the fence, since its fence last changed (the disown at the switch). */
export async function unownedWritesSinceDisown(pool: Pool, unit: string): Promise<{ count: number; example: string | null }> {
  const r = await pool.query(
    `select count(*)::int as n, min(application_name) as app from shardctl.unowned_writes
      where unit = $1 and at >= (select updated_at from shardctl.fence where unit = $1)`,
    [unit],
  );
  return { count: Number(r.rows[0].n), example: r.rows[0].app ?? null };
}
