// cancel, rollback clean-up, retire and the move record. Deleting is irreversible, so each
// deleting step re-checks, against the directory and the fences, that the side it deletes is
// not the owner, immediately before it deletes.
import { z } from 'zod';
import type { Deps } from '../deps';
import { moveRef, rowsOf, unitTables, hasBlobs, parse, typed, beat, activityKey, shardBucket } from './context';
import { ends } from './data';
import { replicationNames } from '../../lib/ids';
import { ShardctlError } from '../../lib/errors';
import { getPlacement, compareAndSetPlacement } from '../../lib/directory/placements';
import { getUnitFence, unfreeze, forgetUnownedFence } from '../../lib/shard/fence';
import { forgetMoveProgress } from '../../lib/cdc/progress';
import { evictApplySessions, applyLockKey } from '../../lib/cdc/apply-lock';
import { unownedWritesSinceDisown } from '../../lib/shard/write-audit';
import { recordMoveEvent } from '../../lib/directory/moves';
import { dropPublicationAndSlot } from '../../lib/cdc';
import { deleteTenantRows } from '../../lib/copy';
import { deleteBlobPrefix, unitBlobPrefix, deleteManifest, listBlobs, loadLedger, forgetLedger, outOfBandObjects, assertMayDelete } from '../../lib/blobs';
import { isVersionKey } from '../../lib/blobs/index-table';

const withEpoch = moveRef.extend({ epoch: z.number().int().positive(), actor: z.string().min(1) });
const dropInput = moveRef.extend({ direction: z.enum(['forward', 'reverse']) });
const eventInput = z.object({
  moveId: z.string().min(1),
  unit: z.string().min(1),
  source: z.string(),
  target: z.string(),
  workflowId: z.string().min(1),
  action: z.string().min(1),
  actor: z.string().min(1),
  status: z.string().min(1),
  reason: z.string().optional(),
  detail: z.record(z.unknown()).optional(),
});

