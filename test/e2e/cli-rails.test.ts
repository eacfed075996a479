// The operators' rails through the real `shardctl` against a real worker: `move retire` shows what
// it deletes and refuses without --yes off a terminal (asking for the tenant id on one), changing
// nothing; `move approve` by the move's own starter is refused when config requires another
// approver (the workflow holds it for moves started so, the CLI for the others), allowed otherwise.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { runCli, runCliOnTty, configFile } from '../helpers/cli';
import { closePools, testConfig } from '../helpers/stack';
import * as H from '../helpers/move';
import { moveWorkflowId } from '../../lib/ids';
import * as M from '../../workflows/messages';

let env: Awaited<ReturnType<typeof H.moveEnv>>;
let strict: ReturnType<typeof configFile>;
/** The CLI on this file's task queue; `strict` runs it with approvals.requireDistinctApprover. */
const cli = (args: string[], o: { strict?: boolean } = {}) =>
  runCli(o.strict ? ['--config', strict.file, ...args] : args, { env: { SHARDCTL_TASK_QUEUE: env.tq } });

beforeAll(async () => {
  env = await H.moveEnv('rails');
  strict = configFile({ ...testConfig(), approvals: { requireDistinctApprover: true } });
});
afterAll(async () => {
  strict?.remove();
  await env?.close();
  await closePools();
});

/** What a refused verb must leave as it was: the phase, the placement, the source copy. */
async function snapshot(tenant: string) {
  const s = await env.t.client.workflow.getHandle(moveWorkflowId(tenant)).query(M.statusQuery);
  return {
    phase: s.phase,
    blockedReason: s.blockedReason,
    placement: await H.placement(tenant),
    rows: await H.rowCount('shard-a', tenant),
    blobs: await H.blobCount('shard-a', tenant),
  };
}

