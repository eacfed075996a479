// What the Temporal Web UI shows of a move: the static summary and details set when it starts,
// the current details the workflow sets on each change of phase, progress or blocked reason, and
// what it waits for. Pure (no I/O, no Node imports): the workflows and the starter share it.
// Names only — tenant, shards, operators — never a DSN, password or key.
import type { MoveInput, MoveStatus } from '../../workflows/messages';
import { copyProgress, formatCopyProgress, formatCutoverPauses } from '../move-progress';

/** One line, for the UI's list and the workflow page: `move acme: shard-a → shard-b, started by alice`. */
export function moveStaticSummary(input: Pick<MoveInput, 'tenant' | 'target' | 'requestedBy'>, source?: string): string {
  return `move ${input.tenant}: ${source || '(source from the directory)'} → ${input.target}, started by ${input.requestedBy}`;
}

/** What a move was started with (markdown). `via` says who started it besides the operator (a rebalance run). */
export function moveStaticDetails(input: MoveInput, o: { source?: string; via?: string } = {}): string {
  return [
    `**tenant** ${input.tenant}`,
    `**source** ${o.source || 'the tenant’s shard in the directory at plan time'}`,
    `**target** ${input.target}`,
    `**started by** ${input.requestedBy}${o.via ? ` (via ${o.via})` : ''}`,
    `**cutover approval** ${input.approveCutover}${input.requireDistinctApprover ? ' (by another operator than the one who started it)' : ''}`,
    `**soak** ${input.soakSeconds} s`,
    `**live status** \`shardctl move status ${input.tenant}\``,
  ].join('\n');
}

/** What the move is waiting for now, in the words of the command that moves it on; '' when it is just working. */
export function moveWaitingFor(st: MoveStatus): string {
  const t = st.tenant;
  if (st.awaitingApproval) return `operator approval of the cutover: \`shardctl move approve ${t}\` (or \`move cancel ${t}\`)`;
  if (st.paused && st.phase === 'validate') return `an operator: fix the mismatch, then \`shardctl move resume ${t}\` (re-validates) or \`move cancel ${t}\``;
  if (st.paused) return `an operator: paused; \`shardctl move resume ${t}\``;
  if (st.blockedReason) return 'the blocked reason below to clear (retried with backoff)';
  switch (st.phase) {
    case 'plan':
      return 'preflight checks';
    case 'copy': {
      const next = st.tables.find((x) => !x.done);
      return next ? `copy of table ${next.table}` : 'copy of the blobs';
    }
    case 'catchup':
      return 'replication lag below the cutover threshold';
    case 'validate':
      return 'the comparison of every row and blob';
    case 'fence':
      return 'the cutover (write pause)';
    case 'soak':
      return `the soak to end${st.soakEndsAt ? ` at ${st.soakEndsAt}` : ''} (or \`move rollback\` / \`move retire\`)`;
    case 'retire':
      return 'the deletion of the source copy';
    default:
      return '';
  }
}

/** The workflow's current details (markdown): phase, progress, lag, what it waits for, the blocked reason. */
export function moveCurrentDetails(st: MoveStatus): string {
  const copy = copyProgress(st.tables);
  const lines = [`**phase** ${st.phase}${st.paused ? ' (paused)' : ''}${st.phaseTimes[st.phase] ? ` since ${st.phaseTimes[st.phase]}` : ''}`];
  lines.push(`**route** ${st.source || '?'} → ${st.target}, epoch ${st.epoch}`);
  if (st.tables.length) lines.push(`**copy** ${formatCopyProgress(copy)}, ${st.tables.filter((x) => x.done).length} of ${st.tables.length} tables`);
  if (st.blobs.total || st.blobs.copied) lines.push(`**blobs** ${st.blobs.copied} of ${st.blobs.total} (${st.blobs.bytes} bytes)`);
  if (st.phase !== 'plan' && st.phase !== 'copy') lines.push(`**lag** ${st.lagBytes} bytes (${st.lagSeconds} s)`);
  if (st.cutoverAttempts) lines.push(`**cutover** ${formatCutoverPauses(st)}`);
  const waiting = moveWaitingFor(st);
  if (waiting) lines.push(`**waiting for** ${waiting}`);
  if (st.blockedReason) lines.push(`**blocked** ${st.blockedReason}`);
  else if (st.lastError) lines.push(`**last error** ${st.lastError}`);
  return lines.join('\n');
}
