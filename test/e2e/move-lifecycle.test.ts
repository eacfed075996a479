import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawnSync } from 'node:child_process';
import { testConfig, uniq, closePools, shardPool, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { Router } from '../../lib/router';
import * as M from '../../workflows/messages';
import { moveWorkflowId } from '../../lib/ids';
import { scheduledActivityInputs } from '../helpers/backlog';

let env: Awaited<ReturnType<typeof H.moveEnv>>;
let tq: string;
let t: Awaited<ReturnType<typeof H.temporal>>;
const op = { actor: 'sre-test' };

beforeAll(async () => {
  env = await H.moveEnv('life');
  ({ tq, t } = env);
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

/** One series of a prom-client metric of the worker's registry (NaN when it has none). */
async function gaugeValue(metric: { get(): Promise<{ values: { labels: object; value: number }[] }> }, labels: Record<string, string>): Promise<number> {
  const v = (await metric.get()).values.find((x) => Object.entries(labels).every(([k, want]) => (x.labels as Record<string, unknown>)[k] === want));
  return v?.value ?? NaN;
}

/** shardctl_cutover_aborts_total of forward cutovers on this worker, by reason. */
async function abortsByReason(): Promise<Record<string, number>> {
  const values = (await env.metrics.cutoverAborts.get()).values.filter((x) => x.labels.direction === 'forward');
  return Object.fromEntries(values.map((x) => [String(x.labels.reason), x.value]));
}

/** The source is exactly as before, the target holds nothing, and nothing of the move is left. */
async function expectCleanlyCancelled(tenant: string, before: Awaited<ReturnType<typeof H.fingerprint>>, blobsBefore: number) {
  expect(await H.fingerprint('shard-a', tenant)).toEqual(before);
  expect(await H.blobCount('shard-a', tenant)).toBe(blobsBefore);
  expect(await H.rowCount('shard-b', tenant)).toBe(0);
  expect(await H.blobCount('shard-b', tenant)).toBe(0);
  expect(await H.replicationLeftovers(`${tenant}.e1`)).toEqual([]);
  expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active', moveId: null });
  expect(await H.tryWrite('shard-a', tenant, 1)).toBe('ok');
  expect(await H.tryWrite('shard-b', tenant, 1)).toBe('SC421');
  const progress = await shardPool('shard-b').query("select count(*)::int as n from shardctl.move_progress where move_id like $1 || '%'", [`${tenant}.e1.`]);
  expect(progress.rows[0].n).toBe(0);
}

describe('move lifecycle', () => {
  it('cancel during copy undoes everything and leaves the source exactly as it was', { timeout: 180_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'cc');
    await H.seed(tenant, 600, 3);
    const before = await H.fingerprint('shard-a', tenant);
    const blobs = await H.blobCount('shard-a', tenant);
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { rowsPerSecond: 100 }));
    await H.waitFor(h, (s) => s.phase === 'copy' && s.tables.some((x) => x.done));
    expect(await h.executeUpdate(M.cancelUpdate, { args: [op] })).toBe('cancelling');
    const s = await H.waitPhase(h, 'cancelled', 120_000);
    expect(s.operators.cancelledBy).toBe('sre-test');
    await expectCleanlyCancelled(tenant, before, blobs);
  });

  it('cancel while the cutover waits for approval undoes everything', { timeout: 180_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'ca');
    await H.seed(tenant, 200, 2);
    const before = await H.fingerprint('shard-a', tenant);
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { approveCutover: 'manual' }));
    const s = await H.waitFor(h, (x) => x.awaitingApproval, 120_000);
    expect(s.phase).toBe('fence');
    expect(s.blockedReason).toMatch(/approval/);
    await h.executeUpdate(M.cancelUpdate, { args: [op] });
    await H.waitPhase(h, 'cancelled', 120_000);
    await expectCleanlyCancelled(tenant, before, 2);
  });

  it('a corrupted target row blocks validation with a report naming table, key and column', { timeout: 180_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'cv');
    await H.seed(tenant, 200, 1);
    const before = await H.fingerprint('shard-a', tenant);
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { approveCutover: 'manual' }));
    await H.waitFor(h, (x) => x.awaitingApproval, 120_000);
    const c = await shardPool('shard-b').connect();
    let id: string;
    try {
      await c.query('begin');
      await c.query('set local session_replication_role = replica');
      id = (
        await c.query(
          `update public.accounts set name = 'CORRUPTED' where tenant_id = $1 and id = (select min(id::text)::uuid from public.accounts where tenant_id = $1) returning id`,
          [tenant],
        )
      ).rows[0].id;
      await c.query('commit');
    } finally {
      c.release();
    }
    await h.executeUpdate(M.approveUpdate, { args: [op] });
    const s = await H.waitFor(h, (x) => x.phase === 'validate' && x.validation.ok === false, 150_000);
    expect(s.blockedReason).toContain('public.accounts');
    expect(s.validation.mismatches.join('\n')).toContain(id!);
    // The worker's gauge (shardctl_move_validation_mismatches) reports that validation's count, on the move's series.
    expect(s.validation.mismatches.length).toBeGreaterThan(0);
    expect(await gaugeValue(env.metrics.validationMismatches.gauge, { unit: tenant, move_id: s.moveId })).toBe(s.validation.mismatches.length);
    expect(s.validation.mismatches.join('\n')).toMatch(/column name: source "[^"]+" vs target "CORRUPTED"/);
    // Found by the validation that runs again after the approval, before any freeze (the cutover
    // itself compares only what the stream changed since the last validation).
    expect(s.cutoverAttempts).toBe(0);
    // Operators find it in the Temporal Web UI / visibility by its search attributes.
    const query = `ShardctlPhase = 'validate' AND ShardctlUnit = '${tenant}' AND ShardctlBlockedReason IS NOT NULL`;
    let listed: string[] = [];
    for (let i = 0; i < 50 && listed.length === 0; i++) {
      listed = [];
      for await (const w of t.client.workflow.list({ query })) listed.push(w.workflowId);
      if (!listed.length) await new Promise((r) => setTimeout(r, 200));
    }
    expect(listed).toEqual([moveWorkflowId(tenant)]);
    expect((await H.placement(tenant))!.shard).toBe('shard-a');
    expect(await H.tryWrite('shard-a', tenant, 1)).toBe('ok'); // the aborted fence was lowered
    await h.executeUpdate(M.cancelUpdate, { args: [op] });
    await H.waitPhase(h, 'cancelled', 120_000);
    await expectCleanlyCancelled(tenant, before, 1);
    // Cancelled, the move is no longer live: its mismatch and copy-progress series leave the page.
    expect(await gaugeValue(env.metrics.validationMismatches.gauge, { unit: tenant })).toBeNaN();
    expect(await gaugeValue(env.metrics.tableRowsCopied.gauge, { unit: tenant })).toBeNaN();
  });

  it('rollback during soak switches back without losing writes made after the switch', { timeout: 180_000 }, async () => {
    const config = testConfig();
    const tenant = await H.newTenant('shard-a', 'rb');
    await H.seed(tenant, 200, 2);
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 600 }));
    await H.waitPhase(h, 'soak', 120_000);
    await expect(h.executeUpdate(M.cancelUpdate, { args: [op] })).rejects.toMatchObject({
      cause: { message: expect.stringMatching(/past the switch.*use rollback/) },
    });
    const router = await Router.create(config);
    const ids: string[] = [];
    try {
      for (let i = 0; i < 20; i++) {
        ids.push(
          await router.withTenant(
            tenant,
            { tenants: [tenant] },
            'write',
            async (tx) =>
              (
                await tx.query(`insert into public.events(tenant_id, kind, payload) values ($1, 'after-switch', $2) returning id`, [
                  tenant,
                  JSON.stringify({ i }),
                ])
              ).rows[0].id,
          ),
        );
      }
      await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
        tx.query(`update public.accounts set balance = 4242.42 where tenant_id = $1`, [tenant]),
      );
    } finally {
      await router.close();
    }
    expect((await H.placement(tenant))!.shard).toBe('shard-b');
    await h.executeUpdate(M.rollbackUpdate, { args: [op] });
    const s = await H.waitPhase(h, 'rolled-back', 120_000);
    expect(s.operators.rolledBackBy).toBe('sre-test');
    expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 3, state: 'active' });
    const got = await shardPool('shard-a').query(`select id from public.events where tenant_id = $1 and kind = 'after-switch'`, [tenant]);
    expect(got.rows.map((r) => r.id).sort()).toEqual([...ids].sort());
    const bal = await shardPool('shard-a').query(`select distinct balance from public.accounts where tenant_id = $1`, [tenant]);
    expect(bal.rows.map((r) => r.balance)).toEqual(['4242.42']);
    expect(await H.tryWrite('shard-a', tenant, 3)).toBe('ok');
    expect(await H.tryWrite('shard-b', tenant, 2)).toBe('SC421');
    expect(await H.tryWrite('shard-b', tenant, 3)).toBe('SC421');
    expect(await H.rowCount('shard-b', tenant)).toBe(0);
    expect(await H.replicationLeftovers(`${tenant}.e1`)).toEqual([]);
  });

  it('an update of a small column keeps the TOASTed big value (through catch-up)', { timeout: 180_000 }, async () => {
    const config = testConfig();
    const tenant = await H.newTenant('shard-a', 'tx');
    await H.seed(tenant, 100, 0);
    const big = await shardPool('shard-a').query(
      `select id, md5(body) as h, length(body) as n from public.documents where tenant_id = $1 order by length(body) desc limit 1`,
      [tenant],
    );
    expect(big.rows[0].n).toBeGreaterThan(20_000);
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { approveCutover: 'manual', soakSeconds: 600 }));
    await H.waitFor(h, (x) => x.awaitingApproval, 120_000);
    const router = await Router.create(config);
    try {
      await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
        tx.query(`update public.documents set title = 'renamed', version = version + 1 where tenant_id = $1 and id = $2`, [tenant, big.rows[0].id]),
      );
    } finally {
      await router.close();
    }
    await h.executeUpdate(M.approveUpdate, { args: [op] });
    await H.waitPhase(h, 'soak', 120_000);
    const r = await shardPool('shard-b').query(`select title, md5(body) as h from public.documents where tenant_id = $1 and id = $2`, [tenant, big.rows[0].id]);
    expect(r.rows[0]).toEqual({ title: 'renamed', h: big.rows[0].h });
    await h.executeUpdate(M.retireNowUpdate, { args: [op] });
    const done = await H.waitPhase(h, 'done', 120_000);
    expect(done.operators.retiredBy).toBe('sre-test');
    expect(await H.rowCount('shard-a', tenant)).toBe(0);
  });

  it('retire refuses while the source copy was written outside shardctl after the switch, then retires once reconciled', { timeout: 180_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 're');
    await H.seed(tenant, 100, 1);
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 600 }));
    await H.waitPhase(h, 'soak', 120_000);
    // A manual fix that bypasses the fence on the old owner (replica role, a foreign tool).
    const c = await shardPool('shard-a').connect();
    try {
      await c.query(`set application_name = 'psql-manual-fix'`);
      await c.query('begin');
      await c.query('set local session_replication_role = replica');
      await c.query(`insert into public.events(tenant_id, kind) values ($1, 'manual')`, [tenant]);
      await c.query('commit');
    } finally {
      await c.query('reset application_name').catch(() => {});
      c.release();
    }
    const rowsBefore = await H.rowCount('shard-a', tenant);
    await h.executeUpdate(M.retireNowUpdate, { args: [op] });
    const s = await H.waitFor(h, (x) => x.phase === 'soak' && x.blockedReason.startsWith('retire refused'), 60_000);
    expect(s.blockedReason).toMatch(/1 writes reached the source copy .* psql-manual-fix/);
    expect(await H.rowCount('shard-a', tenant)).toBe(rowsBefore); // nothing deleted
    // Reconcile: the operator removes the stray row and clears the evidence, then retires again.
    // The removal is audited like any fence-bypassing write (a name of shardctl's would be refused:
    // the session is not one of its registered data-plane sessions); clearing after it, in the
    // same transaction, clears that record too.
    const r = await shardPool('shard-a').connect();
    try {
      await r.query(`set application_name = 'psql-operator'`);
      await r.query('begin');
      await r.query('set local session_replication_role = replica');
      await r.query(`delete from public.events where tenant_id = $1 and kind = 'manual'`, [tenant]);
      await r.query(`delete from shardctl.unowned_writes where unit = $1`, [tenant]);
      await r.query('commit');
    } finally {
      await r.query('reset application_name').catch(() => {});
      r.release();
    }
    await h.executeUpdate(M.retireNowUpdate, { args: [op] });
    await H.waitPhase(h, 'done', 120_000);
    expect(await H.rowCount('shard-a', tenant)).toBe(0);
    expect(await H.replicationLeftovers(`${tenant}.e1`)).toEqual([]);
  });

  it('a fence that overruns its budget unfences and returns to catch-up: never an open-ended write pause', { timeout: 180_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'fb');
    await H.seed(tenant, 100, 1);
    const abortsBefore = await abortsByReason();
    // A 1 ms budget cannot be met: every cutover attempt must abort and lower the fence.
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { fenceBudgetMs: 1 }));
    const s = await H.waitFor(h, (x) => x.cutoverAttempts >= 2 && x.phase !== 'fence', 150_000);
    expect(s.lastError).toMatch(/budget/);
    // Each aborted attempt counts once under shardctl_cutover_aborts_total{reason="budget"} (one more
    // may have finished since the status was read) and under no other reason.
    const aborts = await abortsByReason();
    const added = Object.fromEntries(Object.entries(aborts).map(([k, v]) => [k, v - (abortsBefore[k] ?? 0)]));
    expect(added.budget).toBeGreaterThanOrEqual(s.cutoverAttempts);
    expect(added.budget).toBeLessThanOrEqual(s.cutoverAttempts + 1);
    expect(Object.entries(added).filter(([k, v]) => k !== 'budget' && v !== 0)).toEqual([]);
    // Every finished attempt froze the tenant and aborted: each one's write pause is on the status,
    // and none of them is reported as the switching attempt's pause.
    expect(s.cutoverAbortedPausesMs).toHaveLength(s.cutoverAttempts);
    for (const ms of s.cutoverAbortedPausesMs ?? []) expect(ms).toBeGreaterThan(0);
    expect(s.cutoverPauseMs).toBeNull();
    expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active', moveId: null });
    expect(await H.tryWrite('shard-a', tenant, 1)).toBe('ok'); // unfrozen between attempts
    await h.executeUpdate(M.cancelUpdate, { args: [op] });
    await H.waitPhase(h, 'cancelled', 120_000);
    expect(await H.replicationLeftovers(`${tenant}.e1`)).toEqual([]);
  });

  it('pause holds the copy between tables, a throttle update applies to the running move, resume finishes it', { timeout: 180_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'pz');
    await H.seed(tenant, 600, 1);
    const RATE = 50;
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { rowsPerSecond: RATE, copyBatchRows: 10, soakSeconds: 1 }));
    await H.waitFor(h, (x) => x.phase === 'copy', 60_000);
    // The first table's copy is under way (scheduled at RATE) before anything is changed.
    for (const until = Date.now() + 60_000; (await H.rowCount('shard-b', tenant)) === 0;) {
      if (Date.now() > until) throw new Error('no row reached the target within 60 s of the copy phase');
      await new Promise((r) => setTimeout(r, 50));
    }
    await expect(h.executeUpdate(M.resumeUpdate, { args: [op] })).rejects.toMatchObject({ cause: { message: expect.stringMatching(/not paused/) } });
    expect(await h.executeUpdate(M.pauseUpdate, { args: [op] })).toBe('paused');
    const paused = await H.waitFor(h, (x) => x.paused);
    await new Promise((r) => setTimeout(r, 3000));
    const still = await h.query(M.statusQuery);
    // Paused: no new table started and the phase did not advance.
    expect(still.phase).toBe('copy');
    expect(still.tables.filter((x) => x.done).length).toBeLessThanOrEqual(paused.tables.filter((x) => x.done).length + 1);
    // Paused for real: nothing more reaches the target.
    const held = await H.rowCount('shard-b', tenant);
    await new Promise((r) => setTimeout(r, 1000));
    expect(await H.rowCount('shard-b', tenant)).toBe(held);
    await expect(h.executeUpdate(M.throttleUpdate, { args: [{ ...op, rowsPerSecond: -1 }] })).rejects.toMatchObject({
      cause: { message: expect.stringMatching(/rowsPerSecond must be a non-negative integer/) },
    });
    expect(await h.executeUpdate(M.throttleUpdate, { args: [{ ...op, rowsPerSecond: 0 }] })).toMatch(/throttle 0/);
    // Tables were left to copy when resumed, so at least one table's copy starts after the throttle.
    const remaining = 600 - held;
    expect(remaining, 'rows left to copy when resumed').toBeGreaterThan(200);
    expect(await h.executeUpdate(M.resumeUpdate, { args: [op] })).toBe('resumed');
    await H.waitFor(h, (x) => x.tables.length > 0 && x.tables.every((tb) => tb.done), 60_000);
    // The running move applies the new rate: every table copy the workflow scheduled after it accepted
    // the throttle asks for no limit, every one before asks for RATE (the copy's own rate keeping is
    // unit-tested in test/unit/throttle.test.ts). Read from the workflow history, not from timings.
    const copies = await scheduledActivityInputs(h, 'copyTable');
    const after = copies.filter((c) => c.updatesBefore.includes('throttle'));
    const before = copies.filter((c) => !c.updatesBefore.includes('throttle'));
    expect(after.length, 'table copies scheduled after the throttle').toBeGreaterThan(0);
    expect(before.length, 'table copies scheduled before the throttle').toBeGreaterThan(0);
    expect(after.map((c) => c.input.rowsPerSecond)).toEqual(after.map(() => 0));
    expect(before.map((c) => c.input.rowsPerSecond)).toEqual(before.map(() => RATE));
    const done = await H.waitPhase(h, 'done', 150_000);
    expect(done.paused).toBe(false);
    // What the copy measured is kept, marked throttled and paused: `move plan` does not estimate from it.
    const copied = await directoryPool().query(`select detail from shardctl.audit where unit = $1 and action = 'move.copied'`, [tenant]);
    expect(copied.rows.map((r) => r.detail)).toEqual([expect.objectContaining({ moveId: done.moveId, rowsPerSecond: RATE, paused: true })]);
  });

  // Each CLI process takes seconds to start on a loaded 2-core machine.
  it('refuses a second move of the same tenant and bad input, from the CLI', { timeout: 240_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'cl');
    const cli = (...args: string[]) =>
      spawnSync('node', ['cli/shardctl.js', ...args], { encoding: 'utf8', env: { ...process.env, SHARDCTL_TASK_QUEUE: uniq('idle') } });
    const bad = [
      ['move', 'start', '--tenant', "x'; drop table accounts;--", '--to', 'shard-b'],
      ['move', 'start', '--tenant', tenant, '--to', 'shard-z'],
      ['move', 'start', '--tenant', tenant, '--to', 'shard-b', '--soak', 'forever'],
      ['move', 'start', '--tenant', tenant, '--to', 'shard-b', '--approve-cutover', 'maybe'],
    ];
    for (const args of bad) {
      const r = cli(...args);
      // 2: bad usage, except the unknown shard, which is not found (3).
      expect(r.status, args.join(' ')).toBe(args.includes('shard-z') ? 3 : 2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    }
    const first = cli('move', 'start', '--tenant', tenant, '--to', 'shard-b', '--actor', 'sre-a');
    expect(first.status, first.stderr).toBe(0);
    try {
      const second = cli('move', 'start', '--tenant', tenant, '--to', 'shard-c');
      expect(second.status).toBe(4); // refused by the current state
      expect(second.stderr).toContain(`already running: workflow ${moveWorkflowId(tenant)}`);
    } finally {
      await t.client.workflow.getHandle(moveWorkflowId(tenant)).terminate('test over');
    }
  });
});
