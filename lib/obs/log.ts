// Structured JSON logs (pino) for the worker and its activities. Every line of an activity carries
// the move's context (moveId, unit, phase, activity, attempt) through an AsyncLocalStorage set by
// the worker's activity interceptor (worker/instrument.ts). Secrets never leave: every line is
// scrubbed of the config's DSNs, their passwords and the S3 secret before it is written.
import { AsyncLocalStorage } from 'node:async_hooks';
import pino, { type Logger, type DestinationStream } from 'pino';
import type { Config } from '../config';
import { secretStrings } from '../secrets';

export type { Logger } from 'pino';

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Every secret the config holds: DSNs (and their passwords), the S3 keys. */
export function configSecrets(config: Config): string[] {
  return [config.directory.dsn, ...config.shards.map((s) => s.dsn), config.s3.secretAccessKey].filter((s): s is string => !!s);
}

export interface LoggerOptions {
  level?: LogLevel;
  /** Where lines go (default stdout). */
  destination?: DestinationStream;
  /** Fields on every line (e.g. the worker's task queue and pid). */
  base?: Record<string, unknown>;
}

/**
 * Replaces each secret (and each DSN's password, raw, URL-decoded and as JSON escapes it) by ***
 * in a written JSON line, plus any `user:password@` of a URL and any `password=` value; the
 * patterns stop at a quote, so the line stays valid JSON.
 */
export function jsonLineRedactor(secrets: readonly string[]): (line: string) => string {
  const list = secretStrings(secrets)
    .filter((s) => s.length >= 3)
    .flatMap((s) => [s, JSON.stringify(s).slice(1, -1)])
    .sort((a, b) => b.length - a.length);
  return (line) => {
    let out = line;
    for (const s of list) out = out.split(s).join('***');
    return out.replace(/(password\s*=\s*)[^\s"\\&;]+/gi, '$1***').replace(/([a-z][a-z0-9+.-]*:\/\/[^:@/\s"]*:)[^@\s"/]+@/gi, '$1***@');
  };
}

/** A JSON logger whose every line is scrubbed of the config's secrets. */
export function createLogger(config: Config, opts: LoggerOptions = {}): Logger {
  const redact = jsonLineRedactor(configSecrets(config));
  return pino(
    {
      level: opts.level ?? 'info',
      base: { pid: process.pid, ...opts.base },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // The last line of defence: whatever a message or an error carries, the written line is scrubbed.
      hooks: { streamWrite: (s) => redact(s) },
    },
    opts.destination ?? pino.destination({ fd: 1, sync: false }),
  );
}

/** The level from SHARDCTL_LOG_LEVEL, or `fallback`; an unknown value is a usage error at the edge. */
export function logLevelFrom(value: string | undefined, fallback: LogLevel): LogLevel {
  if (value === undefined || value === '') return fallback;
  const v = value.toLowerCase();
  if (!(LOG_LEVELS as readonly string[]).includes(v)) throw new Error(`SHARDCTL_LOG_LEVEL=${value}: use one of ${LOG_LEVELS.join(', ')}`);
  return v as LogLevel;
}

const current = new AsyncLocalStorage<Logger>();

/** Runs `fn` with `log` as the current logger (the activity interceptor binds the move's context). */
export function withLogger<T>(log: Logger, fn: () => T): T {
  return current.run(log, fn);
}

const silent = pino({ level: 'silent' });

/** The logger bound to the running activity (its lines carry the move's context); silent elsewhere. */
export function activityLog(): Logger {
  return current.getStore() ?? silent;
}

/** A short, secret-free description of an error for a log line: its type, code and message. */
export function errorFields(e: unknown): Record<string, unknown> {
  const x = e as { type?: unknown; code?: unknown; message?: unknown; name?: unknown };
  return { errType: typeof x?.type === 'string' ? x.type : (x?.name ?? 'Error'), errCode: x?.code, err: String(x?.message ?? e).slice(0, 500) };
}
