// `shardctl rebalance plan|start|status|pause|resume|cancel`, `shards drain`, `tenant isolate`:
// the planner's dry run (lib/rebalance/plan.ts, read from the directory without writing) and the
// rebalance workflow (workflows/rebalance.ts) that runs a plan's moves. Start verbs show the plan
// first and refuse (exit 4, nothing started) a drain or isolate the fleet has no room for.
import { Command } from 'commander';
import { WorkflowNotFoundError, WorkflowUpdateFailedError } from '@temporalio/client';
import { knownShard, type Config } from '../../lib/config';
import { parseDurationMs } from '../../lib/duration';
import { invalidInput, ShardctlError } from '../../lib/errors';
import { validateTenantId } from '../../lib/ids';
import { validateUnitName } from '../../lib/unit-rows';
import { planFromDirectory } from '../../lib/rebalance/fleet';
import type { PlanScope, RebalancePlan } from '../../lib/rebalance/plan';
import { rebalanceInputFor, startRebalance } from '../../lib/rebalance/start';
import * as R from '../../workflows/rebalance-messages';
import * as M from '../../workflows/messages';
import { EXIT } from '../exit';
import { examples } from '../help';
import { confirmIrreversible, soakNeedsConfirmation } from '../confirm';
import { formatDurationSeconds } from '../../lib/duration';
import { actorDefault } from '../actor';
import { configOf, printResult, withConnections, withTemporal } from '../run';
import { tableFor } from '../../lib/text-table';
import { directoryNow, parsePlanFile, planMoveProblems } from '../../lib/rebalance/apply';
import fs from 'node:fs';
import { formatBytes } from '../../lib/move-progress';

function dryRun(
  config: Config,
  scope: PlanScope,
  opts: { tolerance?: number; units?: string[]; maxMoves?: number; headroomFraction?: number } = {},
  measure?: { windowMs: number; sampleRows?: number },
): Promise<RebalancePlan> {
  return withConnections(config, { readOnly: true, requireCurrentSchema: true }, (c) =>
    planFromDirectory(
      c.directoryPool(),
      config,
      scope,
      opts,
      measure ? { shardPool: c.shardPool, windowMs: measure.windowMs, sampleRows: measure.sampleRows } : undefined,
    ),
  );
}

/** `--max-moves K`: a whole number 1..100000, checked before any connection. */
function maxMovesOpt(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{1,6}$/.test(v) || Number(v) < 1 || Number(v) > 100_000)
    throw invalidInput(`--max-moves must be an integer in 1..100000, got ${JSON.stringify(v.slice(0, 40))}`);
  return Number(v);
}

/** `--sample-rows N`: a whole number 1000..100000000, checked before any connection. */
function sampleRowsOpt(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{4,9}$/.test(v) || Number(v) < 1000 || Number(v) > 100_000_000)
    throw invalidInput(`--sample-rows must be an integer in 1000..100000000, got ${JSON.stringify(v.slice(0, 40))}`);
  return Number(v);
}

function scopeText(s: PlanScope) {
  return s.kind === 'rebalance' ? 'rebalance the fleet' : s.kind === 'drain' ? `drain ${s.shard}` : `isolate ${s.tenant}`;
}

