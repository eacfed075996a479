// The CLI's surface without running it: every verb's --help has examples and the exit codes,
// every read verb has --json, and each error type maps to its documented exit code.
import { describe, it, expect } from 'vitest';
import { Command, CommanderError } from 'commander';
import { buildProgram } from '../../cli/main';
import { describeFailure, EXIT, exitCodeFor, isHelpOrVersion } from '../../cli/exit';
import { ShardctlError, type ErrorType } from '../../lib/errors';
import { ConfigError } from '../../lib/config';
import { SHARD_STATUSES } from '../../lib/directory/shards';
import { PHASES } from '../../workflows/phases';
import { APPROVAL_MODES } from '../../workflows/messages';
import { exampleCommand } from '../../cli/help';

/** Every command that runs something (has an action), by its full path: "move wait". */
function verbs(program: Command): Map<string, Command> {
  const out = new Map<string, Command>();
  const walk = (c: Command, prefix: string[]) => {
    for (const sub of c.commands) {
      const p = [...prefix, sub.name()];
      if ((sub as any)._actionHandler) out.set(p.join(' '), sub);
      walk(sub, p);
    }
  };
  walk(program, []);
  return out;
}

function helpOf(program: Command, cmd: Command): string {
  let out = '';
  program.configureOutput({ writeOut: (s) => (out += s) });
  cmd.outputHelp();
  return out;
}

/** The help on one line: commander wraps long descriptions wherever the terminal width falls. */
const flatHelpOf = (program: Command, cmd: Command) => helpOf(program, cmd).replace(/\s+/g, ' ');

const READ_VERBS = [
  'tenant show',
  'tenant list',
  'shards list',
  'move plan',
  'move status',
  'move wait',
  'move watch',
  'move list',
  'directory status',
  'dev status',
  'dev env',
  'loadgen verify',
  'doctor',
  'rebalance plan',
  'rebalance status',
  'shards drain',
];

describe('shardctl --help', () => {
  const program = buildProgram();
  const all = verbs(program);

  it('finds the verbs it checks', () => {
    for (const v of [...READ_VERBS, 'move start', 'move cancel', 'tenant create', 'directory migrate', 'worker', 'seed', 'loadgen'])
      expect([...all.keys()]).toContain(v);
  });

  it('shows examples of the verb itself and the exit codes on every verb', () => {
    for (const [name, cmd] of all) {
      const help = helpOf(program, cmd);
      expect(help, name).toContain('\nExamples:\n');
      expect(help, name).toContain(`  $ shardctl ${name}`);
      expect(help, name).toMatch(/Exit codes:\n {2}0 {2}ok\n[\s\S]* {2}7 {2}the move ended failed or cancelled/);
    }
  });

  it('writes every example as one command: environment assignments first, then `shardctl` once, then a verb', () => {
    const verbsAndOptions = new Set(program.commands.map((c) => c.name()));
    for (const [name, cmd] of all)
      for (const line of helpOf(program, cmd)
        .split('\n')
        .filter((l) => l.startsWith('  $ '))) {
        const m = /^ {2}\$ (?:[A-Z_][A-Z0-9_]*=\S+ )*shardctl (\S+)/.exec(line);
        expect(m, `${name}: ${line}`).not.toBeNull();
        expect(verbsAndOptions.has(m![1]) || m![1].startsWith('--'), `${name}: ${line}`).toBe(true);
        expect(line.match(/\bshardctl /g), `${name}: ${line}`).toHaveLength(1);
      }
  });

  it("puts an example's leading environment assignments before `shardctl`", () => {
    expect(exampleCommand('SHARDCTL_LOG_LEVEL=debug worker | jq .')).toBe('SHARDCTL_LOG_LEVEL=debug shardctl worker | jq .');
    expect(exampleCommand('A=1 B_2=x dev up')).toBe('A=1 B_2=x shardctl dev up');
    expect(exampleCommand('move list --phase copy')).toBe('shardctl move list --phase copy');
  });

  it('lists every phase with --phase of move wait and move list', () => {
    for (const name of ['move wait', 'move list'])
      expect(flatHelpOf(program, all.get(name)!), name).toMatch(new RegExp(`--phase <phase> [\\w ]+: ${PHASES.join(' \\| ')}`));
  });

  it('lists the approval modes with --approve-cutover of every verb that starts moves', () => {
    const starters = [...all].filter(([, c]) => c.options.some((o) => o.long === '--approve-cutover')).map(([n]) => n);
    expect(starters).toEqual(expect.arrayContaining(['move start', 'rebalance start', 'shards drain', 'tenant isolate']));
    for (const name of starters) expect(flatHelpOf(program, all.get(name)!), name).toContain(`--approve-cutover <mode> ${APPROVAL_MODES.join(' | ')}`);
  });

  it('lists the shard statuses for the status argument of shards set-status', () => {
    expect(flatHelpOf(program, all.get('shards set-status')!)).toContain(`status ${SHARD_STATUSES.join(' | ')}`);
  });

  it('offers --json on every read verb', () => {
    for (const name of READ_VERBS)
      expect(
        all.get(name)!.options.map((o) => o.long),
        name,
      ).toContain('--json');
  });
});

