// A write running long at the cutover, through a real worker and workflow: the cutover waits for
// it before freezing (writes go on meanwhile), says so in its heartbeat and on the move's status,
// freezes only once it committed, and the write is on the new owner (issue 10: at 1M rows a
// router's account delete, cascading over an unindexed foreign key, held a freeze ~1 s).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { WorkflowHandle } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { closePools, directoryPool, shardPool } from '../helpers/stack';
import * as H from '../helpers/move';
import * as M from '../../workflows/messages';
import { formatCutoverPauses } from '../../lib/move-progress';

let env: Awaited<ReturnType<typeof H.moveEnv>>;

beforeAll(async () => {
  env = await H.moveEnv('longwrite');
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

/** The pending cutover's last heartbeat details, when it has beaten. */
async function cutoverBeat(h: WorkflowHandle): Promise<any> {
  const pending = (await h.describe()).raw.pendingActivities ?? [];
  const cut = pending.find((a) => a.activityType?.name === 'cutover');
  const p = cut?.heartbeatDetails?.payloads?.[0];
  return p ? defaultPayloadConverter.fromPayload(p as never) : undefined;
}

describe('a write running long at the cutover', () => {
  it(
    'is waited for before the freeze, named in the heartbeat and on the status; the freeze comes after its commit and the write moves',
    { timeout: 240_000 },
    async () => {
      const tenant = await H.newTenant('shard-a', 'lwc');
      await H.seed(tenant, 100, 0);
      // Approval first: the move's slot must exist before the writer opens (creating a slot waits
      // for every transaction in flight, the long one too).
      const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 1, approveCutover: 'manual' }), { source: 'shard-a' });
      await H.waitFor(h, (x) => x.awaitingApproval, 120_000);
      // A writer as the router opens it, its transaction left open (a long statement in flight).
      const w = await H.openUnitWriter('shard-a', tenant);
      const { c, pid } = w;
      let committedAt: Date | undefined;
      try {
        await h.executeUpdate(M.approveUpdate, { args: [{ actor: 'sre-test' }] });
        // The cutover says it waits for this writer (the SDK sends beats every few seconds).
        let beat: any;
        for (let i = 0; i < 120 && !/waiting for long writers/.test(beat?.step ?? ''); i++) {
          await new Promise((r) => setTimeout(r, 500));
          beat = await cutoverBeat(h).catch(() => undefined);
        }
        expect(beat, 'the cutover never said it waited for the long writer').toMatchObject({
          step: 'waiting for long writers before the freeze',
          writers: [expect.objectContaining({ pid })],
        });
        // Nothing is frozen while it waits: the directory still says active.
        expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active' });
        // The server's clock just before the commit: the freeze (the directory's, same machine) must be later.
        const before = (await c.query('select pg_catalog.clock_timestamp() as t')).rows[0].t as Date;
        await w.commit();
        committedAt = before;
        const done = await H.waitPhase(h, 'done', 180_000);
        expect(done.cutoverAttempts).toBe(1);
        expect(done.cutoverWritersWaitedMs).toBeGreaterThan(0);
        expect(formatCutoverPauses(done)).toMatch(/waited \d+ ms for long writers before freezing/);
        // The freeze came after the long write committed.
        const freezes = await directoryPool().query(`select at from shardctl.audit where unit = $1 and action = 'freeze' order by id`, [tenant]);
        expect(freezes.rows).toHaveLength(1);
        expect(new Date(freezes.rows[0].at).getTime()).toBeGreaterThan(committedAt.getTime());
        const moved = await shardPool('shard-b').query(`select count(*)::int as n from public.events where tenant_id = $1 and kind = 'long-write'`, [tenant]);
        expect(moved.rows[0].n).toBe(1);
      } finally {
        if (!committedAt) await w.rollback().catch(() => {});
      }
    },
  );
});
