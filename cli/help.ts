// Help text shared by every verb: examples after a command's own help (each verb has some; a
// unit test walks the command tree to hold that).
import type { Command } from 'commander';

/** Appends "Examples:" with one `$ shardctl ...` line each to the command's --help. */
export function examples(cmd: Command, ...lines: string[]): Command {
  return cmd.addHelpText('after', `\nExamples:\n${lines.map((l) => `  $ shardctl ${l}`).join('\n')}`);
}
