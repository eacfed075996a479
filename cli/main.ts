// The shardctl CLI: parses arguments, loads config once, and hands each verb to its module.
import { Command, CommanderError } from 'commander';
import { registerDev } from './commands/dev';

export async function main(argv: string[]): Promise<void> {
  const program = new Command('shardctl')
    .description('durable tenant moves and resharding for PostgreSQL on Temporal')
    .option('--config <file>', 'configuration file (default: $SHARDCTL_CONFIG or .dev/config.json)')
    .showHelpAfterError()
    .exitOverride();
  registerDev(program);
  for (const register of optionalCommands()) register(program);
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

/** Commands added by later modules register here; kept in one list so help shows them all. */
function optionalCommands(): Array<(p: Command) => void> {
  const out: Array<(p: Command) => void> = [];
  for (const mod of ['./commands/worker', './commands/tenant', './commands/shards', './commands/seed', './commands/loadgen', './commands/move']) {
    try {
      // eslint-disable-next-line @typescript-eslint/no-var-requires
      const m = require(mod);
      if (typeof m.register === 'function') out.push(m.register);
    } catch (e: any) {
      if (e?.code !== 'MODULE_NOT_FOUND' || !String(e.message).includes(mod.slice(2))) throw e;
    }
  }
  return out;
}
