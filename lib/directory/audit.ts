// The directory's append-only audit log (shardctl.audit): `readAudit` for `shardctl audit` only
// selects (callers pass a read-only session, so reading the evidence can never change it; the
// window is measured on the directory's own clock, the one that stamped the entries);
// `appendAudit` is how a verb with no directory change of its own records what it did.
import { onDirectory, poolDsn, type Queryable } from './db';
import { invalidInput } from '../errors';

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

/** What a verb records: who, what, about which tenant (null: fleet-wide), why, and the facts. */
export interface AuditRecord {
  actor: string;
  action: string;
  unit?: string | null;
  reason?: string;
  detail?: Record<string, unknown>;
}

/** Appends one entry (an insert, nothing else: the log is append-only). The actor is required. */
export async function appendAudit(db: Queryable, e: AuditRecord): Promise<void> {
  if (typeof e.actor !== 'string' || !e.actor.trim()) throw invalidInput('audit actor is required');
  await onDirectory(
    () =>
      db.query('insert into shardctl.audit(actor, action, unit, detail, reason) values ($1, $2, $3, $4, $5)', [
        e.actor,
        e.action,
        e.unit ?? null,
        JSON.stringify(e.detail ?? {}),
        e.reason ?? null,
      ]),
    poolDsn(db),
  );
}
