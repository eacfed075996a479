// The CLI's safety rail for what cannot be undone (`move retire`, a soak shorter than the
// default): with --yes it goes ahead; on a terminal it prints what would be lost and asks for the
// name to be typed back; anywhere else it prints the same and refuses (exit 4), changing nothing.
import readline from 'node:readline';
import { ShardctlError } from '../lib/errors';

export interface Confirmation {
  /** What the operator asked for, as a short phrase: "retire the source copy of acme". */
  action: string;
  /** What would be lost, one line each (printed before asking, and with a refusal). */
  details: string[];
  /** The word the operator types back to confirm (the tenant id). */
  typeBack: string;
  yes?: boolean;
}

/** Resolves when confirmed; otherwise throws Forbidden (exit 4) before anything changed. */
export async function confirmIrreversible(c: Confirmation, io: { stdin: NodeJS.ReadStream; stderr: NodeJS.WriteStream } = process): Promise<void> {
  if (c.yes) return;
  io.stderr.write(`${c.action}:\n${c.details.join('\n')}\n`);
  if (!io.stdin.isTTY) {
    throw new ShardctlError('Forbidden', `refused to ${c.action} without --yes (no terminal to ask on); nothing changed`);
  }
  const answer = await ask(io, `type ${c.typeBack} to confirm (anything else aborts): `);
  if (answer.trim() !== c.typeBack) throw new ShardctlError('Forbidden', `not confirmed (expected ${c.typeBack}); nothing changed`);
}

function ask(io: { stdin: NodeJS.ReadStream; stderr: NodeJS.WriteStream }, prompt: string): Promise<string> {
  const rl = readline.createInterface({ input: io.stdin, output: io.stderr, terminal: true });
  return new Promise<string>((resolve) => {
    let answered = false;
    rl.on('close', () => answered || resolve(''));
    rl.question(prompt, (a) => {
      answered = true;
      rl.close();
      resolve(a);
    });
  });
}

/** A soak shorter than the config's default, or than an hour, shortens the way back: it asks. */
export function soakNeedsConfirmation(soakSeconds: number, defaultSoakSeconds: number): boolean {
  return soakSeconds < Math.max(defaultSoakSeconds, 3600);
}
