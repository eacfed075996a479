// A backlog for the next catch-up and the evidence that it was applied once: a burst of acked
// write transactions, an ALWAYS trigger on the target counting each application per row, and
// the activities Temporal ran more than once. Used by the restart and network-fault suites.
import { expect } from 'vitest';
import type { WorkflowHandle } from '@temporalio/client';
import { testConfig, shardPool } from './stack';
import { Router } from '../../lib/router';

/** A burst of small write transactions on the tenant, so the next catch-up has a backlog; returns the ids (all acknowledged). */
export async function burst(tenant: string, n: number): Promise<string[]> {
  const router = await Router.create(testConfig());
  const ids: string[] = [];
  try {
    for (let i = 0; i < n; i += 50) {
      const r = await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
        tx.query(
          `insert into public.events(tenant_id, kind, payload) select $1, 'burst', jsonb_build_object('i', g) from generate_series($2::int, $2::int + 49) g returning id::text`,
          [tenant, i],
        ),
      );
      ids.push(...r.rows.map((x: { id: string }) => x.id));
    }
  } finally {
    await router.close();
  }
  return ids;
}

/** How many of the tenant's burst rows the target holds now. */
export async function burstRowsOn(shard: string, tenant: string): Promise<number> {
  const r = await shardPool(shard).query(`select count(*)::int as n from public.events where tenant_id = $1 and kind = 'burst'`, [tenant]);
  return r.rows[0].n;
}

/**
 * On the target: an ALWAYS trigger (it fires in the replica apply session too) logs every insert
 * or update of the tenant's events, so a change applied twice shows as a second entry for its
 * id (an upsert alone would hide it).
 */
