// Typed errors with a stable `type` string (workflows branch on `type`, never on class) and the
// SQLSTATEs the shards raise from the fence. Pure: safe to import from workflows.

/** SQLSTATEs raised by the shard-side fence (lib/shard/schema.ts). */
export const SQLSTATE = {
  /** The unit is not owned here at the router's epoch: refresh the route and retry elsewhere. */
  staleRoute: 'SC421',
  /** The unit is frozen for cutover: writes wait with backoff, reads continue. */
  frozen: 'SC423',
  /** The write carried no epoch (fail closed). */
  noEpoch: 'SC428',
  /** The row's tenant is not the unit the transaction was opened for. */
  wrongUnit: 'SC403',
} as const;

export type ErrorType =
  | 'InvalidInput'
  | 'NotFound'
  | 'AlreadyExists'
  | 'Conflict'
  | 'Forbidden'
  | 'StaleRoute'
  | 'Frozen'
  | 'NoCapacity'
  | 'DirectoryUnavailable'
  /** A server other than the directory (Temporal, a shard) could not be reached. */
  | 'Unavailable'
  | 'PreconditionFailed'
  | 'ValidationMismatch'
  | 'ConfigError'
  /** A wait gave up at its deadline (the thing waited for may still happen). */
  | 'TimedOut'
  /** The move ended failed or cancelled, not where the caller wanted it. */
  | 'MoveFailed'
  /** A fleet read (router.scatter) without every shard's answer. */
  | 'IncompleteResult';

/** Error types an activity never retries: the workflow branches on them (the one list). */
export const PERMANENT_ERROR_TYPES: readonly ErrorType[] = ['InvalidInput', 'PreconditionFailed', 'Conflict', 'NotFound', 'ValidationMismatch', 'Forbidden'];

export function isPermanentErrorType(type: unknown): boolean {
  return typeof type === 'string' && (PERMANENT_ERROR_TYPES as readonly string[]).includes(type);
}

export class ShardctlError extends Error {
  constructor(
    readonly type: ErrorType,
    message: string,
    readonly details?: Record<string, unknown>,
    /** True when retrying the same call may succeed (e.g. frozen past the deadline). */
    readonly retriable = false,
  ) {
    super(message);
    this.name = `ShardctlError(${type})`;
  }
}

export const invalidInput = (msg: string) => new ShardctlError('InvalidInput', msg);

/** Why a shard is missing from a fleet read (router.scatter). */
export type MissingReason = 'timeout' | 'unreachable' | 'error' | 'stale-route' | 'not-configured';

export interface MissingShard {
  shard: string;
  reason: MissingReason;
  /** One line for an operator; never a DSN or a password. */
  message: string;
  /** The server's SQLSTATE or the socket's error code, when there is one. */
  code?: string;
}

/**
 * A fleet read that did not hear from every shard it had to ask. Thrown instead of returning
 * an answer that looks whole; `missing` names each shard and why. Retriable: the same read
 * may complete once the shard is back or less loaded.
 */
export class IncompleteResult extends ShardctlError {
  constructor(
    readonly missing: MissingShard[],
    readonly answered: string[],
  ) {
    super(
      'IncompleteResult',
      `incomplete result: ${missing.length} of ${missing.length + answered.length} shard(s) did not answer: ${missing.map((m) => `${m.shard} (${m.reason}: ${m.message})`).join('; ')}`,
      { missing, answered },
      true,
    );
  }
}
