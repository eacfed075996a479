// `shardctl move start|plan|status|wait|watch|list|cancel|approve|rollback|retire|pause|resume|throttle|extend-soak`.
// Bad input is refused with a one-line reason before anything is sent. Failures are typed
// (lib/errors.ts) and cli/exit.ts turns each into its exit code.
import { Command } from 'commander';
import { WorkflowNotFoundError, WorkflowUpdateFailedError, type WorkflowExecutionInfo } from '@temporalio/client';
import { moveInputFor, startMove, MOVE_WORKFLOW_TYPE } from '../../lib/moves/start';
import { createDeps } from '../../activities/deps';
import { createPlanActivities, type PlanResult } from '../../activities/move/plan';
import { knownShard, Config } from '../../lib/config';
import { validateTenantId, moveWorkflowId } from '../../lib/ids';
import { parseDurationMs } from '../../lib/duration';
import { invalidInput, ShardctlError } from '../../lib/errors';
import * as M from '../../workflows/messages';
import { isPhase, isTerminal, phaseReached, PHASES, sameApproverRefusal } from '../../workflows/phases';
import { SA } from '../../workflows/search-attributes';
import { formatBytes, formatCopyEstimate, formatCutoverPauses, formatTableProgress, withCopyProgress } from '../../lib/move-progress';
import { jsonLinesRenderer, progressRenderer, type ProgressRenderer } from '../progress';
import { requireCurrentDirectorySchema } from '../../lib/directory/schema';
import { exitCodeFor } from '../exit';
import { examples } from '../help';
import { configOf, printResult, withConnections, withTemporal } from '../run';
import { actorDefault } from '../actor';
import { confirmIrreversible, soakNeedsConfirmation } from '../confirm';
import { getPlacement } from '../../lib/directory/placements';
import { unitFromOptions, validateUnitName } from '../../lib/unit-rows';
import { formatDeletionPreview, previewUnitDeletion } from '../../lib/moves/deletion-preview';
import { formatDurationSeconds } from '../../lib/duration';
import { isTerminalStream, tableFor } from '../../lib/text-table';

export async function moveStatus(config: Config, tenant: string): Promise<M.MoveStatus> {
  validateUnitName(tenant);
  return withTemporal(config, async (client) => {
    try {
      return await client.workflow.getHandle(moveWorkflowId(tenant)).query(M.statusQuery);
    } catch (e) {
      if (e instanceof WorkflowNotFoundError) throw new ShardctlError('NotFound', `no move found for tenant ${tenant}`);
      throw e;
    }
  });
}

/**
 * Polls the move's status every 500 ms, showing each sample on `renderer`, until `done(status)`
 * holds (or throws); returns that status. The renderer is stopped however it ends.
 */