export function createLifecycleActivities(deps: Deps) {
  async function dropReplicationOf(ref: z.infer<typeof moveRef>, direction: 'forward' | 'reverse') {
    const { from } = ends(ref, direction);
    const names = replicationNames(ref.moveId, direction);
    await dropPublicationAndSlot(deps.shardPool(from), names);
    const m = deps.metrics;
    if (m) {
      m.slotRetainedBytes.remove({ slot: names.slot });
      m.lagBytes.remove({ unit: ref.unit, direction });
      m.lagSeconds.remove({ unit: ref.unit, direction });
    }
  }

  /** Removes the unit's copy from `side` — only ever a side that does not own the unit. */
  async function deleteCopy(ref: z.infer<typeof moveRef>, side: string, faultName?: string) {
    const p = await getPlacement(deps.directoryPool(), ref.unit);
    const fence = await getUnitFence(deps.shardPool(side), ref.unit);
    if (!p || p.shard === side || fence?.owned) {
      throw new ShardctlError(
        'PreconditionFailed',
        `refusing to delete ${ref.unit} on ${side}: it is the owner (directory ${p?.shard ?? 'missing'}, fence owned=${fence?.owned})`,
      );
    }
    // Before anything is deleted: this side's bucket is its own and the owner's is another one.
    await assertMayDelete(shardBucket(deps, side), shardBucket(deps, p.shard), `delete the copy of ${ref.unit} on ${side}`);
    const pool = deps.shardPool(side);
    const rows = await rowsOf(deps, ref.unit);
    const tables = await unitTables(deps, side, rows);
    // Only the unit's rows: its predicate (lib/unit-rows.ts), a tenant's or a bucket's.
    await deleteTenantRows({
      pool,
      tables,
      tenantColumn: rows.column,
      unit: rows.value,
      batchRows: deps.config.limits.copyBatchRows,
      onBatch: faultName ? () => deps.faultPoint(faultName) : undefined,
    });
    // The owner's bucket is proven (by the identity markers) not to be this one before any batch.
    if (hasBlobs(ref.unit)) {
      await deleteBlobPrefix(shardBucket(deps, side), unitBlobPrefix(ref.unit), { owner: shardBucket(deps, p.shard) });
      await forgetLedger(pool, ref.unit);
    }
    await forgetMoveProgress(pool, ref.moveId);
    await deleteManifest(pool, ref.moveId);
  }

  /**
   * Objects of the unit in `side`'s bucket that differ from what shardctl left there (its blob
   * ledger): written, changed or deleted behind its back since `side` stopped owning the unit.
   * Returns a refusal an operator can act on, or undefined.
   */
  async function blobsWrittenOutsideShardctl(ref: z.infer<typeof moveRef>, side: string, verb: string): Promise<string | undefined> {
    if (!hasBlobs(ref.unit)) return undefined;
    const b = shardBucket(deps, side);
    const [listing, ledger] = await Promise.all([listBlobs(b.s3, b.bucket, unitBlobPrefix(ref.unit)), loadLedger(deps.shardPool(side), ref.unit)]);
    if (ledger.size === 0) return undefined; // never synced through the ledger: nothing to compare with
    // Version objects of the blob index are left out: an acknowledged one has its index row, which
    // moved with the rows and was validated, and an unreferenced one (a put refused by the fence, a
    // version superseded after the last whole-prefix sync) is garbage, never a write to keep.
    const odd = outOfBandObjects(
      listing.filter((e) => !isVersionKey(e.key)),
      new Map([...ledger].filter(([key]) => !isVersionKey(key))),
    );
    if (odd.length === 0) return undefined;
    const shown = odd
      .slice(0, 5)
      .map((o) => `${o.key} ${o.change}`)
      .join('; ');
    return (
      `refusing to ${verb}: ${odd.length} object(s) of ${ref.unit} in bucket ${b.bucket} of ${side} were written, changed or deleted outside shardctl after it stopped owning the unit (${shown}); ` +
      `reconcile them with the owner, then accept the bucket as it is with \`delete from shardctl.blob_ledger where unit = '${ref.unit}'\` on ${side}, and ${verb} again`
    );
  }

  return {
    async dropReplication(input: z.infer<typeof dropInput>): Promise<void> {
      const ref = parse(dropInput, input);
      await typed(() => dropReplicationOf(ref, ref.direction));
    },

    /** Undo everything before the switch; the source ends exactly as it was. */
    async cancelMove(input: z.infer<typeof withEpoch>): Promise<{ cleaned: true }> {
      const ref = parse(withEpoch, input);
      return typed(async () => {
        const dir = deps.directoryPool();
        const p = await getPlacement(dir, ref.unit);
        if (p && p.shard === ref.target) {
          throw new ShardctlError('PreconditionFailed', `cannot cancel: ${ref.unit} already switched to ${ref.target} (epoch ${p.epoch}); use rollback`);
        }
        if (p && p.state === 'moving' && p.moveId === ref.moveId) {
          // The directory first, then the fence: a fence is never lowered while the directory
          // could still be (or become) switched by a concurrent cutover delivery.
          const cas = await compareAndSetPlacement(
            dir,
            ref.unit,
            { shard: ref.source, epoch: ref.epoch, state: 'moving', moveId: ref.moveId },
            { shard: ref.source, state: 'active', moveId: null },
            { actor: ref.actor, action: 'cancel-unfreeze', detail: { moveId: ref.moveId } },
          );
          if (!cas.ok && cas.current?.shard === ref.target) {
            throw new ShardctlError('PreconditionFailed', `cannot cancel: ${ref.unit} switched to ${ref.target} meanwhile; use rollback`);
          }
        }
        const now = await getPlacement(dir, ref.unit);
        if (now && now.shard === ref.source && now.epoch === ref.epoch && now.state === 'active') {
          // Unfreeze so the tenant's writes resume at once; then clean up at leisure.
          await unfreeze(deps.shardPool(ref.source), ref.unit, ref.epoch);
        }
        await dropReplicationOf(ref, 'forward');
        await dropReplicationOf(ref, 'reverse');
        // A cancelled move is no longer live: its copy progress and a blocking validation's
        // mismatches would otherwise stay on the page (and keep an alert firing) until they expire.
        const m = deps.metrics;
        m?.forgetMove(ref.unit, [m.tableRowsCopied, m.validationMismatches]);
        await deps.faultPoint('mid-cancel');
        await deleteCopy(ref, ref.target);
        // The source stays the owner: what the syncs recorded of its bucket is no longer needed.
        await forgetLedger(deps.shardPool(ref.source), ref.unit);
        await forgetUnownedFence(deps.shardPool(ref.target), ref.unit);
        await forgetMoveProgress(deps.shardPool(ref.source), ref.moveId);
        return { cleaned: true as const };
      });
    },

    /** After a rollback switched the unit back to the source: remove the target's stale copy. */
    async cleanupAfterRollback(input: z.infer<typeof withEpoch>): Promise<{ cleaned: true }> {
      const ref = parse(withEpoch, input);
      return typed(async () => {
        await dropReplicationOf(ref, 'forward');
        await dropReplicationOf(ref, 'reverse');
        // The target owned the unit during soak: an upload that reached it after the switch back is kept.
        const odd = await blobsWrittenOutsideShardctl(ref, ref.target, 'clean up after the rollback');
        if (odd) throw new ShardctlError('PreconditionFailed', odd);
        await deleteCopy(ref, ref.target);
        await forgetLedger(deps.shardPool(ref.source), ref.unit);
        await forgetMoveProgress(deps.shardPool(ref.source), ref.moveId);
        return { cleaned: true as const };
      });
    },

    /** The only irreversible step: delete the source copy after soak (or an explicit retire now). */
    async retireSource(input: z.infer<typeof withEpoch>): Promise<{ retired: true }> {
      const ref = parse(withEpoch, input);
      return typed(
        async () => {
          const p = await getPlacement(deps.directoryPool(), ref.unit);
          if (!p || p.shard !== ref.target || p.epoch !== ref.epoch || p.state !== 'active') {
            throw new ShardctlError(
              'PreconditionFailed',
              `refusing to retire: directory shows ${p ? `${p.shard} epoch ${p.epoch} ${p.state}` : 'no placement'}, expected ${ref.target} epoch ${ref.epoch} active`,
            );
          }
          const f = await getUnitFence(deps.shardPool(ref.source), ref.unit);
          if (!f || f.owned || f.epoch > ref.epoch) {
            throw new ShardctlError(
              'PreconditionFailed',
              `refusing to retire: the source fence is ${JSON.stringify(f)}; it must refuse the unit at epoch ${ref.epoch}`,
            );
          }
          // Writes that bypassed the fence on the source since it stopped owning the unit.
          // A sub-unit's rows are audited as its tenant's (no checked unit in a replica session).
          const written = await unownedWritesSinceDisown(deps.shardPool(ref.source), ref.unit, (await rowsOf(deps, ref.unit)).subUnit?.tenant);
          if (written.count > 0) {
            throw new ShardctlError(
              'PreconditionFailed',
              `refusing to retire: ${written.count} writes reached the source copy of ${ref.unit} outside shardctl after the switch (e.g. by ${written.example || 'unknown'}); reconcile them, clear shardctl.unowned_writes for the unit on ${ref.source}, then retire again — or roll back`,
            );
          }
          // Objects that reached the source's bucket behind shardctl's back after the switch (a late
          // upload, a delete): the bucket differs from what the syncs left there.
          beat({ step: 'check the source copy was not written' });
          const oddBlobs = await blobsWrittenOutsideShardctl(ref, ref.source, 'retire');
          if (oddBlobs) throw new ShardctlError('PreconditionFailed', oddBlobs);
          // Stop reverse replication first: nothing may write the source copy while it is deleted.
          // Dropping the slot stops the stream; evicting the apply session rolls back whatever a
          // late applier still holds open, and without its slot it cannot start again.
          beat({ step: 'stop replication' });
          await dropReplicationOf(ref, 'reverse');
          await evictApplySessions(deps.shardPool(ref.source), applyLockKey(ref.moveId, 'reverse'));
          await dropReplicationOf(ref, 'forward');
          beat({ step: 'delete rows, blobs and jobs' });
          await deleteCopy(ref, ref.source, 'mid-retire');
          await forgetLedger(deps.shardPool(ref.target), ref.unit);
          await forgetMoveProgress(deps.shardPool(ref.target), ref.moveId);
          // The source keeps its fence row (owned = false): a tombstone that still refuses stale routers.
          return { retired: true as const };
        },
        { doing: `retire: delete ${ref.unit}'s copy on ${ref.source}` },
      );
    },

    /** Move record and audit entry in the directory (operator identities live here). */
    async recordMoveEvent(input: z.infer<typeof eventInput>): Promise<void> {
      const e = parse(eventInput, input);
      await recordMoveEvent(deps.directoryPool(), e, activityKey());
    },
  };
}
