// The cutover compares under the fence only what the change stream wrote since the last full
// validation, plus the target's write audit (lib/cdc/delta.ts), so its pause follows what changed,
// not the size of the unit (never a scan of it). These tests drive a real move's activities in-process (no Temporal)
// and check the delta itself and both sides of the comparison: a changed row that differs on the
// target, or a row deleted there behind the stream (the write audit), still aborts the cutover; a
// restarted delta (a superseded validation) is never trusted.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import type { Activities } from '../../activities';
import { Router } from '../../lib/router';
import { readDelta, startDelta } from '../../lib/cdc/delta';

let act: Activities;
let router: Router;

let env: H.InProcess | undefined;
beforeAll(async () => {
  env = await H.inProcessActivities({ router: true });
  ({ act, router } = env);
});
afterAll(() => env?.close());

const SOURCE = 'shard-a';
const TARGET = 'shard-b';

/** A tenant copied, caught up and validated (single deliveries): the delta starts empty. */
const validated = (prefix: string) => H.validatedMove(act, { source: SOURCE, target: TARGET, prefix, rows: 60 });

const write = (tenant: string, fn: (q: (sql: string, p: unknown[]) => Promise<any>) => Promise<unknown>) =>
  router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) => fn((sql, p) => tx.query(sql, p)));

/** An insert, an update and a delete of the tenant's events through the router; returns their ids. */
async function changes(tenant: string): Promise<{ inserted: string; updated: string; deleted: string }> {
  return (await write(tenant, async (q) => {
    const inserted = (await q(`insert into public.events(tenant_id, kind, payload) values ($1, 'delta', '{}') returning id::text`, [tenant])).rows[0].id;
    const some = (await q(`select id::text from public.events where tenant_id = $1 and kind <> 'delta' order by id limit 2`, [tenant])).rows;
    await q(`update public.events set payload = '{"changed":true}' where tenant_id = $1 and id = $2`, [tenant, some[0].id]);
    await q(`delete from public.events where tenant_id = $1 and id = $2`, [tenant, some[1].id]);
    return { inserted, updated: some[0].id, deleted: some[1].id };
  })) as { inserted: string; updated: string; deleted: string };
}

/** Writes on the target behind the stream's back (the replica role bypasses the fence, as a superuser could). */
async function onTargetBehindTheStream(sql: string, params: unknown[], opts: { unaudited?: boolean } = {}) {
  const c = await shardPool(TARGET).connect();
  try {
    await c.query('begin');
    await c.query('set local session_replication_role = replica');
    // Posing as one of shardctl's own sessions (named so and registered, as only shardctl does),
    // the write audit does not see it: only the delta can.
    if (opts.unaudited) await c.query(`set local application_name = 'shardctl-corrupt'; select shardctl.enter_data_plane()`);
    const r = await c.query(sql, params);
    await c.query('commit');
    return r.rowCount;
  } finally {
    c.release();
  }
}

const cutoverOf = (ref: { moveId: string; unit: string; source: string; target: string }, deltaToken?: string) =>
  act.cutover({ ...ref, direction: 'forward', epoch: 1, fenceBudgetMs: 10_000, actor: 'delta-test', deltaToken });

async function finish(ref: { moveId: string; unit: string; source: string; target: string }) {
  await act.dropReplication({ ...ref, direction: 'forward' });
  await act.retireSource({ ...ref, epoch: 2, actor: 'delta-test' });
}

