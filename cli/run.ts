// What every CLI verb repeats, in one place: the config of this invocation, connections (or a
// Temporal client) that are closed when the verb ends so the process can exit, the read verbs'
// refusal of an outdated directory schema, and printing a result as JSON or as text.
import type { Command } from 'commander';
import { loadConfig, type Config } from '../lib/config';
import { createConnections, type ConnectionOptions, type Connections } from '../lib/connections';
import { DEFAULT_CONNECT_TIMEOUT_MS } from '../lib/directory/db';
import { requireCurrentDirectorySchema } from '../lib/directory/schema';
import { ShardctlError } from '../lib/errors';
import { temporalClient } from '../lib/temporal-client';

/** The config of this invocation (`--config`, else $SHARDCTL_CONFIG, else .dev/config.json), read when a verb runs. */
export function configOf(program: Command): () => Config {
  return () => loadConfig({ file: program.opts().config });
}

export interface VerbConnectionOptions extends Pick<ConnectionOptions, 'readOnly' | 'connectionTimeoutMillis'> {
  /** A read verb: refuse an outdated directory schema (naming `directory migrate`) before `fn`. */
  requireCurrentSchema?: boolean;
}

/** Runs `fn` with the CLI's small pools (2 connections each, 5 s to connect), closed afterwards whatever happens. */
export async function withConnections<T>(config: Config, opts: VerbConnectionOptions, fn: (c: Connections) => Promise<T>): Promise<T> {
  const conns = createConnections(config, {
    max: 2,
    connectionTimeoutMillis: opts.connectionTimeoutMillis ?? DEFAULT_CONNECT_TIMEOUT_MS,
    readOnly: opts.readOnly,
  });
  try {
    if (opts.requireCurrentSchema) await requireCurrentDirectorySchema(conns.directoryPool());
    return await fn(conns);
  } finally {
    await conns.close();
  }
}

export type TemporalClient = Awaited<ReturnType<typeof temporalClient>>['client'];

/** Runs `fn` with a Temporal client, closed afterwards; an unreachable server is Unavailable (exit 5). */
export async function withTemporal<T>(config: Config, fn: (c: TemporalClient) => Promise<T>): Promise<T> {
  let tc: Awaited<ReturnType<typeof temporalClient>>;
  try {
    tc = await temporalClient(config);
  } catch (e: any) {
    throw new ShardctlError('Unavailable', `cannot reach Temporal at ${config.temporal.address}: ${e.message} (is \`shardctl dev up\` running?)`);
  }
  try {
    return await fn(tc.client);
  } finally {
    await tc.close();
  }
}

/** `value` as one JSON document on stdout with --json (indented with `pretty`), else `text(value)`. */
export function printResult<T>(json: boolean | undefined, value: T, text: (v: T) => void, opts: { pretty?: boolean } = {}): void {
  if (json) console.log(opts.pretty ? JSON.stringify(value, null, 2) : JSON.stringify(value));
  else text(value);
}
