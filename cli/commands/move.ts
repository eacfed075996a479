// `shardctl move start|status|wait|list|cancel|approve|rollback|retire|pause|resume|extend-soak`.
// Bad input is refused with a one-line reason before anything is sent.
import { Command } from 'commander';
import os from 'node:os';
import { WorkflowNotFoundError } from '@temporalio/client';
import { moveInputFor, startMove, MOVE_WORKFLOW_TYPE } from '../../lib/moves/start';
import { createDeps } from '../../activities/deps';
import { createPlanActivities, type PlanResult } from '../../activities/move/plan';
import { loadConfig, shardByName, Config } from '../../lib/config';
import { validateTenantId, moveWorkflowId } from '../../lib/ids';
import { parseDurationMs } from '../../lib/duration';
import { invalidInput, ShardctlError } from '../../lib/errors';
import { temporalClient } from '../../lib/temporal-client';
import * as M from '../../workflows/messages';
import { isPhase, isTerminal, phaseReached } from '../../workflows/phases';
import { SA } from '../../workflows/search-attributes';
import { copyProgress, formatCopyProgress, formatTableProgress, withCopyProgress } from '../../lib/move-progress';

const actorDefault = () => process.env.SHARDCTL_ACTOR || process.env.USER || os.userInfo().username || 'cli';

async function withClient<T>(config: Config, fn: (c: Awaited<ReturnType<typeof temporalClient>>['client']) => Promise<T>): Promise<T> {
  let tc: Awaited<ReturnType<typeof temporalClient>>;
  try {
    tc = await temporalClient(config);
  } catch (e: any) {
    throw new ShardctlError('PreconditionFailed', `cannot reach Temporal at ${config.temporal.address}: ${e.message} (is \`shardctl dev up\` running?)`);
  }
  try {
    return await fn(tc.client);
  } finally {
    await tc.close();
  }
}

export async function moveStatus(config: Config, tenant: string): Promise<M.MoveStatus> {
  validateTenantId(tenant);
  return withClient(config, async (client) => {
    try {
      return await client.workflow.getHandle(moveWorkflowId(tenant)).query(M.statusQuery);
    } catch (e) {
      if (e instanceof WorkflowNotFoundError) throw new ShardctlError('NotFound', `no move found for tenant ${tenant}`);
      throw e;
    }
  });
}

function printPlan(tenant: string, to: string, p: PlanResult) {
  const lines = [`plan: move ${tenant} from ${p.source || '?'} (epoch ${p.epoch}) to ${to} — ${p.ok ? 'ready' : 'REFUSED'}`];
  for (const r of p.reasons) lines.push(`  refused: ${r}`);
  for (const t of p.tables) lines.push(`  copy ${t.table.padEnd(28)} ${t.rowsEstimated} rows`);
  if (p.cutoverSteps?.length) {
    lines.push('  then catch up until the lag is below the threshold, validate every row and blob, and cut over:');
    p.cutoverSteps.forEach((s, i) => lines.push(`    ${i + 1}. ${s}`));
  }
  console.log(lines.join('\n'));
}

