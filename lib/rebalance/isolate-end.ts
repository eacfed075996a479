// What a `tenant isolate` that did not finish (cancelled, or failed) does with the dedication it made. Pure (no I/O): the facts
// are read from the directory under the shard's row lock (lib/directory/shards.ts). Fails closed:
// the dedication is undone only when this run made it, it still names the tenant, nothing moves
// onto or off the shard, and the isolation has not taken hold (the tenant never got there, or no
// other unit was moved off it yet). Otherwise it stays, and the verdict says exactly why and how
// to undo it by hand.

export interface IsolateEndFacts {
  shard: string;
  tenant: string;
  /** Whether this run set the dedication (it was not dedicated to the tenant before). */
  dedicatedByRun: boolean;
  /** The shard's dedication now (null: shared). */
  dedicatedTo: string | null;
  /** The tenant's placement now; undefined when it is not in the directory. */
  tenantAt?: { shard: string; state: string };
  /** Units other than the tenant placed on the shard now. */
  othersOnShard: string[];
  /** Units this run's moves took from the shard that the directory no longer places there. */
  movedOff: string[];
  /** Moves onto or off the shard that have not ended, as text. */
  inFlight: string[];
}

export type IsolateEndVerdict = { undo: true; why: string } | { undo: false; state: string[]; undoCommand: string };

const list = (xs: string[]) => `${xs.slice(0, 5).join(', ')}${xs.length > 5 ? `, ... (${xs.length})` : ''}`;

export const undedicateCommand = (shard: string) => `shardctl shards undedicate ${shard}`;

export function judgeIsolateEnd(f: IsolateEndFacts): IsolateEndVerdict {
  const { shard, tenant } = f;
  const keep = (...state: string[]): IsolateEndVerdict => ({ undo: false, state, undoCommand: undedicateCommand(shard) });
  if (f.dedicatedTo !== tenant)
    return {
      undo: false,
      state: [`${shard} is ${f.dedicatedTo ? `dedicated to ${f.dedicatedTo}` : 'shared'} now, changed outside this run: left as it is`],
      undoCommand: undedicateCommand(shard),
    };
  if (!f.dedicatedByRun) return keep(`${shard} was dedicated to ${tenant} before this run: left dedicated`);
  if (f.inFlight.length) return keep(`${shard} stays dedicated to ${tenant}: move(s) onto or off it have not ended: ${list(f.inFlight)}`);
  if (!f.tenantAt) return keep(`${shard} stays dedicated to ${tenant}: ${tenant} is not in the directory`);
  if (f.tenantAt.state !== 'active') return keep(`${shard} stays dedicated to ${tenant}: ${tenant} is ${f.tenantAt.state} on ${f.tenantAt.shard}`);
  if (f.tenantAt.shard !== shard) return { undo: true, why: `${tenant} never got to ${shard} (it is on ${f.tenantAt.shard})` };
  if (f.othersOnShard.length === 0) return keep(`${shard} stays dedicated to ${tenant}: the isolation is complete (${tenant} alone on ${shard})`);
  if (f.movedOff.length === 0) return { undo: true, why: `nothing was moved off ${shard} yet (${f.othersOnShard.length} other unit(s) still there)` };
  return keep(
    `${shard} stays dedicated to ${tenant}, half isolated: moved off ${list(f.movedOff)}; still there ${list(f.othersOnShard)}`,
    `the next \`shardctl rebalance start\` moves the rest off (nothing but ${tenant} may stay on a shard dedicated to it)`,
  );
}
