// shardctl's exit codes and error output, in one place: every failure is mapped here from its
// error type (lib/errors.ts), never per command, so a script can branch on the code.
import { CommanderError } from 'commander';
import type { ErrorType } from '../lib/errors';
import { isConnectionError } from '../lib/directory/db';

export const EXIT = {
  ok: 0,
  /** Anything else: an unexpected error, or a check that found a problem (`loadgen verify`). */
  failure: 1,
  usage: 2,
  notFound: 3,
  refused: 4,
  unavailable: 5,
  timedOut: 6,
  moveFailed: 7,
} as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** Every error type has a code: the Record makes a new type without one a compile error. */
const BY_TYPE: Record<ErrorType, ExitCode> = {
  InvalidInput: EXIT.usage,
  ConfigError: EXIT.usage,
  NotFound: EXIT.notFound,
  AlreadyExists: EXIT.refused,
  Conflict: EXIT.refused,
  Forbidden: EXIT.refused,
  StaleRoute: EXIT.refused,
  Frozen: EXIT.refused,
  NoCapacity: EXIT.refused,
  PreconditionFailed: EXIT.refused,
  ValidationMismatch: EXIT.refused,
  DirectoryUnavailable: EXIT.unavailable,
  Unavailable: EXIT.unavailable,
  TimedOut: EXIT.timedOut,
  MoveFailed: EXIT.moveFailed,
  // A fleet read missing a shard; `query --all-shards` refines it by why (cli/commands/query.ts: 5 unreachable, 6 timed out, 1 failed).
  IncompleteResult: EXIT.unavailable,
};

export function exitCodeFor(type: ErrorType): ExitCode {
  return BY_TYPE[type];
}

export const EXIT_CODES_HELP = `
Exit codes:
  0  ok
  1  any other failure (an unexpected error; a check that found a problem, e.g. \`loadgen verify\`)
  2  usage or configuration (bad option, argument or config file)
  3  not found (tenant, shard, move)
  4  refused by the current state (the reason is printed)
  5  a server unreachable (directory, Temporal, a shard)
  6  a wait timed out
  7  the move ended failed or cancelled
  130  interrupted (Ctrl-C) during \`move wait\` or \`move watch\`
With --json, an error is one JSON line on stderr: {"error":{"code","exitCode","message"}}.`;

export interface Failure {
  /** Stable: an ErrorType of lib/errors.ts, or Usage / Unavailable / Internal. */
  code: string;
  exitCode: ExitCode;
  message: string;
}

/** gRPC UNAVAILABLE (14), as Temporal's client reports a server that went away mid-call. */
function isGrpcUnavailable(e: any): boolean {
  for (let c = e, i = 0; c && i < 4; c = c.cause, i++) if (c.code === 14) return true;
  return false;
}

/** What a failure means to the operator: its stable code, exit code and one-line message. */
export function describeFailure(e: any): Failure {
  const message = String(e?.message ?? e);
  if (e instanceof CommanderError) return { code: 'Usage', exitCode: EXIT.usage, message: message.replace(/^error: /, '') };
  if (typeof e?.type === 'string' && e.type in BY_TYPE) return { code: e.type, exitCode: BY_TYPE[e.type as ErrorType], message };
  if (isConnectionError(e) || isGrpcUnavailable(e)) return { code: 'Unavailable', exitCode: EXIT.unavailable, message };
  return { code: 'Internal', exitCode: EXIT.failure, message };
}

/** Help and --version end the process through the same path as errors; they are not failures. */
export function isHelpOrVersion(e: unknown): boolean {
  return (
    e instanceof CommanderError && (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || (e.code === 'commander.help' && e.exitCode === 0))
  );
}
