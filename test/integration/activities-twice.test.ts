// Every activity stays correct if Temporal delivers it twice (DESIGN.md §4: "each activity is
// idempotent"). Temporal runs an activity at least once: a retry after a lost completion, or a
// second attempt overlapping a slow first one after a timeout. Here the activities are built
// in-process (no Temporal) and a real move is driven by calling them in workflow order, each one
// twice in a row and several twice at once; the end state must equal a single delivery's.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { shardPool, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import type { Activities } from '../../activities';
import { Router } from '../../lib/router';
import { replicationNames } from '../../lib/ids';
import { compareAndSetPlacement } from '../../lib/directory/placements';
import { freezeSource } from '../../lib/shard/fence';

let act: Activities;
let router: Router;
/** The activities' fault hook (DESIGN.md crash points): a test makes it throw or hold a call. */
let onFault: ((name: string) => Promise<void>) | undefined;

let env: H.InProcess | undefined;
beforeAll(async () => {
  env = await H.inProcessActivities({ router: true, faultPoint: async (name) => onFault?.(name) });
  ({ act, router } = env);
});
afterAll(() => env?.close());

/** Two deliveries one after the other. */
async function twice<T>(fn: () => Promise<T>): Promise<[T, T]> {
  const a = await fn();
  const b = await fn();
  return [a, b];
}

/**
 * Two overlapping deliveries. Overlap may legitimately end the older one when `allowed` says how
 * (the newest apply session wins and terminates the other, see lib/cdc/apply-lock.ts): then one
 * must succeed. Without `allowed`, both must succeed.
 */
async function atOnce<T>(fn: () => Promise<T>, allowed?: RegExp): Promise<T[]> {
  const r = await Promise.allSettled([fn(), fn()]);
  const ok = r.filter((x): x is PromiseFulfilledResult<Awaited<T>> => x.status === 'fulfilled').map((x) => x.value as T);
  const failed = r.filter((x): x is PromiseRejectedResult => x.status === 'rejected').map((x) => String(x.reason?.message ?? x.reason));
  expect(failed.filter((m) => !allowed?.test(m))).toEqual([]);
  expect(ok.length).toBeGreaterThanOrEqual(1);
  return ok;
}
/** How an overlapping apply session loses the target to the newer one. */
const TAKEN_OVER = /connection error|terminating connection|connection terminated|another apply session/i;
/** An overlapped cutover delivery whose freeze the other took over: its switch is refused (Temporal retries it; the retry finds the switch done). */
const CUTOVER_TAKEN_OVER = /connection error|terminating connection|connection terminated|another apply session|switch compare-and-set lost|switch superseded/i;
/**
 * Known: two overlapping recordManifest calls (delete-then-insert under READ COMMITTED) can make
 * one fail with a unique violation. Retriable, and the survivor's manifest is complete, so the
 * state stays right; reported for a fix in lib/blobs/store.ts (serialise per move id).
 */
const MANIFEST_RACE = /duplicate key value violates unique constraint "blob_manifest_pkey"/;

const grantOf = (tenant: string) => ({ tenants: [tenant] });

/** Writes through the router (fenced, at the directory's epoch): inserts, an update and a delete. */
async function liveWrites(tenant: string, label: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    ids.push(
      await router.withTenant(
        tenant,
        grantOf(tenant),
        'write',
        async (tx) =>
          (await tx.query(`insert into public.events(tenant_id, kind, payload) values ($1, $2, $3) returning id`, [tenant, label, JSON.stringify({ i })]))
            .rows[0].id,
      ),
    );
  }
  await router.withTenant(tenant, grantOf(tenant), 'write', async (tx) => {
    await tx.query(`update public.accounts set balance = balance + 1, name = name || '+' where tenant_id = $1`, [tenant]);
    await tx.query(`delete from public.events where tenant_id = $1 and id = $2`, [tenant, ids.pop()]);
  });
  return ids;
}

async function eventsOf(shard: string, tenant: string, kind: string): Promise<{ n: number; distinct: number }> {
  const r = await shardPool(shard).query(
    `select count(*)::int as n, count(distinct payload)::int as distinct from public.events where tenant_id = $1 and kind = $2`,
    [tenant, kind],
  );
  return r.rows[0];
}

async function progressRows(shard: string, moveId: string): Promise<number> {
  const r = await shardPool(shard).query('select count(*)::int as n from shardctl.move_progress where move_id = $1', [moveId]);
  return r.rows[0].n;
}

