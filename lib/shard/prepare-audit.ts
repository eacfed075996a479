// `shards prepare` in the audit log: one `shard.prepare` entry per shard it tried, naming the
// operator and what changed there (the tables fenced, those whose triggers this run created or
// repaired, the bucket marker), a failed shard with its error: a fence installed or replaced
// changes which writes a shard accepts, so who did it belongs next to the moves' entries.
import type { Queryable } from '../directory/db';
import { appendAudit } from '../directory/audit';
import type { ShardPrepareResult } from './prepare';

export const PREPARE_AUDIT_ACTION = 'shard.prepare';

/** The entry's detail for one shard's outcome (pure). */
export function prepareAuditDetail(r: ShardPrepareResult, opts: { demoSchema: boolean }): Record<string, unknown> {
  return {
    shard: r.shard,
    tables: r.tables,
    changed: r.changed,
    demoSchema: opts.demoSchema,
    ...(r.bucketMarker ? { bucketMarker: r.bucketMarker } : {}),
    ...(r.problems.length ? { problems: r.problems } : {}),
    ...(r.error ? { error: r.error } : {}),
  };
}

/** Appends one entry per shard prepared (or failed), in the order they were tried. */
export async function recordPrepare(
  directory: Queryable,
  operator: { actor: string; reason?: string },
  results: ShardPrepareResult[],
  opts: { demoSchema: boolean },
): Promise<void> {
  for (const r of results) await appendAudit(directory, { ...operator, action: PREPARE_AUDIT_ACTION, unit: null, detail: prepareAuditDetail(r, opts) });
}