describe('exit codes', () => {
  it('maps each error type to its class: usage 2, not found 3, refused 4, unreachable 5, timed out 6, move failed 7', () => {
    const expected: Record<ErrorType, number> = {
      InvalidInput: 2,
      ConfigError: 2,
      NotFound: 3,
      AlreadyExists: 4,
      Conflict: 4,
      Forbidden: 4,
      StaleRoute: 4,
      Frozen: 4,
      NoCapacity: 4,
      PreconditionFailed: 4,
      ValidationMismatch: 4,
      DirectoryUnavailable: 5,
      Unavailable: 5,
      TimedOut: 6,
      MoveFailed: 7,
      IncompleteResult: 5,
    };
    for (const [type, code] of Object.entries(expected) as [ErrorType, number][]) {
      expect(exitCodeFor(type), type).toBe(code);
      expect(describeFailure(new ShardctlError(type, `because ${type}`))).toEqual({ code: type, exitCode: code, message: `because ${type}` });
    }
  });

  it('maps usage errors, config errors, unreachable servers and anything else', () => {
    expect(describeFailure(new CommanderError(1, 'commander.missingArgument', "error: missing required argument 'id'"))).toEqual({
      code: 'Usage',
      exitCode: EXIT.usage,
      message: "missing required argument 'id'",
    });
    expect(describeFailure(new ConfigError('invalid configuration in x.json'))).toMatchObject({ code: 'ConfigError', exitCode: 2 });
    expect(describeFailure(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }))).toMatchObject({
      code: 'Unavailable',
      exitCode: 5,
    });
    expect(describeFailure(new Error('14 UNAVAILABLE', { cause: Object.assign(new Error('No connection established'), { code: 14 }) }))).toMatchObject({
      code: 'Unavailable',
      exitCode: 5,
    });
    expect(describeFailure(new TypeError('x is undefined'))).toEqual({ code: 'Internal', exitCode: 1, message: 'x is undefined' });
  });

  it('treats --help and --version as success, a bare group as usage', () => {
    expect(isHelpOrVersion(new CommanderError(0, 'commander.helpDisplayed', '(outputHelp)'))).toBe(true);
    expect(isHelpOrVersion(new CommanderError(0, 'commander.version', '0.1.0'))).toBe(true);
    // `shardctl move` without a verb prints help as an error.
    expect(isHelpOrVersion(new CommanderError(1, 'commander.help', '(outputHelp)'))).toBe(false);
  });
});

describe('safety rails (pure parts)', () => {
  it('asks for a soak shorter than the default or than an hour, not for one at or above both', async () => {
    const { soakNeedsConfirmation } = await import('../../cli/confirm');
    expect(soakNeedsConfirmation(0, 72 * 3600)).toBe(true);
    expect(soakNeedsConfirmation(600, 72 * 3600)).toBe(true);
    expect(soakNeedsConfirmation(24 * 3600, 72 * 3600)).toBe(true);
    expect(soakNeedsConfirmation(72 * 3600, 72 * 3600)).toBe(false);
    expect(soakNeedsConfirmation(30 * 60, 60)).toBe(true);
    expect(soakNeedsConfirmation(3600, 60)).toBe(false);
  });

  it('prints durations the way operators write them', async () => {
    const { formatDurationSeconds } = await import('../../lib/duration');
    expect([0, 45, 600, 5400, 72 * 3600].map(formatDurationSeconds)).toEqual(['0s', '45s', '10m', '1h30m', '72h']);
  });
});

describe('printResult', () => {
  it('prints one JSON document (compact, or indented with pretty) with --json, else the text form', async () => {
    const { printResult } = await import('../../cli/run');
    const out: string[] = [];
    const log = console.log;
    console.log = (s: string) => out.push(s);
    try {
      printResult(true, { a: [1] }, () => out.push('text'));
      printResult(true, { a: [1] }, () => out.push('text'), { pretty: true });
      printResult(false, { a: [1] }, (v) => out.push(`text ${v.a.length}`));
    } finally {
      console.log = log;
    }
    expect(out).toEqual(['{"a":[1]}', '{\n  "a": [\n    1\n  ]\n}', 'text 1']);
  });
});