async function manifestRows(shard: string, moveId: string): Promise<number> {
  const r = await shardPool(shard).query('select count(*)::int as n from shardctl.blob_manifest where move_id = $1', [moveId]);
  return r.rows[0].n;
}

/** How many times the directory recorded each placement change for the unit. */
async function auditActions(tenant: string, actions: string[]): Promise<Record<string, number>> {
  const r = await directoryPool().query('select action, count(*)::int as n from shardctl.audit where unit = $1 and action = any($2) group by action', [
    tenant,
    actions,
  ]);
  return Object.fromEntries(actions.map((a) => [a, r.rows.find((x) => x.action === a)?.n ?? 0]));
}

async function fenceOf(shard: string, tenant: string) {
  const r = await shardPool(shard).query('select epoch::int, owned, frozen from shardctl.fence where unit = $1', [tenant]);
  return r.rows[0] as { epoch: number; owned: boolean; frozen: boolean } | undefined;
}

/** A tenant driven (single deliveries) up to the cutover: copied, caught up, reverse slot ready. */
async function readyForCutover(prefix: string, target: string, rows: number, blobs: number, live: string) {
  const tenant = await H.newTenant('shard-a', prefix);
  await H.seed(tenant, rows, blobs);
  const plan = await act.planMove({ unit: tenant, target });
  expect(plan.ok, plan.reasons.join('; ')).toBe(true);
  const ref = { moveId: plan.moveId, unit: tenant, source: plan.source, target };
  await act.setupReplication({ ...ref, direction: 'forward' });
  for (const t of plan.tables) await act.copyTable({ ...ref, table: t.table, batchRows: 5000, rowsPerSecond: 0 });
  await act.copyBlobs({ ...ref, direction: 'forward' });
  await liveWrites(tenant, live, 4);
  await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
  await act.setupReplication({ ...ref, direction: 'reverse' });
  return { tenant, ref };
}

/** Holds the nth call reaching fault point `name` until released. */
function holdAt(name: string, nth: number) {
  let seen = 0;
  let reach!: () => void;
  let release!: () => void;
  const reached = new Promise<void>((r) => (reach = r));
  const released = new Promise<void>((r) => (release = r));
  return {
    reached,
    release,
    async hit(n: string) {
      if (n !== name || ++seen !== nth) return;
      reach();
      await released;
    },
  };
}

