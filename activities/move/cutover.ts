// cutover: freeze the owner, apply to the fence watermark, copy the final blob delta, compare
// fingerprints, then switch ownership — as ONE activity so the write pause is not stretched by
// round trips through Temporal. It is idempotent from the directory and fence state it finds,
// and fails closed: before the switch any overrun or mismatch unfreezes and returns a reason;
// after the directory compare-and-set the switch is done and is only completed, never undone.
import { shardByName } from '../../lib/config';
import { z } from 'zod';
import type { Deps } from '../../worker/deps';
import { moveRef, tenantTables, beat, parse, typed, syncUnitBlobs } from './context';
import { ends } from './data';
import { replicationNames } from '../../lib/ids';
import { getPlacement, compareAndSetPlacement } from '../../lib/directory/placements';
import { setUnitFence } from '../../lib/shard/fence';
import { applyChangesUntil, currentWalLsn } from '../../lib/cdc';
import { fingerprintUnit, fingerprintDiff } from '../../lib/cutover/checksum';

const cutoverInput = moveRef.extend({
  direction: z.enum(['forward', 'reverse']),
  /** The epoch the current owner holds; the switch makes it epoch + 1. */
  epoch: z.number().int().positive(),
  fenceBudgetMs: z.number().int().positive(),
  actor: z.string().min(1),
});

export type CutoverResult =
  | { ok: true; newEpoch: number; pauseMs: number; fenceLsn: string; alreadyDone: boolean; steps?: Record<string, number> }
  | { ok: false; reason: string; pauseMs: number; mismatches: string[] };

/**
 * The write pause as the directory saw it: from the last freeze to the switch of this move, both
 * stamped by the directory's clock. Unlike a timer in one attempt, it includes any time the unit
 * stayed frozen because a worker died mid-cutover.
 */
async function measuredPauseMs(deps: Deps, unit: string, moveId: string, switchAction: string): Promise<number | null> {
  const r = await deps.directoryPool().query(
    `select round(extract(epoch from (max(at) filter (where action = $3) - max(at) filter (where action = 'freeze'))) * 1000)::bigint as ms
       from shardctl.audit where unit = $1 and detail->>'moveId' = $2 and action in ('freeze', $3)`,
    [unit, moveId, switchAction],
  );
  const ms = r.rows[0]?.ms;
  return ms === null || ms === undefined ? null : Number(ms);
}

