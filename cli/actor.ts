// Who a CLI verb acts as, for the audit log: `--actor`, else $SHARDCTL_ACTOR, else the login name.
// Declared, not authenticated (README "Separation of duties"); one definition so every verb agrees.
import os from 'node:os';

export const actorDefault = () => process.env.SHARDCTL_ACTOR || process.env.USER || os.userInfo().username || 'cli';

/** The operator of a verb from its `--actor` / `--reason` options. */
export function operatorOf(o: { actor?: string; reason?: string }): { actor: string; reason?: string } {
  return { actor: o.actor || actorDefault(), reason: o.reason };
}
