// The frozen window fails open: an exception thrown by any step between the freeze and the
// point of no return unfreezes the tenant at once (not after a timer), the move retries and
// completes; and a move whose cutover keeps aborting stops freezing the tenant and waits for
// the operator. Real worker, real shards, real directory.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { testConfig, uniq, closePools, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import * as M from '../../workflows/messages';
import { startWorker, type StartedWorker } from '../../worker';
import { createDeps } from '../../activities/deps';

let worker: StartedWorker;
let tq: string;
let t: Awaited<ReturnType<typeof H.temporal>>;
/** Fault points armed to throw (not kill): name → how many more times. */
const armed = new Map<string, number>();
const hits: string[] = [];
const op = { actor: 'sre-test' };

beforeAll(async () => {
  await H.prepareStack();
  tq = uniq('frozen');
  const deps = createDeps(testConfig(), {
    faultPoint: async (name) => {
      const n = armed.get(name) ?? 0;
      if (n <= 0) return;
      armed.set(name, n - 1);
      hits.push(name);
      throw new Error(`injected failure at ${name}`);
    },
  });
  worker = await startWorker(testConfig(), { taskQueue: tq, deps });
  t = await H.temporal();
});
afterAll(async () => {
  await t?.close();
  await worker?.shutdown();
  await closePools();
});

async function auditOf(tenant: string, action: string): Promise<Array<{ reason: string | null; detail: any }>> {
  const r = await directoryPool().query('select reason, detail from shardctl.audit where unit = $1 and action = $2 order by id', [tenant, action]);
  return r.rows;
}

describe('the frozen window', () => {
  it(
    'an error thrown after the fence is raised, and one just before the switch, each unfreeze at once; the move then completes',
    { timeout: 180_000 },
    async () => {
      const tenant = await H.newTenant('shard-a', 'fz');
      await H.seed(tenant, 200, 2);
      armed.set('after-fence-raised', 1);
      armed.set('before-switch', 1);
      const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 1 }));
      const done = await H.waitPhase(h, 'done', 150_000);
      expect(hits).toEqual(['after-fence-raised', 'before-switch']);
      expect(done.cutoverAttempts).toBe(3);
      // Each failed attempt unfroze through the directory with the step that failed as the reason,
      // under its own freeze token, and each freeze had a token of its own.
      const unfreezes = await auditOf(tenant, 'unfreeze');
      expect(unfreezes.map((u) => u.reason)).toEqual([
        expect.stringMatching(/^raise the fence failed inside the frozen window: injected failure at after-fence-raised; unfrozen/),
        expect.stringMatching(/^before the switch failed inside the frozen window: injected failure at before-switch; unfrozen/),
      ]);
      const freezes = await auditOf(tenant, 'freeze');
      const tokens = freezes.map((f) => f.detail.freezeToken);
      expect(new Set(tokens).size).toBe(3);
      expect(unfreezes.map((u) => u.detail.freezeToken)).toEqual(tokens.slice(0, 2));
      const [sw] = await auditOf(tenant, 'switch');
      expect(sw.detail.freezeToken).toBe(tokens[2]);
      expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active', moveId: null });
      expect(await H.tryWrite('shard-b', tenant, 2)).toBe('ok');
      expect(await H.tryWrite('shard-a', tenant, 1)).toBe('SC421');
    },
  );

  it('after 3 aborted cutovers in a row the move stops freezing the tenant and waits for approve; approve retries', { timeout: 180_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'fa');
    await H.seed(tenant, 50, 1);
    armed.set('before-switch', 3);
    const h = await H.startMove(t.client, tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 1 }));
    const blocked = await H.waitFor(h, (x) => x.blockedReason.includes('aborted in a row'), 150_000);
    expect(blocked).toMatchObject({ phase: 'fence', awaitingApproval: true, cutoverAttempts: 3 });
    expect(blocked.blockedReason).toContain('move approve');
    // Not frozen, and no further attempt while it waits.
    expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active', moveId: null });
    expect(await H.tryWrite('shard-a', tenant, 1)).toBe('ok');
    await new Promise((r) => setTimeout(r, 4000));
    expect((await h.query(M.statusQuery)).cutoverAttempts).toBe(3);
    expect(await h.executeUpdate(M.approveUpdate, { args: [op] })).toBe('approved');
    const done = await H.waitPhase(h, 'done', 150_000);
    expect(done.cutoverAttempts).toBe(4);
    expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active' });
  });
});