export function createCutoverActivities(deps: Deps) {
  const col = deps.config.tenant.column;

  /**
   * Aborts a cutover before the switch. The directory goes first (moving -> active, only for
   * this move): if another delivery already switched, the old owner must stay fenced, so the
   * fence is lowered only after that compare-and-set, and only from the state this move set.
   */
  async function unfreeze(ref: z.infer<typeof cutoverInput>, owner: string, next: string, why: string): Promise<'unfrozen' | 'switched' | 'lost'> {
    const cas = await compareAndSetPlacement(
      deps.directoryPool(),
      ref.unit,
      { shard: owner, epoch: ref.epoch, state: 'moving', moveId: ref.moveId },
      { shard: owner, state: 'active', moveId: null },
      { actor: ref.actor, action: 'unfreeze', reason: why, detail: { moveId: ref.moveId } },
    );
    if (!cas.ok) {
      const cur = cas.current;
      if (cur && cur.shard === next && cur.epoch === ref.epoch + 1) return 'switched';
      if (!(cur && cur.shard === owner && cur.epoch === ref.epoch && cur.state === 'active')) return 'lost';
    }
    await setUnitFence(deps.shardPool(owner), { unit: ref.unit, epoch: ref.epoch, owned: true, frozen: false }, { expect: { epoch: ref.epoch, owned: true } });
    return 'unfrozen';
  }

  /** An aborted attempt's answer; if a concurrent delivery switched meanwhile, that is the answer. */
  async function abort(ref: z.infer<typeof cutoverInput>, owner: string, next: string, reason: string, t0: number, mismatches: string[] = []): Promise<CutoverResult> {
    const u = await unfreeze(ref, owner, next, reason);
    if (u === 'switched') {
      return { ok: true, newEpoch: ref.epoch + 1, pauseMs: Date.now() - t0, fenceLsn: '', alreadyDone: true };
    }
    return { ok: false, reason: u === 'lost' ? `${reason}; and the directory changed under the move (left frozen, fail closed)` : reason, pauseMs: Date.now() - t0, mismatches };
  }

  return {
    async cutover(input: z.infer<typeof cutoverInput>): Promise<CutoverResult> {
      const ref = parse(cutoverInput, input);
      return typed(async () => {
        const { from: owner, to: next } = ends(ref, ref.direction);
        const switchAction = ref.direction === 'forward' ? 'switch' : 'rollback-switch';
        const dir = deps.directoryPool();
        const newEpoch = ref.epoch + 1;
        const p = await getPlacement(dir, ref.unit);
        if (!p) return { ok: false as const, reason: `unit ${ref.unit} vanished from the directory`, pauseMs: 0, mismatches: [] };
        if (p.shard === next && p.epoch === newEpoch) {
          // Redelivered after the switch committed: finish the owner's side and report done.
          await setUnitFence(deps.shardPool(owner), { unit: ref.unit, epoch: newEpoch, owned: false, frozen: false });
          const pauseMs = (await measuredPauseMs(deps, ref.unit, ref.moveId, switchAction)) ?? 0;
          return { ok: true as const, newEpoch, pauseMs, fenceLsn: '', alreadyDone: true };
        }
        const mine = p.shard === owner && p.epoch === ref.epoch && (p.state === 'active' || p.moveId === ref.moveId);
        if (!mine) {
          return { ok: false as const, reason: `directory changed under the move: ${p.unit} is ${p.state} on ${p.shard} at epoch ${p.epoch} (move ${p.moveId ?? '-'})`, pauseMs: 0, mismatches: [] };
        }
        const syncBlobs = () => syncUnitBlobs(deps, owner, next, ref.unit, { hashUnchanged: false });
        // Blobs first, before the freeze: the delta under the fence is then only what arrived in
        // the last moments, not everything since validation.
        if (p.state === 'active') await syncBlobs();
        const t0 = Date.now();
        const over = () => Date.now() - t0 > ref.fenceBudgetMs;
        // Where the write pause goes: ms since the freeze at the end of each step.
        const steps: Record<string, number> = {};
        const mark = (name: string) => (steps[name] = Date.now() - t0);
        if (p.state === 'active') {
          const cas = await compareAndSetPlacement(
            dir,
            ref.unit,
            { shard: owner, epoch: ref.epoch, state: 'active' },
            { shard: owner, state: 'moving', moveId: ref.moveId },
            { actor: ref.actor, action: 'freeze', detail: { moveId: ref.moveId, direction: ref.direction } },
          );
          const c = cas.ok ? undefined : cas.current;
          // Another delivery of this same move froze it first: that freeze is ours too.
          const ours = c && c.shard === owner && c.epoch === ref.epoch && c.state === 'moving' && c.moveId === ref.moveId;
          if (!cas.ok && !ours) return { ok: false as const, reason: `lost the race to freeze ${ref.unit}: ${JSON.stringify(cas.current)}`, pauseMs: 0, mismatches: [] };
        }
        // Raise the fence: returns once every in-flight writer of the unit has finished. A writer
        // holding its transaction open past the budget makes us back off, never wait open-ended.
        try {
          await setUnitFence(deps.shardPool(owner), { unit: ref.unit, epoch: ref.epoch, owned: true, frozen: true }, { lockTimeoutMs: ref.fenceBudgetMs });
        } catch (e: any) {
          if (e?.code !== '55P03') throw e;
          return abort(ref, owner, next, `in-flight writers of ${ref.unit} held the fence lock longer than the budget of ${ref.fenceBudgetMs} ms`, t0);
        }
        mark('fenced');
        await deps.faultPoint(ref.direction === 'forward' ? 'after-fence-raised' : 'mid-rollback');
        const fenceLsn = await currentWalLsn(deps.shardPool(owner));
        const names = replicationNames(ref.moveId, ref.direction);
        const ownerShard = shardByName(deps.config, owner);
        const applied = await applyChangesUntil({
          sourceDsn: ownerShard.dsn,
          target: deps.shardPool(next),
          ...names,
          moveId: ref.moveId,
          stream: ref.direction,
          untilLsn: fenceLsn,
          maxDurationMs: Math.max(200, ref.fenceBudgetMs - (Date.now() - t0)),
          maxTxBytes: deps.config.limits.applyMaxTxBytes,
        });
        mark('applied');
        beat({ step: 'applied', appliedLsn: applied.appliedLsn });
        if (!applied.caughtUp) {
          return abort(ref, owner, next, `final catch-up did not reach ${fenceLsn} within the fence budget of ${ref.fenceBudgetMs} ms`, t0);
        }
        // The final blob delta and the row fingerprints are independent: run them side by side.
        const tables = await tenantTables(deps, owner);
        const [, a, b] = await Promise.all([
          syncBlobs().then(() => mark('blobs')),
          fingerprintUnit(deps.shardPool(owner), tables, col, ref.unit),
          fingerprintUnit(deps.shardPool(next), tables, col, ref.unit),
        ]);
        mark('compared');
        const diff = fingerprintDiff(a, b);
        if (diff.length) {
          return abort(ref, owner, next, `target differs from source at the fence: ${diff.join('; ')}`, t0, diff);
        }
        if (ref.direction === 'forward') {
          // Reverse replication (target -> source) starts here: everything the target committed so
          // far came from the source; only writes after the switch must flow back.
          const lsn = await currentWalLsn(deps.shardPool(next));
          await deps.shardPool(owner).query(
            `insert into shardctl.move_progress(move_id, stream, lsn, detail) values ($1, 'reverse', $2, '{"startedAtSwitch":true}')
             on conflict (move_id, stream) do update set lsn = greatest(shardctl.move_progress.lsn, excluded.lsn), updated_at = now()`,
            [ref.moveId, lsn],
          );
        }
        if (over()) {
          return abort(ref, owner, next, `fence took longer than its budget of ${ref.fenceBudgetMs} ms; unfenced, will retry`, t0);
        }
        await deps.faultPoint('before-switch');
        // Point of no return: the new owner accepts the new epoch, then the directory moves.
        await setUnitFence(deps.shardPool(next), { unit: ref.unit, epoch: newEpoch, owned: true, frozen: false });
        const cas = await compareAndSetPlacement(
          dir,
          ref.unit,
          { shard: owner, epoch: ref.epoch, state: 'moving' },
          { shard: next, state: 'active', moveId: null },
          { actor: ref.actor, action: switchAction, detail: { moveId: ref.moveId, from: owner, to: next, fenceLsn } },
        );
        if (!cas.ok) {
          const cur = cas.current;
          if (!(cur && cur.shard === next && cur.epoch === newEpoch)) {
            // Someone else changed the placement (e.g. a concurrent delivery aborted and unfroze):
            // take back the target's acceptance, then fail; the next delivery decides afresh.
            await setUnitFence(deps.shardPool(next), { unit: ref.unit, epoch: newEpoch, owned: false, frozen: false });
            throw new Error(`switch compare-and-set lost: directory shows ${JSON.stringify(cur)}; ${ref.unit} stays frozen on ${owner}`);
          }
        }
        await deps.faultPoint('after-switch-before-directory-notify');
        const pauseMs = mark('switched');
        await setUnitFence(deps.shardPool(owner), { unit: ref.unit, epoch: newEpoch, owned: false, frozen: false });
        // A resumed cutover (the unit was already frozen when this attempt began) reports the
        // whole pause since the freeze, not just this attempt's share.
        const total = p.state === 'moving' ? await measuredPauseMs(deps, ref.unit, ref.moveId, switchAction) : null;
        return { ok: true as const, newEpoch, pauseMs: total ?? pauseMs, fenceLsn, alreadyDone: false, steps };
      });
    },
  };
}
