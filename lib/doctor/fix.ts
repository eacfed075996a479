// `shardctl doctor --fix <id>`: the only repairs doctor makes, each on one finding named
// explicitly, re-judged from fresh facts, and re-checked against Temporal's strongly consistent
// describe immediately before it acts. Dropping a slot also requires it to be inactive in the same
// statement, so a walsender that attached meanwhile keeps it. Each repair is in the audit log.
import type { Pool } from 'pg';
import type { Client } from '@temporalio/client';
import { ShardctlError } from '../errors';
import { listPlacements, getPlacement, compareAndSetPlacement } from '../directory/placements';
import { unfreeze } from '../shard/fence';
import { releaseReservation } from '../directory/reservations';
import { inDirectoryTransaction } from '../directory/db';
import { likeRegExp, type Finding } from './findings';
import { replicationNamePattern } from '../ids';
import { moveIsRunning } from './facts';
import type { Connections } from '../connections';

export interface FixContext {
  conns: Connections;
  client: Client;
  actor: string;
}

/** Units of the directory whose moves could have produced `name` (a readable prefix of the unit). */
async function unitsThatCouldOwn(dir: Pool, name: string): Promise<string[]> {
  const { placements } = await listPlacements(dir);
  return placements.map((p) => p.unit).filter((u) => likeRegExp(replicationNamePattern(`${u}.e`)).test(name));
}

async function refuseIfAnyMoveRuns(ctx: FixContext, name: string): Promise<void> {
  for (const unit of await unitsThatCouldOwn(ctx.conns.directoryPool(), name)) {
    if (await moveIsRunning(ctx.client, unit)) {
      throw new ShardctlError('Conflict', `refusing: a move of ${unit} is running now and could own ${name}; run \`shardctl doctor\` again`);
    }
  }
}

async function audit(ctx: FixContext, action: string, unit: string | null, detail: Record<string, unknown>) {
  await ctx.conns
    .directoryPool()
    .query('insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, $2, $3, $4, $5)', [
      ctx.actor,
      action,
      unit,
      JSON.stringify(detail),
      'shardctl doctor --fix',
    ]);
}

/** Applies the fix of `f` (a finding of a fresh run, autoFix true). Returns what it did. */
export async function applyFix(ctx: FixContext, f: Finding): Promise<string> {
  if (!f.autoFix) throw new ShardctlError('PreconditionFailed', `${f.id} is not fixed automatically: ${f.fix}`);
  switch (f.kind) {
    case 'orphaned-slot': {
      await refuseIfAnyMoveRuns(ctx, f.object!);
      const r = await ctx.conns
        .shardPool(f.shard!)
        .query('select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = $1 and not active', [f.object]);
      if (r.rowCount === 0)
        throw new ShardctlError('Conflict', `refusing: slot ${f.object} on ${f.shard} is active now (or gone); run \`shardctl doctor\` again`);
      await audit(ctx, 'doctor.drop-slot', null, { shard: f.shard, slot: f.object, retainedBytes: f.retainedBytes ?? null });
      return `dropped replication slot ${f.object} on ${f.shard}`;
    }
    case 'orphaned-publication': {
      await refuseIfAnyMoveRuns(ctx, f.object!);
      // The name matched our pattern ([a-z0-9_] only), so quoting it as an identifier is exact.
      await ctx.conns.shardPool(f.shard!).query(`drop publication if exists "${f.object!.replace(/"/g, '""')}"`);
      await audit(ctx, 'doctor.drop-publication', null, { shard: f.shard, publication: f.object });
      return `dropped publication ${f.object} on ${f.shard}`;
    }
    case 'frozen-without-move': {
      const unit = f.unit!;
      if (await moveIsRunning(ctx.client, unit)) throw new ShardctlError('Conflict', `refusing: a move of ${unit} is running now; it owns the freeze`);
      const dir = ctx.conns.directoryPool();
      const p = await getPlacement(dir, unit);
      if (!p || p.state !== 'moving' || !p.moveId)
        throw new ShardctlError('Conflict', `refusing: ${unit} is no longer frozen in the directory; run \`shardctl doctor\` again`);
      // Exactly this freeze (shard, epoch, move, token): a freeze made meanwhile is not ours to lift.
      const cas = await compareAndSetPlacement(
        dir,
        unit,
        { shard: p.shard, epoch: p.epoch, state: 'moving', moveId: p.moveId, freezeToken: p.freezeToken ?? null },
        { shard: p.shard, state: 'active', moveId: null },
        {
          actor: ctx.actor,
          action: 'doctor-unfreeze',
          reason: 'shardctl doctor --fix: no move workflow runs for the frozen unit',
          detail: { moveId: p.moveId },
        },
      );
      if (!cas.ok)
        throw new ShardctlError('Conflict', `refusing: the directory changed under the fix (${JSON.stringify(cas.current)}); run \`shardctl doctor\` again`);
      const u = await unfreeze(ctx.conns.shardPool(p.shard), unit, p.epoch, p.freezeToken ? [p.freezeToken] : undefined);
      return `unfroze ${unit} on ${p.shard} at epoch ${p.epoch} (directory active${u.ok ? ', fence open' : `; the fence was not lowered: ${JSON.stringify(u.current)}`})`;
    }
    case 'stale-reservation': {
      const unit = f.unit!;
      // Describe, not visibility: a move of the unit running now may be the one that holds it.
      if (await moveIsRunning(ctx.client, unit))
        throw new ShardctlError('Conflict', `refusing: a move of ${unit} is running now and may hold reservation ${f.object}; run \`shardctl doctor\` again`);
      const dir = ctx.conns.directoryPool();
      const p = await getPlacement(dir, unit);
      if (p?.state === 'moving' && p.moveId === f.object)
        throw new ShardctlError('Conflict', `refusing: ${unit} is still frozen by move ${f.object}; fix frozen-without-move:${unit} first`);
      const released = await inDirectoryTransaction(dir, (c) =>
        releaseReservation(c, f.object!, { actor: ctx.actor, reason: 'shardctl doctor --fix: no move workflow runs for the reservation' }),
      );
      if (!released) throw new ShardctlError('Conflict', `refusing: reservation ${f.object} is no longer open; run \`shardctl doctor\` again`);
      return `released the headroom reservation of move ${f.object} (${unit})`;
    }
    default:
      throw new ShardctlError('PreconditionFailed', `${f.id} is not fixed automatically: ${f.fix}`);
  }
}