describe('shardctl move: approval and retire rails', () => {
  it(
    'approve by the starter is refused under requireDistinctApprover (by the workflow and by the CLI), another approves; retire refuses without --yes, asks on a terminal, deletes once the id is typed',
    { timeout: 300_000 },
    async () => {
      const tenant = await H.newTenant('shard-a', 'rail');
      await H.seed(tenant, 40, 2);
      const started = await cli(
        ['move', 'start', '--tenant', tenant, '--to', 'shard-b', '--approve-cutover', 'manual', '--soak', '1h', '--yes', '--actor', 'alice'],
        { strict: true },
      );
      expect(started.code, started.stderr).toBe(0);
      const h = env.t.client.workflow.getHandle(moveWorkflowId(tenant));
      try {
        await H.waitFor(h, (s) => s.awaitingApproval, 120_000);
        const refusal = `separation of duties (approvals.requireDistinctApprover): alice started this move, so another operator must approve it`;
        // The CLI's check (strict config) and, with a config that does not ask, the workflow's own.
        for (const o of [{ strict: true }, { strict: false }]) {
          const self = await cli(['move', 'approve', tenant, '--actor', 'alice'], o);
          expect(self.code, self.stderr).toBe(4);
          expect(self.stderr.trim()).toBe(`shardctl: approve refused: ${refusal}`);
          const s = await H.waitFor(h, () => true);
          expect(s.awaitingApproval).toBe(true);
          expect(s.operators.approvedBy).toBeUndefined();
        }
        const other = await cli(['move', 'approve', tenant, '--actor', 'bob'], { strict: true });
        expect(other.code, other.stderr).toBe(0);
        expect(other.stdout.trim()).toBe(`${tenant}: approved`);
        await H.waitPhase(h, 'soak', 120_000);

        // Retire off a terminal without --yes: what it would delete, then a refusal; nothing changes.
        const before = await snapshot(tenant);
        expect(before).toMatchObject({ phase: 'soak', rows: 40, blobs: 2, placement: { shard: 'shard-b', state: 'active' } });
        const refused = await cli(['move', 'retire', tenant, '--actor', 'bob']);
        expect(refused.code, refused.stderr).toBe(4);
        expect(refused.stdout).toBe('');
        expect(refused.stderr).toContain(`retire the source copy of ${tenant} on shard-a`);
        expect(refused.stderr).toContain(`on shard shard-a: 40 row(s) of ${tenant} in 5 table(s)`); // the four demo tables and the blob index
        expect(refused.stderr).toMatch(/public\.documents\s+\d+ row\(s\)/);
        expect(refused.stderr).toContain(`blobs: 2 object(s)`);
        expect(refused.stderr).toContain(`under s3://shardctl-shard-a/tenants/${tenant}/`);
        expect(refused.stderr).toContain('without --yes (no terminal to ask on); nothing changed');
        // On a terminal, a wrong answer aborts too.
        const wrong = await runCliOnTty(['move', 'retire', tenant, '--actor', 'bob'], 'shard-a', { env: { SHARDCTL_TASK_QUEUE: env.tq } });
        expect(wrong.code, wrong.stdout).toBe(4);
        expect(wrong.stdout).toContain(`type ${tenant} to confirm`);
        await new Promise((r) => setTimeout(r, 1000));
        expect(await snapshot(tenant)).toEqual(before);

        // Typing the tenant id back retires: the source copy goes, the move ends done.
        const typed = await runCliOnTty(['move', 'retire', tenant, '--actor', 'bob'], tenant, { env: { SHARDCTL_TASK_QUEUE: env.tq } });
        expect(typed.code, typed.stdout).toBe(0);
        expect(typed.stdout).toContain(`${tenant}: retiring`);
        const done = await H.waitPhase(h, 'done', 120_000);
        expect(done.operators).toMatchObject({ startedBy: 'alice', approvedBy: 'bob', retiredBy: 'bob' });
        expect(await H.rowCount('shard-a', tenant)).toBe(0);
        expect(await H.blobCount('shard-a', tenant)).toBe(0);
      } finally {
        await h.terminate('test over').catch(() => {});
      }
    },
  );

  it(
    'without requireDistinctApprover at start the starter approves their own move (the CLI refuses it once its config requires another); retire --yes does not ask',
    { timeout: 300_000 },
    async () => {
      const tenant = await H.newTenant('shard-a', 'rail');
      await H.seed(tenant, 10, 0);
      const started = await cli([
        'move',
        'start',
        '--tenant',
        tenant,
        '--to',
        'shard-b',
        '--approve-cutover',
        'manual',
        '--soak',
        '1h',
        '--yes',
        '--actor',
        'alice',
      ]);
      expect(started.code, started.stderr).toBe(0);
      const h = env.t.client.workflow.getHandle(moveWorkflowId(tenant));
      try {
        await H.waitFor(h, (s) => s.awaitingApproval, 120_000);
        // Turned on after the move started: the workflow would accept, the CLI's config refuses.
        const strictSelf = await cli(['move', 'approve', tenant, '--actor', 'alice'], { strict: true });
        expect(strictSelf.code, strictSelf.stderr).toBe(4);
        expect(strictSelf.stderr).toContain('approve refused: separation of duties (approvals.requireDistinctApprover): alice started this move');
        expect((await H.waitFor(h, () => true)).awaitingApproval).toBe(true);
        const self = await cli(['move', 'approve', tenant, '--actor', 'alice']);
        expect(self.code, self.stderr).toBe(0);
        await H.waitPhase(h, 'soak', 120_000);
        const retired = await cli(['move', 'retire', tenant, '--actor', 'alice', '--yes']);
        expect(retired.code, retired.stderr).toBe(0);
        expect(retired.stderr).toBe('');
        const done = await H.waitPhase(h, 'done', 120_000);
        expect(done.operators).toMatchObject({ startedBy: 'alice', approvedBy: 'alice', retiredBy: 'alice' });
        expect(await H.rowCount('shard-a', tenant)).toBe(0);
      } finally {
        await h.terminate('test over').catch(() => {});
      }
    },
  );
});
