// The shardctl CLI: parses arguments, loads config once, and hands each verb to its module.
import { Command, CommanderError } from 'commander';
import { registerDev } from './commands/dev';
import { register as registerWorker } from './commands/worker';
import { register as registerTenant } from './commands/tenant';
import { register as registerShards } from './commands/shards';
import { register as registerSeed } from './commands/seed';
import { register as registerLoadgen } from './commands/loadgen';
import { register as registerMove } from './commands/move';
import { register as registerQuery } from './commands/query';

export async function main(argv: string[]): Promise<void> {
  const program = new Command('shardctl')
    .description('durable tenant moves and resharding for PostgreSQL on Temporal')
    .option('--config <file>', 'configuration file (default: $SHARDCTL_CONFIG or .dev/config.json)')
    .showHelpAfterError()
    .exitOverride();
  registerDev(program);
  for (const register of [registerWorker, registerTenant, registerShards, registerSeed, registerLoadgen, registerMove, registerQuery]) register(program);
  try {
    await program.parseAsync(argv);
  } catch (e: any) {
    if (e instanceof CommanderError) {
      process.exitCode = e.exitCode;
      return;
    }
    // Typed errors carry operator-readable messages; no stack trace for them.
    process.stderr.write(`shardctl: ${e?.message ?? e}\n`);
    if (!e?.type && process.env.SHARDCTL_DEBUG) process.stderr.write(`${e?.stack}\n`);
    process.exitCode = process.exitCode || 1;
  }
}
