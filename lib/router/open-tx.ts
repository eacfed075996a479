// How the router opens a tenant transaction: BEGIN and the route check as one simple query, one
// round trip (lib/shard/fence-sql.ts says what the check holds). Pure: no I/O.
import { escapeLiteral } from 'pg';
import { ShardctlError, invalidInput } from '../errors';

export type Mode = 'read' | 'write';
export type Isolation = 'read committed' | 'repeatable read' | 'serializable';

/**
 * The statements that open a tenant transaction, as one simple query (so literals, not
 * parameters: the unit is a validated tenant id, quoted all the same). A write transaction is
 * checked here, once: the unit's lock held shared until it ends, the fence read, the transaction
 * marked checked, by a CALL (not planned, no row to send or parse: measured in BENCHMARKS.md). A
 * read proves ownership at the epoch. With `statementTimeoutMs`, every
 * statement of the transaction (the lock wait of the check included) ends by then: the caller's
 * deadline holds inside an attempt too.
 */
export function openTransactionSql(p: { unit: string; epoch: number }, mode: Mode, isolation: Isolation | undefined, statementTimeoutMs?: number): string {
  if (!Number.isSafeInteger(p.epoch) || p.epoch < 0) throw invalidInput(`epoch must be a non-negative integer, got ${p.epoch}`);
  if (statementTimeoutMs !== undefined && !(Number.isSafeInteger(statementTimeoutMs) && statementTimeoutMs > 0)) {
    throw invalidInput(`statementTimeoutMs must be a positive integer, got ${statementTimeoutMs}`);
  }
  const iso = isolation ? ` isolation level ${isolation}` : '';
  const unit = escapeLiteral(p.unit);
  const timeout = statementTimeoutMs ? `; set local statement_timeout = ${statementTimeoutMs}` : '';
  if (mode === 'write') return `begin${iso}${timeout}; call shardctl.${OPEN_WRITE_PROCEDURE}(${unit}, ${p.epoch})`;
  return `begin${iso} read only${timeout}; select set_config('shardctl.unit', ${unit}, true), set_config('shardctl.epoch', '${p.epoch}', true), shardctl.assert_readable(${unit}, ${p.epoch})`;
}

/** The procedure that opens a write transaction (lib/shard/fence-sql.ts). */
export const OPEN_WRITE_PROCEDURE = 'open_unit_write';

/**
 * The opening batch's failure, as the caller should see it: a shard whose schema predates the
 * procedure (prepared by an older shardctl) refuses every routed write, so say what to run
 * rather than pass on "procedure does not exist". Anything else is returned as it is.
 */
export function openFailure(err: unknown, shard: string): unknown {
  const e = err as { code?: unknown; message?: unknown };
  if (e?.code === '42883' && String(e.message).includes(`shardctl.${OPEN_WRITE_PROCEDURE}`)) {
    return new ShardctlError(
      'ConfigError',
      `shard ${shard} lacks shardctl.${OPEN_WRITE_PROCEDURE} (its schema is older than this router): run \`shardctl shards prepare\` on it; no write was made`,
      { shard },
    );
  }
  return err;
}
