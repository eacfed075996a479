// `shardctl audit [--tenant T] [--since 24h] [--limit N] [--json]`: who did what, from the
// directory's append-only audit log, newest last. A read verb: a read-only session, an outdated
// directory schema refused (naming `directory migrate`), never migrated; bad input exits 2 first.
import { Command } from 'commander';
import { readAudit, type AuditEntry } from '../../lib/directory/audit';
import { parseDurationMs } from '../../lib/duration';
import { invalidInput } from '../../lib/errors';
import { validateTenantId } from '../../lib/ids';
import { isTerminalStream, renderTable } from '../../lib/text-table';
import { examples } from '../help';
import { configOf, printResult, withConnections } from '../run';

const MAX_LIMIT = 100_000;

function parseLimit(v: string): number {
  const n = Number(String(v).trim());
  if (!/^\d{1,6}$/.test(String(v).trim()) || n < 1 || n > MAX_LIMIT)
    throw invalidInput(`--limit must be an integer from 1 to ${MAX_LIMIT}, got ${JSON.stringify(v)}`);
  return n;
}

/** The human table: one row per entry, detail as compact JSON; boxed on a terminal, plain columns when piped. */
export function formatAuditTable(entries: readonly AuditEntry[], tty = false): string[] {
  const rows = entries.map((e) => [
    e.at.replace('T', ' ').replace(/\.\d+Z$/, 'Z'),
    e.actor,
    e.action,
    e.unit ?? '-',
    e.reason ?? '',
    Object.keys(e.detail).length ? JSON.stringify(e.detail) : '',
  ]);
  return renderTable({ head: ['AT (UTC)', 'ACTOR', 'ACTION', 'TENANT', 'REASON', 'DETAIL'], rows }, tty);
}

export function register(program: Command) {
  const cfg = configOf(program);
  const audit = program
    .command('audit')
    .description("who did what: the directory's append-only audit log, newest last (read-only; changes nothing)")
    .option('--tenant <id>', 'only entries about this tenant')
    .option('--since <duration>', 'only entries of the last ... (directory clock), e.g. 30m, 24h, 7d', '24h')
    .option('--limit <n>', 'at most this many entries, the newest (a note says when older ones were left out)', '1000')
    .option('--json', 'as JSON: {since, tenant, entries: [{id, at, actor, action, unit, reason, detail}], truncated}')
    .action(async (o: { tenant?: string; since: string; limit: string; json?: boolean }) => {
      const unit = o.tenant === undefined ? undefined : validateTenantId(o.tenant);
      const sinceMs = parseDurationMs(o.since, '--since');
      const limit = parseLimit(o.limit);
      const page = await withConnections(cfg(), { readOnly: true, requireCurrentSchema: true }, (conns) =>
        readAudit(conns.directoryPool(), { unit, sinceMs, limit }),
      );
      printResult(o.json, { since: o.since, tenant: unit ?? null, entries: page.entries, truncated: page.truncated }, (v) => {
        if (!v.entries.length) console.log(`no audit entries${unit ? ` for ${unit}` : ''} in the last ${o.since}`);
        else console.log(formatAuditTable(v.entries, isTerminalStream(process.stdout)).join('\n'));
        if (v.truncated) process.stderr.write(`audit: only the newest ${limit} entries shown; narrow --since or --tenant, or raise --limit\n`);
      });
    });
  examples(
    audit,
    'audit --tenant acme --since 24h',
    'audit --since 7d --json | jq -r \'.entries[] | select(.action == "move.throttle") | "\\(.at) \\(.actor) \\(.detail.rowsPerSecond)"\'',
  );
}