function printPlan(p: RebalancePlan) {
  const lines = [
    `plan: ${scopeText(p.scope)} — ${p.moves.length} move(s)${p.scope.kind === 'rebalance' ? (p.balanced ? ', ends balanced' : ', NOT balanced') : ''}`,
  ];
  const loadSource = new Map((p.measurement?.units ?? []).map((u) => [u.unit, u]));
  for (const m of p.moves) lines.push(`  move ${m.unit} ${m.from} -> ${m.to} (${moveSize(m, !!p.measurement, loadSource.get(m.unit))}): ${m.reason}`);
  if (p.dedicate) lines.push(`  then ${p.dedicate.shard} is dedicated to ${p.dedicate.tenant}`);
  const dedicated = p.shards.some((s) => s.dedicatedTo);
  const measured = !!p.measurement;
  const writes = new Map((p.measurement?.shards ?? []).map((x) => [x.shard, x.measured ? (x.writesPerSecond ?? '') : 'not measured']));
  lines.push(
    ...tableFor(process.stdout)({
      head: [
        'shard',
        'status',
        'capacity',
        'load before',
        'load after',
        ...(measured ? ['bytes before', 'bytes after', 'util before', 'util after', 'writes/s'] : []),
        'units before',
        'units after',
        ...(dedicated ? ['dedicated to'] : []),
      ],
      rows: p.shards.map((s) => [
        s.name,
        s.status,
        s.capacity,
        s.loadBefore,
        s.loadAfter,
        ...(measured
          ? [formatBytes(s.bytesBefore), formatBytes(s.bytesAfter), pctText(s.utilisationBefore), pctText(s.utilisationAfter), writes.get(s.name) ?? '']
          : []),
        s.unitsBefore,
        s.unitsAfter,
        ...(dedicated ? [s.dedicatedTo ?? ''] : []),
      ]),
      align: ['left', 'left', 'right', 'right', 'right', ...(measured ? (['right', 'right', 'right', 'right', 'right'] as const) : []), 'right', 'right'],
      indent: '  ',
    }),
  );
  if (p.measurement) {
    const r = p.measurement.copyRate;
    lines.push(
      `  sizes: ${p.measurement.method}`,
      r.rowsPerSecond === null
        ? '  durations: not estimated (no unthrottled copy measured yet: the `move.copied` audit entries of earlier moves)'
        : `  durations: at the copy rate ${r.fromMoves} earlier move(s) measured (${r.rowsPerSecond} rows/s${r.bytesPerSecond !== null ? `, ${formatBytes(r.bytesPerSecond)}/s` : ''})${r.throttledTo ? `, held to limits.rowsPerSecond ${r.throttledTo}` : ''}`,
    );
  }
  for (const d of p.dedicatedNeeded ?? []) lines.push(`  dedicated shard for ${d.unit}: ${d.commands.join('; then ')}`);
  for (const x of p.problems) lines.push(`  problem: ${x}`);
  console.log(lines.join('\n'));
}

const pctText = (f: number) => `${Math.round(f * 1000) / 10}%`;

/** A move's size: its load, and when measured its bytes, rows and expected copy time. */
function moveSize(m: RebalancePlan['moves'][number], measured: boolean, u?: NonNullable<RebalancePlan['measurement']>['units'][number]): string {
  if (!measured) return `load ${m.load} (expected)`;
  const eta =
    m.estimatedSeconds === null || m.estimatedSeconds === undefined ? 'copy time not estimated' : `copy ≈ ${formatDurationSeconds(m.estimatedSeconds)}`;
  const source = !u
    ? 'expected'
    : u.loadSource === 'measured'
      ? `measured ${u.writesPerSecond} writes/s > expected ${u.expectedLoad}`
      : u.writesPerSecond !== undefined
        ? `expected; measured ${u.writesPerSecond} writes/s`
        : 'expected';
  return `load ${m.load} (${source}), ${formatBytes(m.bytes)} in ${m.rows ?? 0} rows, ${eta}`;
}

function intOpt(v: string | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{1,4}$/.test(v)) throw invalidInput(`${name} must be a positive integer, got ${JSON.stringify(v.slice(0, 40))}`);
  return Number(v);
}

function numOpt(v: string | undefined, name: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw invalidInput(`${name} must be a non-negative number, got ${JSON.stringify(v.slice(0, 40))}`);
  return n;
}

export async function rebalanceStatus(config: Config): Promise<R.RebalanceStatus & { runningPhases: Record<string, string>; awaitingApproval: string[] }> {
  return withTemporal(config, async (client) => {
    let st: R.RebalanceStatus;
    try {
      st = await client.workflow.getHandle(config.temporal.rebalanceWorkflowId).query(R.rebalanceStatusQuery);
    } catch (e) {
      if (e instanceof WorkflowNotFoundError) throw new ShardctlError('NotFound', 'no rebalance has run: see `shardctl rebalance plan`');
      throw e;
    }
    // Each running move's own phase, and whether it waits for `move approve`, from the move itself.
    const runningPhases: Record<string, string> = {};
    const awaitingApproval: string[] = [];
    for (const m of st.moves.filter((x) => x.state === 'running')) {
      const ms = await client.workflow
        .getHandle(m.workflowId)
        .query(M.statusQuery)
        .catch(() => undefined);
      runningPhases[m.unit] = ms?.phase ?? 'unknown';
      if (ms?.awaitingApproval) awaitingApproval.push(m.unit);
    }
    return { ...st, runningPhases, awaitingApproval };
  });
}