async function followMove(config: Config, tenant: string, renderer: ProgressRenderer | undefined, done: (s: M.MoveStatus) => boolean): Promise<M.MoveStatus> {
  // Ctrl-C: give the terminal back (cursor, line wrapping) before leaving, as a shell expects (130).
  const onInt = () => {
    renderer?.stop();
    process.exit(130);
  };
  process.once('SIGINT', onInt);
  try {
    for (;;) {
      const s = await moveStatus(config, tenant);
      renderer?.update(s);
      if (done(s)) return s;
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    process.removeListener('SIGINT', onInt);
    renderer?.stop();
  }
}

/** What deleting the unit's copy on `shard` would remove, read with read-only sessions. */
async function deletionLines(config: Config, shard: string, tenant: string): Promise<string[]> {
  const preview = await withConnections(config, { readOnly: true }, (conns) => previewUnitDeletion(config, conns, shard, tenant));
  // Printed on stderr (before the question, or with the refusal): boxed only when that is a terminal.
  return formatDeletionPreview(preview, isTerminalStream(process.stderr));
}

/** The tenant's current shard (the source a move would delete from), read-only. */
async function currentShard(config: Config, tenant: string): Promise<string> {
  const p = await withConnections(config, { readOnly: true, requireCurrentSchema: true }, (conns) => getPlacement(conns.directoryPool(), tenant));
  if (!p) throw new ShardctlError('NotFound', `no unit ${tenant} in the directory`);
  return p.shard;
}

/** The plan activity's checks, as `move plan` and `move start` both run them (read-only: changes nothing). */
async function planFromCli(config: Config, unit: string, target: string): Promise<PlanResult> {
  const deps = createDeps(config);
  try {
    await requireCurrentDirectorySchema(deps.directoryPool());
    return await createPlanActivities(deps).planMove({ unit, target });
  } finally {
    await deps.close();
  }
}

/** A move of `unit` already running: refused before any check, naming it (as startMove would). */
async function refuseIfMoving(config: Config, unit: string): Promise<void> {
  const workflowId = moveWorkflowId(unit);
  const running = await withTemporal(config, (client) =>
    client.workflow
      .getHandle(workflowId)
      .describe()
      .then(
        (d) => d.status.name === 'RUNNING',
        (e) => {
          if (e instanceof WorkflowNotFoundError) return false;
          throw e;
        },
      ),
  );
  if (running) throw new ShardctlError('AlreadyExists', `a move of ${unit} is already running: workflow ${workflowId}; see \`shardctl move status ${unit}\``);
}

/** `--rows-per-second`: a non-negative integer (0 = unlimited); anything else is bad usage, sent nowhere. */
export function parseRowsPerSecond(v: unknown): number {
  const text = String(v ?? '').trim();
  const n = Number(text);
  if (!/^\d{1,15}$/.test(text) || !Number.isSafeInteger(n))
    throw invalidInput(`--rows-per-second must be a non-negative integer (0 = unlimited), got ${JSON.stringify(String(v ?? '').slice(0, 40))}`);
  return n;
}

/** The plan's blob line: what the source holds, and which final blob delta the write pause will carry. */
export function formatBlobCensus(b: NonNullable<PlanResult['blobs']>): string {
  const copies =
    b.toCopy && b.unreferenced
      ? ` (the move copies ${b.toCopy.objects}, ≈ ${formatBytes(b.toCopy.bytes)}; ${b.unreferenced} superseded or deleted version(s) no index row names stay for the collector)`
      : '';
  const counted = `${b.truncated ? 'at least ' : ''}${b.objects} object(s), ≈ ${formatBytes(b.bytes)}${copies}`;
  if (b.objects === 0) return `blobs: none yet; the cutover's final blob delta lists the (empty) prefix`;
  if (b.windowDelta === 'index')
    return `blobs: ${counted}, every one${b.truncated ? ` of the first ${b.objects}` : ''} written through the blob index; the cutover's final blob delta is the index rows changed since the last sync`;
  return `blobs: ${counted}, ${b.unversioned} not written through the blob index; the cutover's final blob delta lists the whole prefix inside the write pause (its cost grows with the objects; docs/architecture.md, "Migrating to the index")`;
}

function printPlan(tenant: string, to: string, p: PlanResult) {
  const lines = [`plan: move ${tenant} from ${p.source || '?'} (epoch ${p.epoch}) to ${to} — ${p.ok ? 'ready' : 'REFUSED'}`];
  for (const r of p.reasons) lines.push(`  refused: ${r}`);
  lines.push(
    ...tableFor(process.stdout)({
      rows: p.tables.map((t) => [`copy ${t.table}`, `${t.rowsEstimated} rows${t.bytesEstimated !== undefined ? `, ≈ ${formatBytes(t.bytesEstimated)}` : ''}`]),
      indent: '  ',
    }),
  );
  if (p.copyEstimate) lines.push(`  ${formatCopyEstimate(p.copyEstimate, formatDurationSeconds)}`);
  if (p.blobs) lines.push(`  ${formatBlobCensus(p.blobs)}`);
  if (p.cutoverSteps?.length) {
    lines.push('  then catch up until the lag is below the threshold, validate every row and blob, and cut over:');
    p.cutoverSteps.forEach((s, i) => lines.push(`    ${i + 1}. ${s}`));
  }
  console.log(lines.join('\n'));
}

/** One move as `move list --json` prints it (a stable shape: fields are only ever added). */
export interface MoveListEntry {
  workflowId: string;
  runId: string;
  tenant: string | null;
  /** Temporal's execution status: RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, ... */
  status: string;
  phase: string | null;
  source: string | null;
  target: string | null;
  blockedReason: string | null;
  startTime: string;
  closeTime: string | null;
}

function moveListEntry(w: WorkflowExecutionInfo): MoveListEntry {
  const a = w.typedSearchAttributes;
  return {
    workflowId: w.workflowId,
    runId: w.runId,
    tenant: a.get(SA.unit) ?? null,
    status: w.status.name,
    phase: a.get(SA.phase) ?? null,
    source: a.get(SA.source) ?? null,
    target: a.get(SA.target) ?? null,
    blockedReason: a.get(SA.blockedReason) ?? null,
    startTime: w.startTime.toISOString(),
    closeTime: w.closeTime?.toISOString() ?? null,
  };
}

function printStatus(s: M.MoveStatus) {
  const lines = [`move ${s.moveId} of ${s.tenant}: ${s.source || '?'} -> ${s.target}, phase ${s.phase}${s.paused ? ' (paused)' : ''}, epoch ${s.epoch}`];
  if (s.blockedReason) lines.push(`  blocked: ${s.blockedReason}`);
  lines.push(...tableFor(process.stdout)({ rows: s.tables.map((t) => [t.table, formatTableProgress(t)]), indent: '  ' }));
  lines.push(`  blobs ${s.blobs.copied} copied of ${s.blobs.total} (${s.blobs.bytes} bytes)`);
  lines.push(`  lag ${s.lagBytes} bytes (${s.lagSeconds}s)${s.etaSeconds !== null ? `, copy ETA ${s.etaSeconds}s` : ''}`);
  if (s.cutoverPauseMs !== null) {
    const steps = s.cutoverSteps
      ? ` — ${Object.entries(s.cutoverSteps)
          .map(([k, v]) => `${k} +${v}`)
          .join(', ')} ms`
      : '';
    const b = s.cutoverBlobSync;
    const blobs = b
      ? `; final blob delta ${b.via === 'index' ? `via the blob index: ${b.objects} changed name(s)` : `by listing the prefix: ${b.objects} object(s)`}, ${b.copied} copied`
      : '';
    lines.push(`  cutover ${formatCutoverPauses(s)}${steps}${blobs}`);
  } else if (s.cutoverAttempts) lines.push(`  cutover ${formatCutoverPauses(s)}`);
  if (s.soakEndsAt) lines.push(`  soak ends ${s.soakEndsAt}`);
  if (s.validation.ok === false) lines.push(...s.validation.mismatches.map((m) => `  mismatch: ${m}`));
  if (s.lastError) lines.push(`  last error: ${s.lastError}`);
  lines.push(
    `  operators: ${Object.entries(s.operators)
      .map(([k, v]) => `${k}=${v}`)
      .join(' ')}`,
  );
  console.log(lines.join('\n'));
}

export function register(program: Command) {
  const move = program.command('move').description('tenant moves');
  const cfg = configOf(program);

  const start = move
    .command('start')
    .description("start moving a tenant to another shard (`move plan`'s checks first: refused with its reasons, exit 4, nothing started)")
    .option('--tenant <id>', 'tenant to move')
    .option('--unit <unit>', 'or: the routing unit to move (a tenant, or a bucket bucket:<dataset>:<n>)')
    .requiredOption('--to <shard>', 'target shard')
    .option('--soak <duration>', 'how long the source is kept as the way back', '')
    .option('--approve-cutover <mode>', `${M.APPROVAL_MODES.join(' | ')} (manual waits for \`move approve\`)`, 'auto')
    .option('--actor <name>', 'operator identity for the audit log')
    .option('--yes', 'confirm a --soak shorter than the default (or than 1h) without being asked')
    .action(async (o) => {
      const config = cfg();
      const tenant = unitFromOptions(o, validateTenantId, config);
      knownShard(config, o.to);
      if (o.approveCutover !== 'auto' && o.approveCutover !== 'manual')
        throw invalidInput(`--approve-cutover must be auto or manual, got ${JSON.stringify(o.approveCutover)}`);
      const soakSeconds = o.soak ? Math.round(parseDurationMs(o.soak, '--soak') / 1000) : config.limits.soakSeconds;
      // `move plan`'s checks, the same code with the same words: a refused move is not started.
      // The workflow's own plan runs them again (the state may change in between).
      await refuseIfMoving(config, tenant);
      const plan = await planFromCli(config, tenant, o.to);
      if (!plan.ok) throw new ShardctlError('PreconditionFailed', `move start refused, nothing started: ${plan.reasons.join('; ')}`);
      // A short soak shortens the way back: the source copy is deleted that much sooner.
      if (o.soak && !o.yes && soakNeedsConfirmation(soakSeconds, config.limits.soakSeconds)) {
        const source = await currentShard(config, tenant);
        await confirmIrreversible({
          action: `start a move of ${tenant} with a ${formatDurationSeconds(soakSeconds)} soak (default ${formatDurationSeconds(config.limits.soakSeconds)})`,
          details: [
            `  the source copy stays the way back for only ${formatDurationSeconds(soakSeconds)} after the switch; then it is deleted:`,
            ...(await deletionLines(config, source, tenant)),
          ],
          typeBack: tenant,
        });
      }
      const input = moveInputFor(config, { tenant, target: o.to, soakSeconds, approveCutover: o.approveCutover, requestedBy: o.actor || actorDefault() });
      await withTemporal(config, async (client) => {
        const h = await startMove(client, config.temporal.taskQueue, input, { source: await currentShard(config, tenant).catch(() => undefined) });
        console.log(`started move of ${tenant} to ${o.to}: workflow ${h.workflowId} run ${h.firstExecutionRunId}`);
      });
    });
  examples(
    start,
    'move start --tenant acme --to shard-c',
    'move start --tenant acme --to shard-c --soak 24h --approve-cutover manual --actor alice --yes   # a soak under the default asks, or needs --yes',
  );

  const plan = move
    .command('plan')
    .description('dry run: every preflight check of `move start`, the tables, and the cutover steps the move would take; changes nothing')
    .option('--tenant <id>', 'tenant to move')
    .option('--unit <unit>', 'or: the routing unit to move (a tenant, or a bucket bucket:<dataset>:<n>)')
    .requiredOption('--to <shard>', 'target shard')
    .option('--json', 'machine-readable')
    .action(async (o) => {
      const config = cfg();
      const tenant = unitFromOptions(o, validateTenantId, config);
      knownShard(config, o.to);
      const p = await planFromCli(config, tenant, o.to);
      printResult(o.json, p, (x) => printPlan(tenant, o.to, x), { pretty: true });
      // Refused by the current state: the reasons are the output, the code says so too.
      if (!p.ok) process.exitCode = exitCodeFor('PreconditionFailed');
    });
  examples(
    plan,
    'move plan --tenant acme --to shard-c',
    'move plan --tenant acme --to shard-c --json   # {ok, reasons, source, epoch, moveId, tables: [{table, rowsEstimated, bytesEstimated}], cutoverSteps, copyEstimate, blobs}',
  );

  const status = move
    .command('status <tenant>')
    .description("a move's phase, per-table copy progress, lag, ETA, cutover pause and operators (the workflow's status query)")
    .option('--json', 'machine-readable: the status query plus copy totals (README "Operating moves")')
    .action(async (tenant, o) => {
      const s = await moveStatus(cfg(), tenant);
      if (o.json) console.log(JSON.stringify(withCopyProgress(s), null, 2));
      else printStatus(s);
    });
  examples(status, 'move status acme', 'move status acme --json | jq .copy.percent');

  const wait = move
    .command('wait <tenant>')
    .description(
      `wait until the move reaches a phase (or passes it), drawing its progress on stderr (bars on a terminal, lines when piped). Exit 6 on timeout, 7 if it ends failed or cancelled`,
    )
    .requiredOption('--phase <phase>', `phase to wait for: ${PHASES.join(' | ')}`)
    .option('--timeout <duration>', 'give up after', '10m')
    .option('--json', 'print the final status (as `move status --json`) on stdout, and no progress')
    .action(async (tenant, o) => {
      if (!isPhase(o.phase)) throw invalidInput(`unknown phase ${JSON.stringify(o.phase)}`);
      const deadline = Date.now() + parseDurationMs(o.timeout, '--timeout');
      const config = cfg();
      // With --json, stderr carries only the error (one JSON line) if there is one.
      const s = await followMove(config, tenant, o.json ? undefined : progressRenderer(process.stderr, tenant), (x) => {
        if (phaseReached(x.phase, o.phase)) return true;
        if (isTerminal(x.phase))
          throw new ShardctlError('MoveFailed', `move ended in ${x.phase} before reaching ${o.phase}${x.lastError ? `: ${x.lastError}` : ''}`);
        if (Date.now() > deadline)
          throw new ShardctlError(
            'TimedOut',
            `timed out waiting for ${o.phase}; move is in ${x.phase}${x.blockedReason ? ` (blocked: ${x.blockedReason})` : ''}`,
          );
        return false;
      });
      if (o.json) console.log(JSON.stringify(withCopyProgress(s), null, 2));
    });
  examples(wait, 'move wait acme --phase soak --timeout 30m', 'move wait acme --phase done --json > final-status.json');

  const watch = move
    .command('watch <tenant>')
    .description(
      "follow a move's progress until it ends (done, cancelled, rolled back or failed) or Ctrl-C: per-table bars with rate and ETA, lag, the phase timeline and the cutover pause on a terminal; plain lines when piped. Exit 0 when the move ends, whatever its end (`move wait` is the one with exit codes for scripts)",
    )
    .option('--json', 'instead: the status (as `move status --json`, on one line) each time it changes, until the move ends; the last line has its end phase')
    .action(async (tenant, o: { json?: boolean }) => {
      const renderer = o.json ? jsonLinesRenderer(process.stdout) : progressRenderer(process.stdout, tenant);
      const s = await followMove(cfg(), tenant, renderer, (x) => isTerminal(x.phase));
      // With --json every line is a status: the end is the last line's phase, not a sentence.
      if (!o.json) console.log(`${tenant}: move ${s.moveId} ended ${s.phase}${s.lastError ? `: ${s.lastError}` : ''}`);
    });
  examples(
    watch,
    'move watch acme',
    'move watch acme | tee move-acme.log   # plain lines when piped',
    "move watch acme --json | jq -c '{phase, copy: .copy.percent, lagSeconds}'",
  );

  const list = move
    .command('list')
    .description('list moves (Temporal visibility), e.g. --phase validate for moves stuck there')
    .option('--phase <phase>', `only moves in this phase: ${PHASES.join(' | ')}`)
    .option('--blocked', 'only moves with a blocked reason')
    .option('--json', 'as JSON: {moves: [{workflowId, runId, tenant, status, phase, source, target, blockedReason, startTime, closeTime}]}')
    .action(async (o) => {
      if (o.phase && !isPhase(o.phase)) throw invalidInput(`unknown phase ${JSON.stringify(o.phase)}`);
      const q = [`WorkflowType = '${MOVE_WORKFLOW_TYPE}'`];
      if (o.phase) q.push(`ShardctlPhase = '${o.phase}'`);
      if (o.blocked) q.push(`ShardctlBlockedReason IS NOT NULL`);
      await withTemporal(cfg(), async (client) => {
        const moves: MoveListEntry[] = [];
        for await (const w of client.workflow.list({ query: q.join(' AND ') })) moves.push(moveListEntry(w));
        if (o.json) console.log(JSON.stringify({ moves }, null, 2));
        else if (moves.length === 0) console.log('no moves');
        else
          for (const line of tableFor(process.stdout)({
            head: ['workflow', 'status', 'phase', 'from → to', 'blocked'],
            rows: moves.map((m) => [m.workflowId, m.status, m.phase ?? '', `${m.source ?? '?'} → ${m.target ?? '?'}`, m.blockedReason ?? '']),
          }))
            console.log(line);
      });
    });
  examples(list, 'move list', 'move list --phase validate --blocked', 'move list --json | jq -r \'.moves[] | select(.status == "RUNNING") | .tenant\'');

  interface VerbSpec {
    /** Options of its own (after --actor and --reason), and what they add to the update's argument. */
    options?: (c: Command) => Command;
    payload?: (o: any) => object;
    /** Runs before the update is sent: a verb that cannot be undone asks here, a forbidden one refuses. */
    confirm?: (tenant: string, o: any, config: Config) => Promise<void>;
    example?: string;
  }
  const verb = (name: string, update: any, desc: string, spec: VerbSpec = {}) => {
    let c = move
      .command(`${name} <tenant>`)
      .description(desc)
      .option('--actor <name>', 'operator identity for the audit log (default: $SHARDCTL_ACTOR, else $USER)')
      .option('--reason <text>', 'why, for the audit log');
    if (spec.options) c = spec.options(c);
    examples(c, `move ${name} acme${spec.example ?? ''} --actor alice --reason "ticket OPS-123"`);
    c.action(async (tenant, o) => {
      validateUnitName(tenant);
      const config = cfg();
      const arg = { actor: o.actor || actorDefault(), reason: o.reason, ...(spec.payload ? spec.payload(o) : {}) };
      if (spec.confirm) await spec.confirm(tenant, o, config);
      await withTemporal(config, async (client) => {
        try {
          const r = await client.workflow.getHandle(moveWorkflowId(tenant)).executeUpdate(update, { args: [arg] });
          console.log(`${tenant}: ${r}`);
        } catch (e: any) {
          if (e instanceof WorkflowNotFoundError) throw new ShardctlError('NotFound', `no running move for tenant ${tenant}`);
          // The workflow's handler refused (its reason is the cause); anything else, e.g. Temporal
          // going away mid-call, is mapped by its own type.
          if (e instanceof WorkflowUpdateFailedError) throw new ShardctlError('PreconditionFailed', `${name} refused: ${e.cause?.message ?? e.message}`);
          throw e;
        }
      });
    });
  };
  verb('cancel', M.cancelUpdate, 'undo a move before its switch; audited when done (move.cancelled, with the operator and reason)');
  verb('approve', M.approveUpdate, 'approve a manual cutover (with approvals.requireDistinctApprover, not by the operator who started the move)', {
    // The workflow refuses it for moves started under the setting; this holds it for the others too.
    async confirm(tenant, o, config) {
      if (!config.approvals.requireDistinctApprover) return;
      const s = await moveStatus(config, tenant);
      const why = sameApproverRefusal(o.actor || actorDefault(), s.operators.startedBy);
      if (why) throw new ShardctlError('Forbidden', `approve refused: ${why}`);
    },
  });
  verb('rollback', M.rollbackUpdate, 'switch back to the source during soak (loses no write); audited when done (move.rolled-back)');
  verb(
    'retire',
    M.retireNowUpdate,
    'end soak now and delete the source copy (irreversible: prints what it deletes, asks on a terminal, needs --yes elsewhere)',
    {
      options: (c) => c.option('--yes', 'confirm the deletion without being asked'),
      example: ' --yes',
      async confirm(tenant, o, config) {
        if (o.yes) return;
        const s = await moveStatus(config, tenant);
        // Outside soak the workflow refuses retire with its own reason: nothing would be deleted.
        if (s.phase !== 'soak') return;
        await confirmIrreversible({
          action: `retire the source copy of ${tenant} on ${s.source} (the way back; move ${s.moveId})`,
          details: await deletionLines(config, s.source, tenant),
          typeBack: tenant,
        });
      },
    },
  );
  verb('pause', M.pauseUpdate, 'pause copy / catch-up; audited (move.pause)');
  verb('resume', M.resumeUpdate, 'resume (or re-validate after a mismatch); audited (move.resume)');
  verb('throttle', M.throttleUpdate, "limit the rows per second of a running move's copy and catch-up (0 = unlimited); audited", {
    options: (c) => c.requiredOption('--rows-per-second <n>', 'a non-negative integer; 0 removes the limit'),
    payload: (o) => ({ rowsPerSecond: parseRowsPerSecond(o.rowsPerSecond) }),
    example: ' --rows-per-second 500',
  });
  verb('extend-soak', M.extendSoakUpdate, 'keep the way back longer', {
    options: (c) => c.requiredOption('--by <duration>', 'extra soak time'),
    payload: (o) => ({ seconds: Math.round(parseDurationMs(o.by, '--by') / 1000) }),
    example: ' --by 24h',
  });
}