describe('cutover compares what changed since the validation', () => {
  it('the stream records exactly the keys it wrote since the validation, and the cutover switches comparing them', async () => {
    const { tenant, ref, token } = await validated('dk');
    const before = await readDelta(shardPool(TARGET), ref.moveId, 'forward', 1000, { token });
    expect(before).toMatchObject({ tracked: true, total: 0, overflow: false });
    const c = await changes(tenant);
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    const d = await readDelta(shardPool(TARGET), ref.moveId, 'forward', 1000, { token });
    expect(d.tracked && [...d.tables.keys()]).toEqual(['public.events']);
    const keys = d.tracked ? d.tables.get('public.events')!.map((k) => JSON.parse(k)) : [];
    // Keys as the applier wrote them: (tenant_id, id) in text form.
    expect(keys.sort()).toEqual(
      [
        [tenant, c.inserted],
        [tenant, c.updated],
        [tenant, c.deleted],
      ].sort(),
    );
    const r = await cutoverOf(ref, token);
    expect(r, JSON.stringify(r)).toMatchObject({ ok: true, newEpoch: 2 });
    expect(await H.fingerprint(TARGET, tenant)).toEqual(await H.fingerprint(SOURCE, tenant));
    await finish(ref);
    // Cleanup forgets the delta with the progress.
    const left = await shardPool(TARGET).query(
      'select (select count(*) from shardctl.move_delta where move_id = $1)::int + (select count(*) from shardctl.move_delta_since where move_id = $1)::int as n',
      [ref.moveId],
    );
    expect(left.rows[0].n).toBe(0);
  });

  it('a changed row that differs on the target aborts the cutover and unfreezes, naming the table', async () => {
    const { tenant, ref, token } = await validated('dd');
    const c = await changes(tenant);
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    const corrupt = `update public.events set payload = '{"corrupted":true}' where tenant_id = $1 and id = $2`;
    expect(await onTargetBehindTheStream(corrupt, [tenant, c.updated], { unaudited: true })).toBe(1);
    const r = await cutoverOf(ref, token);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.reason).toMatch(/public\.events: same row count .* contents differ \(among 3 changed keys\)$/);
    expect(await H.placement(tenant)).toMatchObject({ shard: SOURCE, epoch: 1, state: 'active' });
    expect(await H.tryWrite(SOURCE, tenant, 1)).toBe('ok');
    await act.cancelMove({ ...ref, epoch: 1, actor: 'delta-test' });
  });

  it('a row deleted on the target behind the stream (a session bypassing its fence) is caught by the write audit', async () => {
    const { tenant, ref, token } = await validated('dc');
    await changes(tenant);
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    expect(
      await onTargetBehindTheStream(
        `delete from public.accounts where tenant_id = $1 and id = (select min(id::text)::uuid from public.accounts where tenant_id = $1)`,
        [tenant],
      ),
    ).toBe(1);
    const r = await cutoverOf(ref, token);
    expect(r.ok).toBe(false);
    expect(!r.ok && r.reason).toMatch(/1 write\(s\) reached .* on shard-b bypassing its fence since the last validation/);
    await act.cancelMove({ ...ref, epoch: 1, actor: 'delta-test' });
  });

  it('a delta restarted after the validation (a superseded delivery), or no token, is not trusted: the whole unit is compared', async () => {
    const { tenant, ref, token } = await validated('dr');
    const c = await changes(tenant);
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    // A late validateMove delivery restarts the delta: the keys written since the real one are forgotten.
    await startDelta(shardPool(TARGET), ref.moveId, 'forward', 'a-superseded-validation');
    expect(await readDelta(shardPool(TARGET), ref.moveId, 'forward', 1000, { token })).toMatchObject({ tracked: false });
    // A row the stream wrote before the restart now differs on the target: only a whole-unit comparison sees it.
    await onTargetBehindTheStream(`update public.events set payload = '{"corrupted":true}' where tenant_id = $1 and id = $2`, [tenant, c.inserted]);
    for (const t of [token, undefined]) {
      const r = await cutoverOf(ref, t);
      expect(r.ok).toBe(false);
      expect(!r.ok && r.reason).toMatch(
        /public\.events: same row count \(\d+\) but contents differ; |public\.events: same row count \(\d+\) but contents differ$/,
      );
      expect(!r.ok && r.reason).not.toMatch(/changed keys/);
    }
    await act.cancelMove({ ...ref, epoch: 1, actor: 'delta-test' });
  });
});
