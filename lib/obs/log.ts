// Structured JSON logs (pino) for the worker and its activities. Every line of an activity carries
// the move's context (moveId, unit, phase, activity, attempt) through an AsyncLocalStorage set by
// the worker's activity interceptor (worker/instrument.ts). Secrets never leave: every line is
// scrubbed of the config's DSNs, their passwords and the S3 secret before it is written. On a
// terminal the same (scrubbed) lines are printed human-readable by pino-pretty, the move's context
// leading each one; piped, they stay JSON.
import { AsyncLocalStorage } from 'node:async_hooks';
import pino, { type Logger, type DestinationStream } from 'pino';
import pretty, { type PrettyOptions } from 'pino-pretty';
import type { Config } from '../config';
import { secretStrings } from '../secrets';

export type { Logger } from 'pino';

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Every secret the config holds: DSNs (and their passwords), the S3 keys. */
export function configSecrets(config: Config): string[] {
  return [config.directory.dsn, ...config.shards.map((s) => s.dsn), config.s3.secretAccessKey].filter((s): s is string => !!s);
}

export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/**
 * The format from SHARDCTL_LOG_FORMAT (`json`, `pretty`, or `auto`/unset: pretty on a terminal,
 * JSON when piped); an unknown value is a usage error at the edge.
 */
export function logFormatFrom(value: string | undefined, isTty: boolean): LogFormat {
  const v = (value ?? '').toLowerCase();
  if (v === '' || v === 'auto') return isTty ? 'pretty' : 'json';
  if (!(LOG_FORMATS as readonly string[]).includes(v)) throw new Error(`SHARDCTL_LOG_FORMAT=${value}: use one of auto, ${LOG_FORMATS.join(', ')}`);
  return v as LogFormat;
}

/** The move's context an activity line carries, in the order a human line shows it. */
const CONTEXT_FIELDS = [
  ['moveId', 'move'],
  ['unit', 'unit'],
  ['phase', 'phase'],
  ['activity', 'activity'],
  ['attempt', 'attempt'],
] as const;

/**
 * A human line's message: the move's context (`move=… unit=… phase=… activity=… attempt=…`), the
 * message, then the error (`err=…`: the string errorFields() makes, or an error's type and message).
 */
export function prettyMessage(line: Record<string, unknown>, messageKey = 'msg'): string {
  const ctx = CONTEXT_FIELDS.filter(([k]) => line[k] !== undefined && line[k] !== null && line[k] !== '').map(([k, label]) => `${label}=${String(line[k])}`);
  const e = line.err as { type?: unknown; message?: unknown } | string | undefined;
  const err = e === undefined || e === null ? [] : [`err=${typeof e === 'object' ? `${String(e.type ?? 'Error')}: ${String(e.message ?? '')}` : String(e)}`];
  return [...ctx, String(line[messageKey] ?? ''), ...err].join(' ');
}

/**
 * pino-pretty's options for a terminal: one line per entry (time, level, the move's context, the
 * message, the error, the other fields as compact JSON). `err` goes in the message: pino-pretty
 * would unfold it over several lines, whatever `singleLine` says.
 */
export function prettyOptions(colorize?: boolean): PrettyOptions {
  return {
    colorize,
    translateTime: 'SYS:yyyy-mm-dd HH:MM:ss.l',
    singleLine: true,
    ignore: ['pid', 'hostname', 'taskQueue', 'workflowId', 'runId', 'namespace', 'sdkComponent', 'err', ...CONTEXT_FIELDS.map(([k]) => k)].join(','),
    messageFormat: (log, key) => prettyMessage(log, key),
  };
}

export interface LoggerOptions {
  level?: LogLevel;
  /** Where lines go (default stdout). */
  destination?: DestinationStream;
  /** `pretty` for a terminal (human lines on stdout, or through `destination`); default `json`. */
  format?: LogFormat;
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
    opts.format === 'pretty'
      ? pretty({ ...prettyOptions(), sync: true, destination: opts.destination ?? 1 })
      : (opts.destination ?? pino.destination({ fd: 1, sync: false })),
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
