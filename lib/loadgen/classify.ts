// Classifies a failed write: 'refused' only when it certainly did not commit, 'unknown' when it
// may have. Pure. The rule: before COMMIT was sent nothing can have committed; once COMMIT was
// sent, only an error the server reported for a rolled-back transaction proves it did not.
import { SQLSTATE } from '../errors';

export type FailureStatus = 'refused' | 'unknown';

const SQLSTATE_TYPES: Record<string, string> = {
  [SQLSTATE.staleRoute]: 'StaleRoute',
  [SQLSTATE.frozen]: 'Frozen',
  [SQLSTATE.noEpoch]: 'NoEpoch',
  [SQLSTATE.wrongUnit]: 'Forbidden',
  '40001': 'SerializationFailure',
  '40P01': 'Deadlock',
  '23505': 'UniqueViolation',
  '23503': 'ForeignKeyViolation',
  '57014': 'QueryCanceled',
  '57P01': 'AdminShutdown',
  '55P03': 'LockNotAvailable',
  '25P02': 'InFailedTransaction',
};

/** SQLSTATE classes whose error on COMMIT means the server rolled the transaction back. */
const ROLLED_BACK_CLASSES = ['40', '23', '25', 'SC'];

function sqlstateOf(err: any): string | undefined {
  for (const c of [err, err?.cause, err?.details?.cause]) {
    const code = c?.code ?? c?.details?.sqlstate ?? c?.details?.code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
  }
  return undefined;
}

/** A stable name for counting: the ShardctlError type, the SQLSTATE's name, or a node error code. */
export function errorTypeOf(err: any): string {
  // The writer's row was not where its acks say it is: evidence of a lost write, not a refusal.
  if (err?.details?.loadgenRowMissing) return 'RowMissing';
  if (typeof err?.type === 'string') return err.type;
  const state = sqlstateOf(err);
  if (state) return SQLSTATE_TYPES[state] ?? `SQLSTATE_${state}`;
  if (typeof err?.code === 'string') return err.code;
  const msg = String(err?.message ?? err);
  if (/Connection terminated|connection.*(lost|closed|ended)|ECONNRESET|socket/i.test(msg)) return 'ConnectionLost';
  if (/timeout/i.test(msg)) return 'Timeout';
  return err?.name && err.name !== 'Error' ? String(err.name) : 'Error';
}

/**
 * `commitSent`: the transaction body had finished, so the router may have sent COMMIT.
 * Before that point every failure is a refusal (the transaction rolls back or dies unsent).
 */
export function classifyFailure(err: unknown, commitSent: boolean): FailureStatus {
  if (!commitSent) return 'refused';
  const state = sqlstateOf(err);
  if (state && ROLLED_BACK_CLASSES.includes(state.slice(0, 2))) return 'refused';
  return 'unknown';
}

export function errorMessage(err: any): string {
  return String(err?.message ?? err).slice(0, 300);
}
