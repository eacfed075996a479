// `shardctl query --all-shards "<select>"`: a fleet read through the router's scatter. Input is
// checked before any connection; the exit code says whether the answer is whole (0) or which
// shards were missing and why, so a script never mistakes a partial answer for a complete one.
import { EXIT } from '../exit';
import { examples } from '../help';
import { Command } from 'commander';
import { configOf } from '../run';
import { parseDurationMs } from '../../lib/duration';
import { IncompleteResult, MissingShard, ShardctlError, invalidInput } from '../../lib/errors';
import { Router } from '../../lib/router';
import type { ScatterOptions, ScatterResult } from '../../lib/router';
import { tableFor } from '../../lib/text-table';

/** Exit codes of `shardctl query` (the numbering issue 12 gives every verb). */
/** The codes of cli/exit.ts this verb uses (one table for the whole CLI). */
export const QUERY_EXIT = {
  complete: EXIT.ok,
  failed: EXIT.failure,
  usage: EXIT.usage,
  refused: EXIT.refused,
  unreachable: EXIT.unavailable,
  timedOut: EXIT.timedOut,
} as const;

const HELP = `
Exit codes:
  0  complete: every shard answered
  1  incomplete because a shard failed the statement (e.g. a table missing there), or another error
  2  bad input (no --all-shards, empty statement, bad --deadline ...): nothing was run
  4  refused: the statement tried to write (fleet reads run in READ ONLY transactions)
  5  incomplete: a shard (or the directory) was unreachable
  6  incomplete: a shard did not answer within --deadline
  Without --allow-partial an incomplete read prints no rows; with it, the rows that answered
  are printed and the exit code is still 1, 5 or 6 (5 wins over 6 when both happened).
`;

interface QueryFlags {
  allShards?: boolean;
  deadline: string;
  concurrency: string;
  limit?: string;
  orderBy?: string;
  allowPartial?: boolean;
  json?: boolean;
}

/** The exit code for the shards an incomplete read missed. */
export function exitCodeForMissing(missing: readonly MissingShard[]): number {
  if (missing.some((m) => m.reason === 'unreachable' || m.reason === 'not-configured')) return QUERY_EXIT.unreachable;
  if (missing.some((m) => m.reason === 'timeout')) return QUERY_EXIT.timedOut;
  return missing.length ? QUERY_EXIT.failed : QUERY_EXIT.complete;
}

function exitCodeFor(e: unknown): number {
  if (e instanceof IncompleteResult) return exitCodeForMissing(e.missing);
  const type = (e as { type?: unknown })?.type;
  if (type === 'InvalidInput' || type === 'ConfigError') return QUERY_EXIT.usage;
  if (type === 'Forbidden') return QUERY_EXIT.refused;
  if (type === 'DirectoryUnavailable') return QUERY_EXIT.unreachable;
  return QUERY_EXIT.failed;
}

function positiveInt(v: string, flag: string, max: number): number {
  if (!/^\d{1,9}$/.test(v.trim()) || Number(v) < 1 || Number(v) > max)
    throw invalidInput(`${flag} must be an integer from 1 to ${max}, got ${JSON.stringify(v.slice(0, 40))}`);
  return Number(v);
}

/** Everything checked before any connection: bad input changes and asks nothing. */
export function scatterOptionsFromFlags(sql: string | undefined, o: QueryFlags): { sql: string; opts: ScatterOptions } {
  if (!o.allShards) throw invalidInput('query needs --all-shards: it runs the statement on every shard of the directory');
  if (!sql?.trim()) throw invalidInput('the statement is empty: give one SELECT in quotes');
  const deadlineMs = parseDurationMs(o.deadline, '--deadline');
  if (deadlineMs <= 0) throw invalidInput(`--deadline must be more than zero, got ${JSON.stringify(o.deadline)}`);
  return {
    sql,
    opts: {
      grant: { tenants: '*' },
      deadlineMs,
      concurrency: positiveInt(o.concurrency, '--concurrency', 1000),
      limit: o.limit === undefined ? undefined : positiveInt(o.limit, '--limit', 1_000_000),
      orderBy: o.orderBy,
      allowPartial: !!o.allowPartial,
    },
  };
}

function cell(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (v instanceof Date) return v.toISOString();
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

function printTable(r: ScatterResult) {
  const rows = r.rows.map((x) => [x.shard, ...r.fields.map((f) => cell(x.row[f]))]);
  const lines = tableFor(process.stdout)({ head: ['shard', ...r.fields], rows });
  if (lines.length) console.log(lines.join('\n'));
}

function summary(r: ScatterResult): string {
  const asked = r.shards.length;
  const answered = asked - r.missing.length;
  const head = `${answered}/${asked} shard(s) answered, ${r.rows.length} row(s), ${r.elapsedMs} ms`;
  if (r.complete) return head;
  return `PARTIAL: ${head}; missing: ${r.missing.map((m) => `${m.shard} (${m.reason}: ${m.message})`).join('; ')}`;
}

export function register(program: Command) {
  examples(
    program.command('query [sql]'),
    `query --all-shards "select tenant_id, count(*) as n from public.accounts group by 1" --order-by "n desc" --limit 10`,
    `query --all-shards "select * from public.jobs where state = 'failed'" --deadline 5s --allow-partial --json`,
  )
    .description('fleet read: one read-only statement on every shard, within a deadline, never silently partial')
    .option('--all-shards', 'required: run it on every shard of the directory')
    .option('--deadline <duration>', 'for the whole read, every shard included (e.g. 2s, 500ms)', '2s')
    .option('--concurrency <n>', 'shards asked at the same time', '4')
    .option('--limit <k>', 'at most k rows overall (pushed down to every shard; with --order-by, the top k)')
    .option('--order-by <columns>', 'result columns, "col [asc|desc], ...": every shard sorts, the rows are merged')
    .option('--allow-partial', 'print what answered (marked partial) instead of refusing an incomplete result')
    .option(
      '--json',
      'as JSON: {complete, elapsedMs, fields, rows: [{shard, row}], missing: [{shard, reason, message, code?}], shards: [{shard, status, rows, queuedMs, elapsedMs}]}',
    )
    .addHelpText('after', HELP)
    .exitOverride((err) => {
      // Commander's own usage errors (an unknown option, a missing value) are bad input too.
      if (err.exitCode !== 0) err.exitCode = QUERY_EXIT.usage;
      throw err;
    })
    .action(async (sqlArg: string | undefined, o: QueryFlags) => {
      let router: Router | undefined;
      try {
        const { sql, opts } = scatterOptionsFromFlags(sqlArg, o);
        const config = configOf(program)();
        router = await Router.create(config, { listen: false, freezeCache: true });
        const r = await router.scatter(sql, [], opts);
        if (o.json) console.log(JSON.stringify(r));
        else printTable(r);
        if (!o.json || !r.complete) process.stderr.write(`${summary(r)}\n`);
        process.exitCode = exitCodeForMissing(r.missing);
      } catch (e) {
        process.exitCode = exitCodeFor(e);
        if (!o.json && e instanceof IncompleteResult) {
          process.stderr.write(`shardctl: ${e.message}\n  (--allow-partial prints the rows of the shards that answered)\n`);
          return;
        }
        if (!o.json) throw e;
        const err = e as ShardctlError;
        process.stderr.write(
          `${JSON.stringify({ error: { type: err.type ?? 'Error', message: err.message, ...(e instanceof IncompleteResult ? { missing: e.missing } : {}) } })}\n`,
        );
      } finally {
        await router?.close();
      }
    });
}
