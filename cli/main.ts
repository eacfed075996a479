// The shardctl CLI: parses arguments, loads config once, and hands each verb to its module.
// Failures end here: cli/exit.ts maps each to its exit code and prints it (as JSON with --json).
import fs from 'node:fs';
import path from 'node:path';
import { Command, CommanderError } from 'commander';
import { projectRoot } from '../lib/config';
import { describeFailure, EXIT_CODES_HELP, isHelpOrVersion } from './exit';
import { register as registerDirectory } from './commands/directory';
import { registerDev } from './commands/dev';
import { register as registerWorker } from './commands/worker';
import { register as registerTenant } from './commands/tenant';
import { register as registerShards } from './commands/shards';
import { register as registerSeed } from './commands/seed';
import { register as registerLoadgen } from './commands/loadgen';
import { register as registerMove } from './commands/move';
import { register as registerQuery } from './commands/query';
import { register as registerDoctor } from './commands/doctor';
import { register as registerRebalance } from './commands/rebalance';
import { register as registerAudit } from './commands/audit';
import { register as registerDataset } from './commands/dataset';
import { register as registerBlobs } from './commands/blobs';

/** The whole command tree; with `json`, commander's own error text is left to main (as JSON). */
export function buildProgram(opts: { json?: boolean } = {}): Command {
  const version = JSON.parse(fs.readFileSync(path.join(projectRoot(), 'package.json'), 'utf8')).version as string;
  const program = new Command('shardctl')
    .description('durable tenant moves and resharding for PostgreSQL on Temporal')
    .version(version, '-V, --version', 'print the version')
    .option('--config <file>', 'configuration file (default: $SHARDCTL_CONFIG or .dev/config.json)')
    .allowExcessArguments(false)
    .addHelpText('afterAll', EXIT_CODES_HELP)
    .configureOutput(opts.json ? { writeErr: () => {}, outputError: () => {} } : {})
    .showHelpAfterError('(run with --help for usage, examples and exit codes)')
    .exitOverride();
  registerDirectory(program);
  registerDev(program);
  for (const register of [
    registerWorker,
    registerTenant,
    registerShards,
    registerSeed,
    registerLoadgen,
    registerMove,
    registerQuery,
    registerDoctor,
    registerRebalance,
    registerAudit,
    registerDataset,
    registerBlobs,
  ])
    register(program);
  return program;
}

/** True when --json is among the arguments (before `--`): errors are then JSON on stderr. */
function wantsJson(argv: string[]): boolean {
  const args = argv.slice(2);
  const end = args.indexOf('--');
  return (end < 0 ? args : args.slice(0, end)).includes('--json');
}

export async function main(argv: string[]): Promise<void> {
  const json = wantsJson(argv);
  try {
    await buildProgram({ json }).parseAsync(argv);
  } catch (e: any) {
    if (isHelpOrVersion(e)) return;
    const failure = describeFailure(e);
    process.exitCode = failure.exitCode;
    if (json) process.stderr.write(`${JSON.stringify({ error: failure })}\n`);
    // Commander has printed its own usage error; typed errors carry operator-readable messages.
    else if (!(e instanceof CommanderError)) process.stderr.write(`shardctl: ${failure.message}\n`);
    if (failure.code === 'Internal' && process.env.SHARDCTL_DEBUG) process.stderr.write(`${e?.stack}\n`);
  }
}