export async function countApplications(shard: string, tenant: string) {
  const schema = `applylog_${Math.random().toString(36).slice(2, 10)}`;
  const pool = shardPool(shard);
  const lit = tenant.replace(/'/g, "''");
  await pool.query(`
    create schema ${schema};
    create table ${schema}.log (id uuid not null, op text not null);
    create function ${schema}.log() returns trigger language plpgsql as $$
      begin insert into ${schema}.log values (new.id, tg_op); return new; end $$;
    create trigger ${schema} after insert or update on public.events for each row
      when (new.tenant_id = '${lit}') execute function ${schema}.log();
    alter table public.events enable always trigger ${schema};`);
  return {
    async perId(ids: string[]): Promise<Map<string, string[]>> {
      const r = await pool.query(`select id::text, array_agg(op) as ops from ${schema}.log where id = any($1::uuid[]) group by id`, [ids]);
      return new Map(r.rows.map((x: { id: string; ops: string[] }) => [x.id, x.ops]));
    },
    async drop() {
      await pool.query(`drop trigger if exists ${schema} on public.events; drop schema if exists ${schema} cascade`);
    },
  };
}

/** Activities that ran more than once (a retry after the restart), from the workflow history. */
export async function retriedActivities(h: WorkflowHandle): Promise<{ name: string; attempt: number; identity: string; lastFailure: string }[]> {
  const history = await h.fetchHistory();
  const names = new Map<string, string>();
  const out: { name: string; attempt: number; identity: string; lastFailure: string }[] = [];
  for (const e of history.events ?? []) {
    const id = String(e.eventId);
    if (e.activityTaskScheduledEventAttributes) names.set(id, e.activityTaskScheduledEventAttributes.activityType?.name ?? '?');
    const st = e.activityTaskStartedEventAttributes;
    if (st && (st.attempt ?? 1) > 1) {
      // The last attempt's start names the worker that ran it and why the one before it failed.
      out.push({
        name: names.get(String(st.scheduledEventId)) ?? '?',
        attempt: st.attempt!,
        identity: st.identity ?? '',
        lastFailure: st.lastFailure?.message ?? '',
      });
    }
  }
  return out;
}

/**
 * The first argument of every scheduling of activity `name`, in history order, with the update
 * requests (by name) that the workflow accepted before it.
 */
export async function scheduledActivityInputs(h: WorkflowHandle, name: string): Promise<{ input: Record<string, unknown>; updatesBefore: string[] }[]> {
  const history = await h.fetchHistory();
  const updates: string[] = [];
  const out: { input: Record<string, unknown>; updatesBefore: string[] }[] = [];
  for (const e of history.events ?? []) {
    const accepted = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name;
    if (accepted) updates.push(accepted);
    const sc = e.activityTaskScheduledEventAttributes;
    if (sc?.activityType?.name === name) {
      const data = sc.input?.payloads?.[0]?.data;
      out.push({ input: data ? JSON.parse(Buffer.from(data).toString('utf8')) : {}, updatesBefore: [...updates] });
    }
  }
  return out;
}

/** The result of every completed execution of activity `name`, in history order. */
export async function completedActivityResults(h: WorkflowHandle, name: string): Promise<Record<string, unknown>[]> {
  const history = await h.fetchHistory();
  const names = new Map<string, string>();
  const out: Record<string, unknown>[] = [];
  for (const e of history.events ?? []) {
    if (e.activityTaskScheduledEventAttributes) names.set(String(e.eventId), e.activityTaskScheduledEventAttributes.activityType?.name ?? '?');
    const done = e.activityTaskCompletedEventAttributes;
    if (done && names.get(String(done.scheduledEventId)) === name) {
      const data = done.result?.payloads?.[0]?.data;
      out.push(data ? JSON.parse(Buffer.from(data).toString('utf8')) : {});
    }
  }
  return out;
}

/** Waits until the apply has put some but not all of the burst on the target. */
export async function midApply(target: string, tenant: string, total: number): Promise<number> {
  const deadline = Date.now() + 90_000;
  for (;;) {
    const n = await burstRowsOn(target, tenant);
    if (n > 0) {
      expect(n, 'the apply finished before the restart: it cannot land mid-apply').toBeLessThan(total);
      return n;
    }
    if (Date.now() > deadline) throw new Error('the apply never started');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Each id reached the target by exactly one application: one INSERT, no second apply as an upsert. */
export async function expectAppliedOnce(apps: Awaited<ReturnType<typeof countApplications>>, ids: string[]) {
  const per = await apps.perId(ids);
  expect(per.size).toBe(ids.length);
  expect([...per.entries()].filter(([, ops]) => ops.length !== 1 || ops[0] !== 'INSERT')).toEqual([]);
}

/** temporal.api.enums.v1.TimeoutType, by number. */
const TIMEOUT_TYPES = ['unspecified', 'start-to-close', 'schedule-to-start', 'schedule-to-close', 'heartbeat'];

/**
 * How each scheduling of activity `name` ended, in history order: its last attempt's number and
 * the worker identity that polled it, and `completed`, `timed out (<type>)` or `failed`.
 */
export async function activityEnds(h: WorkflowHandle, name: string): Promise<{ attempt: number; identity: string; outcome: string }[]> {
  const history = await h.fetchHistory();
  const names = new Map<string, string>();
  const started = new Map<string, { attempt: number; identity: string }>();
  const out: { attempt: number; identity: string; outcome: string }[] = [];
  for (const e of history.events ?? []) {
    if (e.activityTaskScheduledEventAttributes) names.set(String(e.eventId), e.activityTaskScheduledEventAttributes.activityType?.name ?? '?');
    const st = e.activityTaskStartedEventAttributes;
    if (st) started.set(String(st.scheduledEventId), { attempt: st.attempt ?? 1, identity: st.identity ?? '' });
    const end =
      (e.activityTaskCompletedEventAttributes && { id: e.activityTaskCompletedEventAttributes.scheduledEventId, outcome: 'completed' }) ||
      (e.activityTaskTimedOutEventAttributes && {
        id: e.activityTaskTimedOutEventAttributes.scheduledEventId,
        outcome: `timed out (${TIMEOUT_TYPES[Number(e.activityTaskTimedOutEventAttributes.failure?.timeoutFailureInfo?.timeoutType ?? 0)] ?? '?'})`,
      }) ||
      (e.activityTaskFailedEventAttributes && { id: e.activityTaskFailedEventAttributes.scheduledEventId, outcome: 'failed' });
    if (end && names.get(String(end.id)) === name) out.push({ ...(started.get(String(end.id)) ?? { attempt: 0, identity: '' }), outcome: end.outcome });
  }
  return out;
}
