// `shardctl loadgen` (bounded, logged load through the router) and `shardctl loadgen verify`
// (the log against each tenant's current owner). Both read --log and --json from the parent
// command, so `loadgen verify --log f` works whatever order the options come in.
import { Command } from 'commander';
import { loadConfig } from '../../lib/config';
import { invalidInput } from '../../lib/errors';
import { validateTenantId } from '../../lib/ids';
import { parseDurationMs } from '../../lib/duration';
import { Router } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { blobWritesOf, formatStats, startLoadgen, verifyLog, VerifyReport } from '../../lib/loadgen';
import { examples } from '../help';
import { EXIT } from '../exit';
import { isTerminalStream } from '../../lib/text-table';

function positive(v: string, what: string, integer = true): number {
  const n = Number(v);
  if (!String(v).trim() || !Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
    throw invalidInput(`${what} must be a positive ${integer ? 'integer' : 'number'}, got ${JSON.stringify(String(v).slice(0, 40))}`);
  }
  return n;
}

interface LoadgenCliOptions {
  tenants?: string;
  rate?: string;
  duration?: string;
  log?: string;
  concurrency: string;
  seed?: string;
  readFraction: string;
  intents?: boolean;
  blobWrites: string;
  /** false with --no-blobs. */
  blobs: boolean;
  schema?: string;
  json?: boolean;
  config?: string;
}

export function register(program: Command) {
  const lg = program
    .command('loadgen')
    .description('bounded load through the router (writes, blob puts, reads); every write outcome appended to --log as JSONL')
    .option('--tenants <list>', 'comma-separated tenant ids')
    .option('--rate <ops>', 'operations per second (reads + writes)')
    .option('--duration <d>', 'how long, e.g. 30s, 2m')
    .option('--log <file>', 'JSONL outcome log (appended)')
    .option('--concurrency <n>', 'parallel writers, each owning its own keys', '4')
    .option('--seed <n>', 'seed of the op mix')
    .option('--read-fraction <f>', 'share of reads', '0.3')
    .option('--intents', "log a 'pending' record before each write (a killed loadgen leaves its in-flight writes ambiguous, not unlogged)")
    .option(
      '--blob-writes <how>',
      "how blob ops write objects: 'direct' (an object under the key the row names) or 'index' (a version recorded in shardctl.blob_index by the row's transaction)",
      'direct',
    )
    .option(
      '--no-blobs',
      "no blob ops (a split tenant holds no blobs); a split tenant's rows carry their id as split key (config.tenant.splitColumns names id)",
    )
    .option('--schema <name>', "the schema of loadgen's tables accounts, documents, events (default public)")
    .option('--json', 'print the summary (or the verify report) as JSON')
    .action(async (_o: unknown, cmd: Command) => {
      const o = cmd.optsWithGlobals() as LoadgenCliOptions;
      if (!o.tenants) throw invalidInput('--tenants is required');
      if (!o.rate || !o.duration || !o.log) throw invalidInput('--rate, --duration and --log are required');
      const tenants = o.tenants
        .split(',')
        .map((t) => t.trim())
        .filter(Boolean)
        .map(validateTenantId);
      const rate = positive(o.rate, '--rate', false);
      const durationMs = parseDurationMs(o.duration, '--duration');
      if (durationMs <= 0) throw invalidInput('--duration must be positive');
      if (o.seed !== undefined && !/^\d{1,9}$/.test(o.seed))
        throw invalidInput(`--seed must be a non-negative integer, got ${JSON.stringify(o.seed.slice(0, 40))}`);
      const readFraction = Number(o.readFraction);
      if (!(readFraction >= 0 && readFraction <= 1)) throw invalidInput('--read-fraction must be between 0 and 1');
      const blobWrites = blobWritesOf(o.blobWrites, '--blob-writes');
      const config = loadConfig({ file: o.config });
      const deps = createDeps(config);
      const concurrency = positive(o.concurrency, '--concurrency');
      // One connection per writer on each shard: none waits for a connection behind another.
      const router = await Router.create(config, { poolMax: concurrency });
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      try {
        const h = startLoadgen({
          config,
          router,
          s3For: deps.s3For,
          tenants,
          rate,
          durationMs,
          logFile: o.log,
          concurrency,
          seed: o.seed !== undefined ? Number(o.seed) : undefined,
          readFraction,
          intents: !!o.intents,
          blobWrites,
          blobOps: o.blobs !== false,
          ...(o.schema ? { schema: o.schema } : {}),
          signal: stop.signal,
        });
        const stats = await h.done;
        if (o.json) console.log(JSON.stringify(stats));
        else console.log(formatStats(stats, h.histograms(), isTerminalStream(process.stdout)));
        // A read that missed an acknowledged write, or a write that found its row gone, is a
        // consistency violation seen live (verify will name the keys).
        if (stats.readMismatches > 0 || (stats.errorsByType.RowMissing ?? 0) > 0) process.exitCode = EXIT.failure;
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
        await router.close();
        await deps.close();
      }
    });

  examples(
    lg,
    'loadgen --tenants acme,globex --rate 50 --duration 2m --log load.jsonl',
    'loadgen --tenants acme --rate 20 --duration 30s --log load.jsonl --intents --json',
    'loadgen --tenants acme --rate 50 --duration 1m --log load.jsonl --blob-writes index',
    'loadgen --tenants hot --rate 50 --duration 1m --log load.jsonl --no-blobs   # hot split: each row routed to its sub-unit by its id',
  );

  const verify = lg
    .command('verify')
    .description(
      "check a loadgen log (--log FILE) against each tenant's current owner: acked writes present with their value, refused writes absent, acked blobs in the owner's bucket; exits 1 when not",
    )
    // Listed here for its --help; whichever command parses them, optsWithGlobals() sees them.
    .option('--log <file>', 'the JSONL outcome log to check')
    .option('--schema <name>', "the schema of loadgen's tables (as given to loadgen)")
    .option('--json', 'print the report as JSON')
    .action(async (_o: unknown, cmd: Command) => {
      const o = cmd.optsWithGlobals() as LoadgenCliOptions;
      if (!o.log) throw invalidInput('--log is required: shardctl loadgen verify --log FILE');
      const config = loadConfig({ file: o.config });
      const report = await verifyLog({ logFile: o.log, config, ...(o.schema ? { schema: o.schema } : {}) });
      console.log(o.json ? JSON.stringify(report) : formatVerifyReport(report));
      if (!report.ok) process.exitCode = EXIT.failure;
    });
  examples(verify, 'loadgen verify --log load.jsonl', 'loadgen verify --log load.jsonl --json   # {ok, checked, missing, wrongValue, ...}');
}