describe('activities delivered twice', () => {
  it('a whole move driven with every activity delivered twice ends exactly like a single delivery', { timeout: 300_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'tw');
    await H.seed(tenant, 120, 3);
    const target = 'shard-b';

    // plan: changes nothing and answers the same both times.
    const [plan, plan2] = await twice(() => act.planMove({ unit: tenant, target }));
    expect(plan.ok, plan.reasons.join('; ')).toBe(true);
    expect(plan2).toEqual(plan);
    expect(plan).toMatchObject({ source: 'shard-a', epoch: 1, moveId: `${tenant}.e1.dryrun` });
    const ref = { moveId: plan.moveId, unit: tenant, source: plan.source, target };
    const fwd = replicationNames(ref.moveId, 'forward');
    const rev = replicationNames(ref.moveId, 'reverse');

    // setup forward: one slot and one publication, whatever the deliveries.
    const [s1, s2] = await twice(() => act.setupReplication({ ...ref, direction: 'forward' }));
    expect(s2).toMatchObject({ slot: s1.slot, publication: s1.publication });
    await atOnce(() => act.setupReplication({ ...ref, direction: 'forward' }));
    expect((await H.replicationLeftovers(ref.moveId)).sort()).toEqual([`shard-a publication ${fwd.publication}`, `shard-a slot ${fwd.slot}`]);

    // Changes after the slot: the change stream's job, not the copy's.
    const early = await liveWrites(tenant, 'twice-early', 8);

    // copy: small batches so a redelivery resumes from a checkpoint mid-way.
    for (const t of plan.tables) {
      const [c1, c2] = await twice(() => act.copyTable({ ...ref, table: t.table, batchRows: 25, rowsPerSecond: 0 }));
      expect(c2.rowsCopied, t.table).toBe(c1.rowsCopied);
    }
    {
      // A fresh copy of one table by two overlapping deliveries: they serialise on the checkpoint.
      const t = plan.tables.find((x) => x.table === 'public.events')!;
      await shardPool(target).query('delete from shardctl.move_progress where move_id = $1 and stream = $2', [ref.moveId, `copy:${t.table}`]);
      const r = await atOnce(() => act.copyTable({ ...ref, table: t.table, batchRows: 10, rowsPerSecond: 0 }));
      const n = (await H.fingerprint('shard-a', tenant)).find((x) => x.table === t.table)!.rows;
      expect(r.map((x) => x.rowsCopied)).toEqual([n, n]);
    }
    const [b1, b2] = await twice(() => act.copyBlobs({ ...ref, direction: 'forward' }));
    // `copied`/`bytes` count this call's transfers (a redelivery finds nothing left to copy).
    expect(b1).toMatchObject({ total: 3, copied: 3, deleted: 0 });
    expect(b2).toMatchObject({ total: 3, copied: 0, bytes: 0, deleted: 0 });
    await atOnce(() => act.copyBlobs({ ...ref, direction: 'forward' }), MANIFEST_RACE);
    expect(await H.blobCount(target, tenant)).toBe(3);
    expect(await manifestRows(target, ref.moveId)).toBe(3);

    // catch-up: applied changes are never applied twice (a replayed insert/delete stays right).
    const mid = await liveWrites(tenant, 'twice-mid', 6);
    const [u1, u2] = await twice(() => act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' }));
    expect(u1.caughtUp && u2.caughtUp).toBe(true);
    expect(u2.transactionsApplied).toBe(0);
    await liveWrites(tenant, 'twice-late', 4);
    await atOnce(() => act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' }), TAKEN_OVER);
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    expect(await eventsOf(target, tenant, 'twice-early')).toEqual({ n: early.length, distinct: early.length });
    expect(await eventsOf(target, tenant, 'twice-mid')).toEqual({ n: mid.length, distinct: mid.length });

    // validate: read-only verdict, the same each time.
    const [v1, v2] = await twice(() => act.validateMove({ ...ref, direction: 'forward' }));
    expect(v1, v1.mismatches.join('\n')).toMatchObject({ ok: true, mismatches: [] });
    expect(v2).toMatchObject({ ok: true, mismatches: [], rows: v1.rows });
    for (const v of await atOnce(() => act.validateMove({ ...ref, direction: 'forward' }))) expect(v).toMatchObject({ ok: true, mismatches: [] });

    // setup reverse: one slot and publication on the target.
    await twice(() => act.setupReplication({ ...ref, direction: 'reverse' }));
    await atOnce(() => act.setupReplication({ ...ref, direction: 'reverse' }));
    expect((await H.replicationLeftovers(ref.moveId)).filter((x) => x.startsWith(target)).sort()).toEqual([
      `${target} publication ${rev.publication}`,
      `${target} slot ${rev.slot}`,
    ]);
    await liveWrites(tenant, 'twice-prefence', 3);
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });

    // cutover: the redelivery completes the switch it finds done; the epoch rises by exactly one.
    const cut = { ...ref, direction: 'forward' as const, epoch: 1, fenceBudgetMs: 10_000, actor: 'twice-test' };
    const [x1, x2] = await twice(() => act.cutover(cut));
    expect(x1, JSON.stringify(x1)).toMatchObject({ ok: true, newEpoch: 2, alreadyDone: false });
    expect(x2).toMatchObject({ ok: true, newEpoch: 2, alreadyDone: true });
    for (const x of await atOnce(() => act.cutover(cut))) expect(x).toMatchObject({ ok: true, newEpoch: 2, alreadyDone: true });
    expect(await H.placement(tenant)).toMatchObject({ shard: target, epoch: 2, state: 'active', moveId: null });
    expect(await auditActions(tenant, ['freeze', 'switch'])).toEqual({ freeze: 1, switch: 1 });
    // Target equals the source at the fence, row for row; no duplicated events.
    expect(await H.fingerprint(target, tenant)).toEqual(await H.fingerprint('shard-a', tenant));
    for (const kind of ['twice-early', 'twice-mid', 'twice-late', 'twice-prefence']) {
      const e = await eventsOf(target, tenant, kind);
      expect(e.n, kind).toBe(e.distinct);
    }
    // Single write authority: the source refuses every epoch, the target only the old one.
    expect(await fenceOf('shard-a', tenant)).toEqual({ epoch: 2, owned: false, frozen: false });
    expect(await H.tryWrite('shard-a', tenant, 1)).toBe('SC421');
    expect(await H.tryWrite('shard-a', tenant, 2)).toBe('SC421');
    expect(await H.tryWrite(target, tenant, 1)).toBe('SC421');
    expect(await H.tryWrite(target, tenant, 2)).toBe('ok');

    // drop forward replication: idempotent.
    await twice(() => act.dropReplication({ ...ref, direction: 'forward' }));
    await atOnce(() => act.dropReplication({ ...ref, direction: 'forward' }));
    expect((await H.replicationLeftovers(ref.moveId)).sort()).toEqual([`${target} publication ${rev.publication}`, `${target} slot ${rev.slot}`]);

    // soak: reverse replication keeps the source current; redelivered rounds apply nothing twice.
    const soak = await liveWrites(tenant, 'twice-soak', 5);
    await twice(() => act.catchUp({ ...ref, direction: 'reverse', maxDurationMs: 1500, idleStopMs: 500, mode: 'continuous' }));
    await liveWrites(tenant, 'twice-soak2', 3);
    await atOnce(() => act.catchUp({ ...ref, direction: 'reverse', maxDurationMs: 1500, idleStopMs: 500, mode: 'continuous' }), TAKEN_OVER);
    await act.catchUp({ ...ref, direction: 'reverse', maxDurationMs: 20_000, mode: 'now' });
    await twice(() => act.copyBlobs({ ...ref, direction: 'reverse' }));
    expect(await H.fingerprint('shard-a', tenant)).toEqual(await H.fingerprint(target, tenant));
    expect(await eventsOf('shard-a', tenant, 'twice-soak')).toEqual({ n: soak.length, distinct: soak.length });

    // retire: the second delivery finds nothing left to delete and says so without failing.
    const retire = { ...ref, epoch: 2, actor: 'twice-test' };
    const [r1, r2] = await twice(() => act.retireSource(retire));
    expect(r1).toEqual({ retired: true });
    expect(r2).toEqual({ retired: true });
    await atOnce(() => act.retireSource(retire));
    expect(await H.replicationLeftovers(ref.moveId)).toEqual([]);
    expect(await H.rowCount('shard-a', tenant)).toBe(0);
    expect(await H.blobCount('shard-a', tenant)).toBe(0);
    expect(await H.blobCount(target, tenant)).toBe(3);
    expect(await progressRows('shard-a', ref.moveId)).toBe(0);
    expect(await progressRows(target, ref.moveId)).toBe(0);
    expect(await fenceOf('shard-a', tenant)).toEqual({ epoch: 2, owned: false, frozen: false });
    expect(await H.tryWrite('shard-a', tenant, 2)).toBe('SC421');
    expect(await H.placement(tenant)).toMatchObject({ shard: target, epoch: 2, state: 'active' });
    expect((await H.fingerprint(target, tenant)).reduce((n, t) => n + t.rows, 0)).toBeGreaterThan(120);
  });

  it('two overlapping first deliveries of the cutover switch once: epoch + 1, one owner, target equals source', { timeout: 180_000 }, async () => {
    const { tenant, ref } = await readyForCutover('tx2', 'shard-c', 80, 2, 'overlap-live');
    const target = ref.target;
    const cut = { ...ref, direction: 'forward' as const, epoch: 1, fenceBudgetMs: 10_000, actor: 'twice-test' };
    const results = await atOnce(() => act.cutover(cut), CUTOVER_TAKEN_OVER);
    // One may lose the race to freeze (and says so), and the newer apply session ends the older
    // one's: both may give up (each unfreezes, fail open). Whoever went on switched to epoch 2.
    for (const r of results) if (r.ok) expect(r.newEpoch).toBe(2);
    const switched = results.some((r) => r.ok);
    // The next delivery (Temporal's retry) confirms the switch, or makes it if neither did.
    expect(await act.cutover(cut), JSON.stringify(results)).toMatchObject({ ok: true, newEpoch: 2, alreadyDone: switched });
    expect(await H.placement(tenant)).toMatchObject({ shard: target, epoch: 2, state: 'active', moveId: null });
    expect(await fenceOf('shard-a', tenant)).toEqual({ epoch: 2, owned: false, frozen: false });
    expect(await fenceOf(target, tenant)).toEqual({ epoch: 2, owned: true, frozen: false });
    expect(await H.fingerprint(target, tenant)).toEqual(await H.fingerprint('shard-a', tenant));
    expect(await eventsOf(target, tenant, 'overlap-live')).toEqual({ n: 3, distinct: 3 });
    // Leave nothing behind: finish the move.
    await act.dropReplication({ ...ref, direction: 'forward' });
    await act.retireSource({ ...ref, epoch: 2, actor: 'twice-test' });
    expect(await H.replicationLeftovers(ref.moveId)).toEqual([]);
  });

  it('cancelMove delivered twice (and twice at once) after a crashed cutover leaves the source intact and nothing behind', { timeout: 180_000 }, async () => {
    const { tenant, ref } = await readyForCutover('tc', 'shard-c', 80, 2, 'cancel-live');
    const target = ref.target;
    const before = await H.fingerprint('shard-a', tenant);
    expect(await H.rowCount(target, tenant)).toBeGreaterThan(0);

    // The worker dies inside the cutover just before the switch: unit frozen and `moving` under
    // that attempt's token. (A thrown error no longer stands in for a death: the cutover now
    // unfreezes on any error, so the state a dead worker leaves is set up as it would leave it.)
    const token = 'dead-attempt';
    const cas = await compareAndSetPlacement(
      directoryPool(),
      tenant,
      { shard: 'shard-a', epoch: 1, state: 'active' },
      { shard: 'shard-a', state: 'moving', moveId: ref.moveId, freezeToken: token },
      { actor: 'twice-test', action: 'freeze', detail: { moveId: ref.moveId, freezeToken: token } },
    );
    expect(cas.ok).toBe(true);
    await freezeSource(shardPool('shard-a'), tenant, 1, { token });
    expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'moving', moveId: ref.moveId });
    expect(await H.tryWrite('shard-a', tenant, 1)).toBe('SC423');

    const cancel = { ...ref, epoch: 1, actor: 'twice-test' };
    const [c1, c2] = await twice(() => act.cancelMove(cancel));
    expect(c1).toEqual({ cleaned: true });
    expect(c2).toEqual({ cleaned: true });
    await atOnce(() => act.cancelMove(cancel));

    expect(await H.fingerprint('shard-a', tenant)).toEqual(before);
    expect(await H.blobCount('shard-a', tenant)).toBe(2);
    expect(await H.rowCount(target, tenant)).toBe(0);
    expect(await H.blobCount(target, tenant)).toBe(0);
    expect(await H.replicationLeftovers(ref.moveId)).toEqual([]);
    expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active', moveId: null });
    expect(await fenceOf('shard-a', tenant)).toEqual({ epoch: 1, owned: true, frozen: false });
    expect(await fenceOf(target, tenant)).toBeUndefined();
    expect(await H.tryWrite('shard-a', tenant, 1)).toBe('ok');
    expect(await H.tryWrite(target, tenant, 1)).toBe('SC421');
    expect(await progressRows('shard-a', ref.moveId)).toBe(0);
    expect(await progressRows(target, ref.moveId)).toBe(0);
    // The tenant can be moved again: a fresh plan is clean.
    expect((await act.planMove({ unit: tenant, target })).ok).toBe(true);
  });

  // Two overlapping deliveries (Temporal's retry after A missed its heartbeat): B takes A's freeze
  // over with a token of its own, so when A resumes just before its switch, A's switch is refused
  // (its token no longer holds the freeze), A takes back the target's acceptance, and only B can
  // switch. At no point does the old owner accept epoch 1 while the target accepts epoch 2.
  // (Before freeze tokens, A switched on B's freeze; the older regression this replaces: an
  // overrunning B must never reopen the old owner after A's switch.)
  it('an overlapping cutover delivery takes the freeze over: the earlier one can no longer switch, the later one switches', { timeout: 180_000 }, async () => {
    const { tenant, ref } = await readyForCutover('tz', 'shard-b', 40, 1, 'race-live');
    const cut = { ...ref, direction: 'forward' as const, epoch: 1, fenceBudgetMs: 5000, actor: 'twice-test' };
    const aBeforeSwitch = holdAt('before-switch', 1);
    const bFenced = holdAt('after-fence-raised', 2); // A raised the fence first
    onFault = async (n) => {
      await aBeforeSwitch.hit(n);
      await bFenced.hit(n);
    };
    let a: Promise<unknown> | undefined;
    let b: Promise<unknown> | undefined;
    try {
      a = act.cutover(cut);
      a.catch(() => {});
      await aBeforeSwitch.reached;
      b = act.cutover(cut);
      await bFenced.reached; // B took the freeze over and raised the fence under its token
      aBeforeSwitch.release();
      await expect(a).rejects.toThrow(/switch compare-and-set lost/);
      // A's switch changed nothing: source still moving under B's freeze, the target refuses epoch 2.
      expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'moving', moveId: ref.moveId });
      expect(await H.tryWrite('shard-a', tenant, 1)).toBe('SC423');
      expect(await H.tryWrite(ref.target, tenant, 2)).toBe('SC421');
      bFenced.release();
      expect(await b).toMatchObject({ ok: true, newEpoch: 2, alreadyDone: false });
      expect(await H.placement(tenant)).toMatchObject({ shard: ref.target, epoch: 2, state: 'active' });
      expect(await H.tryWrite('shard-a', tenant, 1)).toBe('SC421');
      expect(await H.tryWrite(ref.target, tenant, 2)).toBe('ok');
      const switches = await directoryPool().query(`select count(*)::int as n from shardctl.audit where unit = $1 and action = 'switch'`, [tenant]);
      expect(switches.rows[0].n).toBe(1);
    } finally {
      aBeforeSwitch.release();
      bFenced.release();
      await Promise.allSettled([a, b]);
      onFault = undefined;
      await act.dropReplication({ ...ref, direction: 'forward' }).catch(() => {});
      await act.retireSource({ ...ref, epoch: 2, actor: 'twice-test' }).catch(() => {});
    }
  });

  it(
    'a cutover delivery that takes over a freeze older than the budget unfreezes instead of running a budget of its own; the stale one cannot switch',
    { timeout: 180_000 },
    async () => {
      const { tenant, ref } = await readyForCutover('tb', 'shard-b', 40, 1, 'race-late');
      const BUDGET_MS = 1500;
      const cut = { ...ref, direction: 'forward' as const, epoch: 1, fenceBudgetMs: BUDGET_MS, actor: 'twice-test' };
      const aBeforeSwitch = holdAt('before-switch', 1);
      onFault = (n) => aBeforeSwitch.hit(n);
      let a: Promise<unknown> | undefined;
      try {
        a = act.cutover(cut);
        a.catch(() => {});
        await aBeforeSwitch.reached;
        // A went silent with its freeze pinned; B arrives once the whole budget since that freeze is spent.
        await new Promise((r) => setTimeout(r, BUDGET_MS + 500));
        const b = await act.cutover(cut);
        expect(b).toMatchObject({ ok: false, reason: expect.stringMatching(/budget/) });
        // Its pause is the whole freeze's, A's share included (the directory's clock).
        expect(b.pauseMs).toBeGreaterThan(BUDGET_MS);
        expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active', moveId: null });
        expect(await H.tryWrite('shard-a', tenant, 1)).toBe('ok');
        aBeforeSwitch.release();
        await expect(a).rejects.toThrow(/switch compare-and-set lost/);
        expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active' });
        expect(await H.tryWrite(ref.target, tenant, 2)).toBe('SC421');
        const switches = await directoryPool().query(`select count(*)::int as n from shardctl.audit where unit = $1 and action = 'switch'`, [tenant]);
        expect(switches.rows[0].n).toBe(0);
      } finally {
        aBeforeSwitch.release();
        await Promise.allSettled([a]);
        onFault = undefined;
        await act.cancelMove({ ...ref, epoch: 1, actor: 'twice-test' }).catch(() => {});
        await act.dropReplication({ ...ref, direction: 'forward' }).catch(() => {});
      }
    },
  );

  it('recordMoveEvent delivered twice keeps one move record', { timeout: 60_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'tr');
    const e = {
      moveId: `${tenant}.e1`,
      unit: tenant,
      source: 'shard-a',
      target: 'shard-b',
      workflowId: `move-${tenant}`,
      action: 'start',
      actor: 'twice-test',
      status: 'plan',
      detail: { epoch: 1 },
    };
    await twice(() => act.recordMoveEvent(e));
    const moves = await directoryPool().query('select status, started_by, detail from shardctl.moves where move_id = $1', [e.moveId]);
    expect(moves.rows).toEqual([{ status: 'plan', started_by: 'twice-test', detail: { epoch: 1 } }]);
  });
});