function printStatus(s: Awaited<ReturnType<typeof rebalanceStatus>>) {
  const count = (k: R.PlannedMoveState) => s.moves.filter((m) => m.state === k).length;
  const lines = [
    `rebalance (${s.fromPlanFile ? 'apply a plan file' : scopeText(s.scope)}): ${s.phase}${s.paused ? ' (paused)' : ''} — ${count('done')} done, ${count('running')} running, ${count('pending')} pending, ${count('failed')} failed; plans ${s.plans}; at most ${s.maxConcurrent} at once, ${s.perShardLimit} per shard and direction${s.continuedAsNew ? `; continued as new ${s.continuedAsNew} time(s)` : ''}`,
  ];
  const note = (m: (typeof s.moves)[number]) =>
    [
      m.state === 'running'
        ? `phase ${s.runningPhases[m.unit]}${s.awaitingApproval.includes(m.unit) ? `, waiting for \`shardctl move approve ${m.unit}\`` : ''}`
        : '',
      m.result && m.result !== 'done' ? m.result : '',
    ]
      .filter(Boolean)
      .join('; ');
  lines.push(...tableFor(process.stdout)({ rows: s.moves.map((m) => [m.state, m.unit, `${m.from} -> ${m.to}`, note(m)]), indent: '  ' }));
  if (s.drain) lines.push(`  ${s.drain.shard}: ${s.drain.closed ? 'closed' : `not closed: ${s.drain.reasons.join('; ')}`}`);
  if (s.isolate?.undone) lines.push(`  ${s.isolate.shard}: dedication to ${s.isolate.tenant} undone: ${s.isolate.why}`);
  else if (s.isolate) {
    for (const x of s.isolate.state ?? []) lines.push(`  ${x}`);
    lines.push(`  to make ${s.isolate.shard} shared again: ${s.isolate.undoCommand}`);
  }
  for (const x of s.problems) lines.push(`  problem: ${x}`);
  const failed = s.moves.filter((m) => m.state === 'failed').map((m) => m.unit);
  if (failed.length)
    lines.push(`  failed: ${failed.join(', ')} (each blocked only itself${s.fromPlanFile ? '; a plan file is never re-planned: plan again for these' : ''})`);
  if (s.lastError) lines.push(`  last error: ${s.lastError}`);
  console.log(lines.join('\n'));
}

interface StartOpts {
  maxConcurrent?: string;
  perShard?: string;
  tolerance?: string;
  soak?: string;
  actor?: string;
  reason?: string;
  json?: boolean;
  wait?: boolean;
  units?: string;
  yes?: boolean;
  maxMoves?: string;
  approveCutover?: string;
}

const startOptions = (c: Command) =>
  c
    .option('--max-concurrent <n>', 'moves at once (default 2)')
    .option('--per-shard <n>', 'moves out of and into one shard at once, each direction (default 1)')
    .option('--soak <duration>', "each move's soak (default: config limits.soakSeconds)")
    .option('--approve-cutover <mode>', `${M.APPROVAL_MODES.join(' | ')} (manual: each move waits for \`move approve\` before its cutover)`, 'auto')
    .option('--actor <name>', "operator identity for the audit log (each move's starter too)")
    .option('--reason <text>', 'why (recorded in the audit log)')
    .option('--wait', 'wait for the run to end; exit 7 unless every move completed')
    .option('--json', 'print the plan (and with --wait the final status) as JSON')
    .option('--yes', 'confirm a --soak shorter than the default (or than 1h) without being asked');

/** What an operator types back to confirm a short soak: the tenant, the shard, or "rebalance". */
const scopeWord = (s: PlanScope) => (s.kind === 'isolate' ? s.tenant : s.kind === 'drain' ? s.shard : 'rebalance');

/** Shows the plan, refuses what cannot be done, starts the run, and with --wait follows it to its end. */
async function planAndStart(config: Config, scope: PlanScope, o: StartOpts) {
  const tolerance = numOpt(o.tolerance, '--tolerance');
  const soakSeconds = o.soak ? Math.round(parseDurationMs(o.soak, '--soak') / 1000) : undefined;
  const input = rebalanceInputFor(config, {
    scope,
    requestedBy: o.actor || actorDefault(),
    reason: o.reason,
    maxConcurrent: intOpt(o.maxConcurrent, '--max-concurrent'),
    perShardLimit: intOpt(o.perShard, '--per-shard'),
    tolerance,
    maxMoves: maxMovesOpt(o.maxMoves),
    soakSeconds,
    units: o.units ? o.units.split(',').map((u) => validateUnitName(u.trim())) : undefined,
    approveCutover: o.approveCutover as 'auto' | 'manual' | undefined,
  });
  const plan = await dryRun(config, scope, { tolerance, units: input.units, maxMoves: input.maxMoves });
  printResult(o.json, { plan }, () => printPlan(plan));
  if (scope.kind !== 'rebalance' && plan.problems.length) throw new ShardctlError('NoCapacity', `refused, nothing started: ${plan.problems[0]}`);
  // A drain with nothing left to move still runs: its end closes the shard.
  if (!plan.moves.length && !plan.dedicate && scope.kind !== 'drain') {
    if (!o.json) console.log('nothing to move: no run started');
    return;
  }
  // A short soak shortens every move's way back: each source copy is deleted that much sooner.
  if (soakSeconds !== undefined && !o.yes && soakNeedsConfirmation(soakSeconds, config.limits.soakSeconds)) {
    await confirmIrreversible({
      action: `${scopeText(scope)} with a ${formatDurationSeconds(soakSeconds)} soak per move (default ${formatDurationSeconds(config.limits.soakSeconds)})`,
      details: plan.moves.map((m) => `  ${m.unit}: its copy on ${m.from} is deleted ${formatDurationSeconds(soakSeconds)} after its switch to ${m.to}`),
      typeBack: scopeWord(scope),
    });
  }
  await withTemporal(config, async (client) => {
    const h = await startRebalance(client, config.temporal.taskQueue, input, config.temporal.rebalanceWorkflowId);
    if (!o.json) console.log(`started ${scopeText(scope)}: workflow ${h.workflowId}; follow with \`shardctl rebalance status\``);
    if (!o.wait) return;
    const st: R.RebalanceStatus = await h.result();
    printResult(o.json, { status: st }, () => printStatus({ ...st, runningPhases: {}, awaitingApproval: [] }));
    if (st.phase !== 'done') process.exitCode = EXIT.moveFailed;
  });
}

/**
 * `rebalance apply --plan FILE`: exactly the moves of a saved plan, checked against the directory
 * now; a stale or invalid plan is refused (exit 4), one reason per bad move, and nothing starts.
 */
async function applyPlanFile(config: Config, file: string, o: StartOpts & { concurrency?: string }) {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e: any) {
    throw invalidInput(`cannot read the plan file ${file}: ${e?.code ?? e?.message ?? e}`);
  }
  const moves = parsePlanFile(text, file);
  const concurrency = intOpt(o.concurrency, '--concurrency');
  const maxConcurrent = intOpt(o.maxConcurrent, '--max-concurrent');
  if (concurrency !== undefined && maxConcurrent !== undefined && concurrency !== maxConcurrent)
    throw invalidInput(`--concurrency ${concurrency} and --max-concurrent ${maxConcurrent} disagree: give one`);
  const soakSeconds = o.soak ? Math.round(parseDurationMs(o.soak, '--soak') / 1000) : undefined;
  const input = {
    ...rebalanceInputFor(config, {
      scope: { kind: 'rebalance' },
      requestedBy: o.actor || actorDefault(),
      reason: o.reason,
      maxConcurrent: concurrency ?? maxConcurrent,
      perShardLimit: intOpt(o.perShard, '--per-shard'),
      soakSeconds,
      approveCutover: o.approveCutover as 'auto' | 'manual' | undefined,
    }),
    planned: { moves },
  };
  const problems = await withConnections(config, { readOnly: true, requireCurrentSchema: true }, async (c) =>
    planMoveProblems(moves, await directoryNow(c.directoryPool(), config)),
  );
  if (problems.length)
    throw new ShardctlError(
      'PreconditionFailed',
      [`refused, nothing started: ${problems.length} problem(s) with ${file}`, ...problems.map((p) => `  ${p}`)].join('\n'),
    );
  if (!o.json) {
    console.log(`plan ${file}: ${moves.length} move(s), checked against the directory now`);
    for (const m of moves) console.log(`  move ${m.unit} ${m.from} -> ${m.to}`);
  }
  if (!moves.length) {
    if (!o.json) console.log('nothing to move: no run started');
    else printResult(true, { moves, started: false }, () => undefined);
    return;
  }
  if (soakSeconds !== undefined && !o.yes && soakNeedsConfirmation(soakSeconds, config.limits.soakSeconds)) {
    await confirmIrreversible({
      action: `apply ${file} with a ${formatDurationSeconds(soakSeconds)} soak per move (default ${formatDurationSeconds(config.limits.soakSeconds)})`,
      details: moves.map((m) => `  ${m.unit}: its copy on ${m.from} is deleted ${formatDurationSeconds(soakSeconds)} after its switch to ${m.to}`),
      typeBack: 'rebalance',
    });
  }
  await withTemporal(config, async (client) => {
    const h = await startRebalance(client, config.temporal.taskQueue, input, config.temporal.rebalanceWorkflowId);
    if (!o.json)
      console.log(`started applying ${file}: workflow ${h.workflowId}, at most ${input.maxConcurrent} at once; follow with \`shardctl rebalance status\``);
    if (!o.wait) {
      if (o.json) printResult(true, { moves, started: true, workflowId: h.workflowId }, () => undefined);
      return;
    }
    const st: R.RebalanceStatus = await h.result();
    printResult(o.json, { status: st }, () => printStatus({ ...st, runningPhases: {}, awaitingApproval: [] }));
    if (st.phase !== 'done') process.exitCode = EXIT.moveFailed;
  });
}