export function formatVerifyReport(r: VerifyReport): string {
  const lines = [
    `${r.ok ? 'OK' : 'FAILED'}: ${r.checked} keys checked from ${r.records} records of ${r.logFile}; ${r.blobsChecked} blobs checked, ${r.unlinkedChecked} deleted blob names checked absent`,
    `  owners: ${
      Object.entries(r.owners)
        .map(([t, p]) => `${t}@${p.shard} (epoch ${p.epoch}, ${p.state})`)
        .join(', ') || 'none'
    }`,
    `  unknown outcomes: ${r.unknownOutcomes} (${r.ambiguousKeys} keys accepted in either state)`,
  ];
  // A split tenant's keys are checked on their sub-unit's owner: how many per unit.
  if (Object.keys(r.checkedByUnit).some((u) => u.includes(':')))
    lines.push(
      `  checked per unit: ${Object.entries(r.checkedByUnit)
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([u, n]) => `${u} ${n}`)
        .join(', ')}`,
    );
  const show = (title: string, xs: unknown[]) => {
    if (!xs.length) return;
    lines.push(`  ${title}: ${xs.length}`);
    for (const x of xs.slice(0, 20)) lines.push(`    ${JSON.stringify(x)}`);
    if (xs.length > 20) lines.push(`    ... ${xs.length - 20} more (use --json)`);
  };
  show('acked rows missing', r.missing);
  show('rows with a wrong value', r.wrongValue);
  show('refused writes that appeared', r.presentButRefused);
  show('deleted rows that exist', r.presentButDeleted);
  show('blobs missing or different', r.blobMissing);
  show('deleted blobs still in the index', r.blobPresentButDeleted);
  return lines.join('\n');
}
