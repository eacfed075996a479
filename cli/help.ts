// Help text shared by every verb: examples after a command's own help (each verb has some; a
// unit test walks the command tree to hold that, and that each example is one well-formed command).
import type { Command } from 'commander';

// Leading `NAME=value` words are the shell's environment assignments: they go before `shardctl`.
const ENV_PREFIX = /^((?:[A-Z_][A-Z0-9_]*=\S*\s+)*)(.*)$/s;

/** `SHARDCTL_LOG_LEVEL=debug worker` → `SHARDCTL_LOG_LEVEL=debug shardctl worker`; `worker` → `shardctl worker`. */
export function exampleCommand(line: string): string {
  const [, env, rest] = ENV_PREFIX.exec(line)!;
  return `${env}shardctl ${rest}`;
}

/** Appends "Examples:" with one `$ shardctl ...` line each to the command's --help. */
export function examples(cmd: Command, ...lines: string[]): Command {
  return cmd.addHelpText('after', `\nExamples:\n${lines.map((l) => `  $ ${exampleCommand(l)}`).join('\n')}`);
}
