// Reading the directory's append-only audit log (shardctl.audit) for `shardctl audit`. Only
// selects: callers pass a read-only session, so reading the evidence can never change it. The
// window is measured on the directory's own clock, the one that stamped the entries.
import { onDirectory, poolDsn, type Queryable } from './db';

/** One audit entry as `shardctl audit --json` prints it (a stable shape: fields are only ever added). */
export interface AuditEntry {
  id: number;
  /** ISO 8601, UTC, the directory's clock. */
  at: string;
  actor: string;
  /** e.g. `move.start`, `move.throttle`, `shard.status`, `reservation.take`, `freeze`, `switch`. */
  action: string;
  /** The tenant (routing unit) it concerns; null for fleet-wide entries (shards). */
  unit: string | null;
  reason: string | null;
  detail: Record<string, unknown>;
}

export interface AuditQuery {
  unit?: string;
  /** Only entries stamped at most this long ago (directory clock). */
  sinceMs: number;
  /** At most this many entries: the newest ones. */
  limit: number;
}

export interface AuditPage {
  entries: AuditEntry[];
  /** True when more entries matched than `limit`: the oldest were left out. */
  truncated: boolean;
}

/** Entries matching `q`, oldest first (newest last), at most `q.limit` of the newest. */
export async function readAudit(db: Queryable, q: AuditQuery): Promise<AuditPage> {
  const r = await onDirectory(
    () =>
      db.query(
        `select id, at, actor, action, unit, reason, detail from shardctl.audit
          where at >= now() - make_interval(secs => $1::double precision / 1000)
            and ($2::text is null or unit = $2)
          order by at desc, id desc limit $3`,
        [q.sinceMs, q.unit ?? null, q.limit + 1],
      ),
    poolDsn(db),
  );
  const rows = r.rows.slice(0, q.limit).reverse();
  return {
    truncated: r.rows.length > q.limit,
    entries: rows.map((x) => ({
      id: Number(x.id),
      at: new Date(x.at).toISOString(),
      actor: x.actor,
      action: x.action,
      unit: x.unit ?? null,
      reason: x.reason ?? null,
      detail: x.detail ?? {},
    })),
  };
}
