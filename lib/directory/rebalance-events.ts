// The audit entries of a rebalance run's operator verbs (start, pause, resume, cancel), as
// `rebalance.<verb>` rows of the directory's append-only audit log. `idem` (derived from the
// activity execution) makes a redelivered event a no-op instead of a second row.
import type { Pool } from 'pg';
import { inDirectoryTransaction } from './db';

export interface RebalanceEvent {
  /** start, pause, resume or cancel */
  action: string;
  actor: string;
  reason?: string;
  workflowId: string;
  /** The run's scope: the isolated tenant is the entry's unit; a rebalance or drain is fleet-wide. */
  scope: { kind: string; shard?: string; tenant?: string; to?: string };
  detail?: Record<string, unknown>;
}

export async function recordRebalanceEvent(pool: Pool, e: RebalanceEvent, idem: string | null): Promise<void> {
  await inDirectoryTransaction(pool, (db) =>
    db.query(
      `insert into shardctl.audit(actor, action, unit, detail, reason, idem) values ($1, $2, $3, $4, $5, $6)
       on conflict (idem) where idem is not null do nothing`,
      [
        e.actor,
        `rebalance.${e.action}`,
        e.scope.kind === 'isolate' ? (e.scope.tenant ?? null) : null,
        JSON.stringify({ workflowId: e.workflowId, scope: e.scope, ...(e.detail ?? {}) }),
        e.reason ?? null,
        idem,
      ],
    ),
  );
}
