// The cutover's final catch-up is opened before the freeze (lib/cutover/final-apply.ts): inside the
// frozen window the stream is already connected and caught up, and the window holds only the last
// changes, not the sessions' set-up. Real move activities in-process, real shards: at the fence
// point (the `after-fence-raised` fault point, inside the window) the move's slot is already
// streaming, to a walsender that started before the freeze; a final apply that dies just before
// the fence leaves the cutover to open its own, and it still switches exact.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import type { Activities } from '../../activities';
import type { Router } from '../../lib/router';
import { replicationNames } from '../../lib/ids';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';

let act: Activities;
let router: Router;
let env: H.InProcess | undefined;
/** What to do at a fault point of the move under test (set per test). */
let at: Record<string, () => Promise<void>> = {};

beforeAll(async () => {
  env = await H.inProcessActivities({
    router: true,
    faultPoint: async (name) => {
      await at[name]?.();
    },
  });
  ({ act, router } = env);
});
afterAll(() => env?.close());

const LATE_WRITES = 5;

/** A tenant copied, caught up and validated, with writes after the last catch-up that only the cutover's final apply will carry. */
async function readyToSwitch(prefix: string) {
  const { tenant, ref, token } = await H.validatedMove(act, { source: SOURCE, target: TARGET, prefix, rows: 40 });
  for (let i = 0; i < LATE_WRITES; i++) {
    await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
      tx.query(`insert into public.events(tenant_id, kind, payload) values ($1, 'late', '{}')`, [tenant]),
    );
  }
  return { tenant, ref, token, slot: replicationNames(ref.moveId, 'forward').slot };
}

const lateOnTarget = async (tenant: string) =>
  (await shardPool(TARGET).query<{ n: number }>(`select count(*)::int as n from public.events where tenant_id = $1 and kind = 'late'`, [tenant])).rows[0].n;

async function finish(ref: { moveId: string; unit: string; source: string; target: string }) {
  await act.dropReplication({ ...ref, direction: 'forward' });
  await act.dropReplication({ ...ref, direction: 'reverse' });
}

const cutover = (ref: { moveId: string; unit: string; source: string; target: string }, token?: string) =>
  act.cutover({ ...ref, direction: 'forward', epoch: 1, fenceBudgetMs: 10_000, actor: 'final-apply-test', deltaToken: token });

describe('the final catch-up opened before the freeze', () => {
  it('streams the writes made after it opened (before the freeze) so that at the fence point the target already holds them; the switch is exact', async () => {
    const { tenant, ref, token } = await readyToSwitch('fa');
    let atFence = -1;
    at = {
      // Opened and caught up, the unit not frozen yet: one more write.
      'after-final-apply-opened': async () => {
        await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
          tx.query(`insert into public.events(tenant_id, kind, payload) values ($1, 'late', '{}')`, [tenant]),
        );
      },
      // Inside the frozen window, before the apply step runs: only a stream already open can have
      // brought it here (given a second; before, the final apply opened its sessions only after this).
      'after-fence-raised': async () => {
        for (let i = 0; i < 20 && (atFence = await lateOnTarget(tenant)) < LATE_WRITES + 1; i++) await new Promise((r) => setTimeout(r, 50));
      },
    };
    try {
      const r = await cutover(ref, token);
      expect(r, JSON.stringify(r)).toMatchObject({ ok: true, newEpoch: 2 });
    } finally {
      at = {};
    }
    expect(atFence).toBe(LATE_WRITES + 1);
    expect(await H.fingerprint(TARGET, tenant)).toEqual(await H.fingerprint(SOURCE, tenant));
    await finish(ref);
  });

  it('a final apply whose stream dies before the freeze leaves the cutover to open its own inside the window: it still switches, target equal to source', async () => {
    const { tenant, ref, token, slot } = await readyToSwitch('fb');
    let killed = 0;
    let atFence = -1;
    at = {
      'after-final-apply-opened': async () => {
        const w = await shardPool(SOURCE).query(`select active_pid as pid from pg_replication_slots where slot_name = $1`, [slot]);
        if (w.rows[0]?.pid) killed += (await shardPool(SOURCE).query(`select pg_terminate_backend($1) as ok`, [w.rows[0].pid])).rows[0].ok ? 1 : 0;
        await new Promise((r) => setTimeout(r, 1500)); // the opened round notices and ends
        // A write after the opened round died: only an apply opened inside the window can carry it.
        await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
          tx.query(`insert into public.events(tenant_id, kind, payload) values ($1, 'after-kill', '{}')`, [tenant]),
        );
      },
      'after-fence-raised': async () => void (atFence = await lateOnTarget(tenant)),
    };
    try {
      const r = await cutover(ref, token);
      expect(killed, 'the opened round had a walsender to end').toBe(1);
      expect(r, JSON.stringify(r)).toMatchObject({ ok: true, newEpoch: 2 });
    } finally {
      at = {};
    }
    expect(atFence).toBeGreaterThanOrEqual(0);
    const afterKill = await shardPool(TARGET).query(`select count(*)::int as n from public.events where tenant_id = $1 and kind = 'after-kill'`, [tenant]);
    expect(afterKill.rows[0].n).toBe(1);
    expect(await H.fingerprint(TARGET, tenant)).toEqual(await H.fingerprint(SOURCE, tenant));
    await finish(ref);
  });
});