async function sendUpdate(config: Config, update: typeof R.rebalancePauseUpdate, actor: string, reason?: string) {
  await withTemporal(config, async (client) => {
    try {
      console.log(await client.workflow.getHandle(config.temporal.rebalanceWorkflowId).executeUpdate(update, { args: [{ actor, reason }] }));
    } catch (e: any) {
      if (e instanceof WorkflowNotFoundError) throw new ShardctlError('NotFound', 'no rebalance is running');
      if (e instanceof WorkflowUpdateFailedError) throw new ShardctlError('PreconditionFailed', e.cause?.message ?? e.message);
      throw e;
    }
  });
}

export function register(program: Command) {
  const cfg = configOf(program);
  const rebalance = program.command('rebalance').description('even the load over the shards: plan the moves, run them as one workflow');

  const plan = rebalance
    .command('plan')
    .description('dry run: the moves a rebalance would make now, and why (changes nothing)')
    .option('--tolerance <f>', "how far (relative) a shard's utilisation may be from the fleet mean (default 0.2)")
    .option('--max-moves <k>', 'at most K moves (the plan says what it left undone)')
    .option('--headroom <f>', 'fraction of each shard kept free: every shard is brought under 1 − f of its capacity (default: config limits.headroomFraction)')
    .option('--rate-window <duration>', "how long to sample each shard's write counters for writes/s (0: skip)", '1s')
    .option('--sample-rows <n>', 'a table its statistics put above N rows is measured by a block sample, below it exactly (default 100000)')
    .option(
      '--json',
      'as JSON: {scope, moves: [{unit, from, to, load, bytes, rows, estimatedSeconds, reason}], shards: [{..., bytesBefore, bytesAfter, utilisationBefore, utilisationAfter}], balanced, problems, dedicatedNeeded, measurement}',
    )
    .action(async (o: { tolerance?: string; maxMoves?: string; headroom?: string; rateWindow?: string; sampleRows?: string; json?: boolean }) => {
      const headroomFraction = numOpt(o.headroom, '--headroom');
      if (headroomFraction !== undefined && headroomFraction >= 1) throw invalidInput(`--headroom must be below 1, got ${o.headroom}`);
      const windowMs = o.rateWindow === undefined ? 1000 : parseDurationMs(o.rateWindow, '--rate-window');
      const opts = { tolerance: numOpt(o.tolerance, '--tolerance'), maxMoves: maxMovesOpt(o.maxMoves), headroomFraction };
      const sampleRows = sampleRowsOpt(o.sampleRows);
      const p = await dryRun(cfg(), { kind: 'rebalance' }, opts, { windowMs, sampleRows });
      printResult(o.json, p, printPlan, { pretty: true });
    });
  examples(plan, 'rebalance plan', 'rebalance plan --headroom 0.3 --max-moves 5', "rebalance plan --json | jq '.moves[] | [.unit, .from, .to] | @tsv'");

  const start = startOptions(rebalance.command('start').description('plan and run the moves (one rebalance at a time)'))
    .option('--tolerance <f>', 'band around the fleet mean (default 0.2)')
    .option('--units <list>', 'only these units may move (comma-separated tenants or buckets, bucket:DS:N); the others count for load')
    .option('--max-moves <k>', 'at most K moves in the whole run, re-plans after a failure included');
  start.action((o: StartOpts) => planAndStart(cfg(), { kind: 'rebalance' }, o));
  const apply = startOptions(
    rebalance
      .command('apply')
      .description('run exactly the moves of a plan saved by `rebalance plan --json` (checked against the directory first; never re-planned)'),
  )
    .requiredOption('--plan <file>', "the plan: `rebalance plan --json > FILE` (only each move's unit, from and to are read)")
    .option('--concurrency <n>', 'moves at once (the same as --max-concurrent; default 2)');
  apply.action((o: StartOpts & { plan: string; concurrency?: string }) => applyPlanFile(cfg(), o.plan, o));
  examples(
    apply,
    'rebalance apply --plan plan.json --concurrency 2   # plan.json saved by rebalance plan --json',
    'rebalance apply --plan plan.json --concurrency 2 --wait --json',
  );

  examples(start, 'rebalance start', 'rebalance start --max-concurrent 4 --per-shard 2 --soak 1h --wait', 'rebalance start --max-moves 10');

  const status = rebalance
    .command('status')
    .description('the latest rebalance run: each move and its state')
    .option('--json', 'as JSON: {phase, scope, moves: [{unit, from, to, state, result}], runningPhases, awaitingApproval, problems, ...}')
    .action(async (o: { json?: boolean }) => {
      const s = await rebalanceStatus(cfg());
      printResult(o.json, s, printStatus, { pretty: true });
    });
  examples(status, 'rebalance status', "rebalance status --json | jq -r '.phase'");

  for (const [verb, update, what] of [
    ['pause', R.rebalancePauseUpdate, 'start no further move (running ones go on)'],
    ['resume', R.rebalanceResumeUpdate, 'start moves again'],
    ['cancel', R.rebalanceCancelUpdate, 'drop pending moves and cancel running ones (a move past its switch finishes)'],
  ] as const) {
    const c = rebalance
      .command(verb)
      .description(what)
      .option('--actor <name>', 'operator identity for the audit log')
      .option('--reason <text>', 'why')
      .action((o: { actor?: string; reason?: string }) => sendUpdate(cfg(), update, o.actor || actorDefault(), o.reason));
    examples(c, `rebalance ${verb}`, `rebalance ${verb} --reason "maintenance window"`);
  }

  const shards = program.commands.find((c) => c.name() === 'shards')!;
  const drain = startOptions(shards.command('drain').description('move every unit off a shard (marked draining: nothing new goes there)')).requiredOption(
    '--shard <name>',
    'shard to drain',
  );
  drain.action((o: StartOpts & { shard: string }) => {
    const config = cfg();
    knownShard(config, o.shard);
    return planAndStart(config, { kind: 'drain', shard: o.shard }, o);
  });
  examples(
    drain,
    'shards drain --shard shard-c',
    'shards drain --shard shard-c --max-concurrent 3 --wait --json',
    'shards drain --shard shard-c --approve-cutover manual --actor alice   # each move waits for `move approve` (by another operator under approvals.requireDistinctApprover)',
  );

  const tenant = program.commands.find((c) => c.name() === 'tenant')!;
  const isolate = startOptions(
    tenant.command('isolate').description('give a tenant a shard of its own (moves it to an empty shard, or the others off its shard)'),
  )
    .requiredOption('--tenant <id>', 'tenant to isolate')
    .option('--to <shard>', 'the empty shard to dedicate to it (e.g. one added with `shards add --class dedicated`); default: chosen by the planner');
  isolate.action((o: StartOpts & { tenant: string; to?: string }) => {
    const config = cfg();
    if (o.to) knownShard(config, o.to);
    return planAndStart(config, { kind: 'isolate', tenant: validateTenantId(o.tenant), ...(o.to ? { to: o.to } : {}) }, o);
  });
  examples(isolate, 'tenant isolate --tenant acme', 'tenant isolate --tenant acme --to shard-e --wait');
}