function printStatus(s: M.MoveStatus) {
  const lines = [`move ${s.moveId} of ${s.tenant}: ${s.source || '?'} -> ${s.target}, phase ${s.phase}${s.paused ? ' (paused)' : ''}, epoch ${s.epoch}`];
  if (s.blockedReason) lines.push(`  blocked: ${s.blockedReason}`);
  for (const t of s.tables) lines.push(`  ${t.table.padEnd(28)} ${formatTableProgress(t)}`);
  lines.push(`  blobs ${s.blobs.copied} copied of ${s.blobs.total} (${s.blobs.bytes} bytes)`);
  lines.push(`  lag ${s.lagBytes} bytes (${s.lagSeconds}s)${s.etaSeconds !== null ? `, copy ETA ${s.etaSeconds}s` : ''}`);
  if (s.cutoverPauseMs !== null) {
    const steps = s.cutoverSteps
      ? ` — ${Object.entries(s.cutoverSteps)
          .map(([k, v]) => `${k} +${v}`)
          .join(', ')} ms`
      : '';
    lines.push(`  cutover write pause ${s.cutoverPauseMs} ms (attempts ${s.cutoverAttempts})${steps}`);
  }
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
  const cfg = () => loadConfig({ file: program.opts().config });

  move
    .command('start')
    .description('start moving a tenant to another shard')
    .requiredOption('--tenant <id>', 'tenant to move')
    .requiredOption('--to <shard>', 'target shard')
    .option('--soak <duration>', 'how long the source is kept as the way back', '')
    .option('--approve-cutover <mode>', 'auto | manual', 'auto')
    .option('--actor <name>', 'operator identity for the audit log')
    .action(async (o) => {
      const config = cfg();
      const tenant = validateTenantId(o.tenant);
      shardByName(config, o.to);
      if (o.approveCutover !== 'auto' && o.approveCutover !== 'manual')
        throw invalidInput(`--approve-cutover must be auto or manual, got ${JSON.stringify(o.approveCutover)}`);
      const soakSeconds = o.soak ? Math.round(parseDurationMs(o.soak, '--soak') / 1000) : config.limits.soakSeconds;
      const input = moveInputFor(config, { tenant, target: o.to, soakSeconds, approveCutover: o.approveCutover, requestedBy: o.actor || actorDefault() });
      await withClient(config, async (client) => {
        const h = await startMove(client, config.temporal.taskQueue, input);
        console.log(`started move of ${tenant} to ${o.to}: workflow ${h.workflowId} run ${h.firstExecutionRunId}`);
      });
    });

  move
    .command('plan')
    .description('dry run: every preflight check of `move start`, the tables, and the cutover steps the move would take; changes nothing')
    .requiredOption('--tenant <id>', 'tenant to move')
    .requiredOption('--to <shard>', 'target shard')
    .option('--json', 'machine-readable')
    .action(async (o) => {
      const config = cfg();
      const tenant = validateTenantId(o.tenant);
      shardByName(config, o.to);
      const deps = createDeps(config);
      try {
        const plan = await createPlanActivities(deps).planMove({ unit: tenant, target: o.to });
        if (o.json) console.log(JSON.stringify(plan, null, 2));
        else printPlan(tenant, o.to, plan);
        // 4: refused by the current state (the reasons say why).
        if (!plan.ok) process.exitCode = 4;
      } finally {
        await deps.close();
      }
    });

  move
    .command('status <tenant>')
    .option('--json', 'machine-readable')
    .action(async (tenant, o) => {
      const s = await moveStatus(cfg(), tenant);
      if (o.json) console.log(JSON.stringify(withCopyProgress(s), null, 2));
      else printStatus(s);
    });

  move
    .command('wait <tenant>')
    .requiredOption('--phase <phase>', 'phase to wait for')
    .option('--timeout <duration>', 'give up after', '10m')
    .action(async (tenant, o) => {
      if (!isPhase(o.phase)) throw invalidInput(`unknown phase ${JSON.stringify(o.phase)}`);
      const deadline = Date.now() + parseDurationMs(o.timeout, '--timeout');
      const config = cfg();
      let last = '';
      for (;;) {
        const s = await moveStatus(config, tenant);
        // One line whenever something an operator cares about changed: live progress.
        const line =
          `${s.phase}${s.paused ? ' (paused)' : ''} ${formatCopyProgress(copyProgress(s.tables))} blobs ${s.blobs.copied}/${s.blobs.total} lag ${s.lagSeconds}s` +
          `${s.cutoverPauseMs !== null ? ` pause ${s.cutoverPauseMs}ms` : ''}${s.blockedReason ? ` blocked: ${s.blockedReason}` : ''}`;
        if (line !== last) {
          process.stderr.write(`${new Date().toISOString().slice(11, 23)} ${tenant}: ${line}\n`);
          last = line;
        }
        if (phaseReached(s.phase, o.phase)) return;
        if (isTerminal(s.phase))
          throw new ShardctlError('PreconditionFailed', `move ended in ${s.phase} before reaching ${o.phase}${s.lastError ? `: ${s.lastError}` : ''}`);
        if (Date.now() > deadline)
          throw new ShardctlError(
            'PreconditionFailed',
            `timed out waiting for ${o.phase}; move is in ${s.phase}${s.blockedReason ? ` (blocked: ${s.blockedReason})` : ''}`,
          );
        await new Promise((r) => setTimeout(r, 500));
      }
    });

  move
    .command('list')
    .description('list moves (Temporal visibility), e.g. --phase validate for moves stuck there')
    .option('--phase <phase>')
    .option('--blocked', 'only moves with a blocked reason')
    .action(async (o) => {
      if (o.phase && !isPhase(o.phase)) throw invalidInput(`unknown phase ${JSON.stringify(o.phase)}`);
      const q = [`WorkflowType = '${MOVE_WORKFLOW_TYPE}'`];
      if (o.phase) q.push(`ShardctlPhase = '${o.phase}'`);
      if (o.blocked) q.push(`ShardctlBlockedReason IS NOT NULL`);
      await withClient(cfg(), async (client) => {
        for await (const w of client.workflow.list({ query: q.join(' AND ') })) {
          const a = w.typedSearchAttributes;
          console.log(
            `${w.workflowId}\t${w.status.name}\t${a.get(SA.phase) ?? ''}\t${a.get(SA.source) ?? ''}->${a.get(SA.target) ?? ''}\t${a.get(SA.blockedReason) ?? ''}`,
          );
        }
      });
    });

  const verb = (name: string, update: any, desc: string, extra?: (c: Command) => Command, payload?: (o: any) => object) => {
    let c = move.command(`${name} <tenant>`).description(desc).option('--actor <name>', 'operator identity').option('--reason <text>', 'why');
    if (extra) c = extra(c);
    c.action(async (tenant, o) => {
      validateTenantId(tenant);
      const config = cfg();
      const arg = { actor: o.actor || actorDefault(), reason: o.reason, ...(payload ? payload(o) : {}) };
      await withClient(config, async (client) => {
        try {
          const r = await client.workflow.getHandle(moveWorkflowId(tenant)).executeUpdate(update, { args: [arg] });
          console.log(`${tenant}: ${r}`);
        } catch (e: any) {
          if (e instanceof WorkflowNotFoundError) throw new ShardctlError('NotFound', `no running move for tenant ${tenant}`);
          const msg = e?.cause?.message ?? e?.message;
          throw new ShardctlError('PreconditionFailed', `${name} refused: ${msg}`);
        }
      });
    });
  };
  verb('cancel', M.cancelUpdate, 'undo a move before its switch');
  verb('approve', M.approveUpdate, 'approve a manual cutover');
  verb('rollback', M.rollbackUpdate, 'switch back to the source during soak (loses no write)');
  verb('retire', M.retireNowUpdate, 'end soak now and delete the source copy (irreversible)');
  verb('pause', M.pauseUpdate, 'pause copy / catch-up');
  verb('resume', M.resumeUpdate, 'resume (or re-validate after a mismatch)');
  verb(
    'extend-soak',
    M.extendSoakUpdate,
    'keep the way back longer',
    (c) => c.requiredOption('--by <duration>', 'extra soak time'),
    (o) => ({
      seconds: Math.round(parseDurationMs(o.by, '--by') / 1000),
    }),
  );
}
