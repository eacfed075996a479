// Operator verbs of issue 12 through the real `shardctl` against a real worker and move:
// `move throttle` (validated before anything is sent, applied to the running move, audited with
// its operator), `move watch` piped (plain lines to the end of the move) and on a pseudo-terminal
// (bars) and with --json (a status line per change), and `audit` reading the move's entries back.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { runCli, runCliOnTty } from '../helpers/cli';
import { closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { scheduledActivityInputs } from '../helpers/backlog';

const ROOT = path.resolve(__dirname, '../..');
let env: Awaited<ReturnType<typeof H.moveEnv>>;
let cli: (...args: string[]) => ReturnType<typeof runCli>;

beforeAll(async () => {
  env = await H.moveEnv('ops');
  cli = (...args) => runCli(args, { env: { SHARDCTL_TASK_QUEUE: env.tq }, timeoutMs: 240_000 });
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

/** The throttle updates the move's history accepted. */
async function acceptedThrottles(h: ReturnType<typeof env.t.client.workflow.getHandle>): Promise<number> {
  const history = await h.fetchHistory();
  return (history.events ?? []).filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === 'throttle').length;
}

/** `move watch` piped, sent SIGINT once it has printed a status line: its exit code and output. */
function watchUntilInterrupted(tenant: string): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'cli/shardctl.js'), 'move', 'watch', tenant], {
      cwd: ROOT,
      env: { ...process.env, SHARDCTL_TASK_QUEUE: env.tq },
    });
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`watch printed no status line within 60 s:\n${out}`));
    }, 60_000);
    child.stdout.on('data', (d) => {
      out += String(d);
      if (/ rows /.test(out) && !child.killed) child.kill('SIGINT');
    });
    child.stderr.on('data', (d) => (out += String(d)));
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

describe('shardctl move throttle, move watch and audit on a real move', () => {
  it(
    'throttle refuses bad input sending nothing, applies to the running copy and is audited; watch follows the move to its end',
    { timeout: 300_000 },
    async () => {
      const tenant = await H.newTenant('shard-a', 'ops');
      await H.seed(tenant, 400, 1);
      // Slow enough that the copy is still running when the throttle lifts the limit.
      const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { rowsPerSecond: 5, copyBatchRows: 10, soakSeconds: 1 }));
      const watching = cli('move', 'watch', tenant); // piped: plain lines on stdout
      await H.waitFor(h, (s) => s.phase === 'copy' && s.tables.some((t) => t.rowsCopied > 0), 90_000);

      const bads = ['abc', '-1', '1.5', '1e3'];
      const refused = await Promise.all(bads.map((bad) => cli('move', 'throttle', tenant, '--rows-per-second', bad)));
      refused.forEach((r, i) => {
        expect(r.code, `--rows-per-second ${bads[i]}: ${r.stderr}`).toBe(2);
        expect(r.stdout).toBe('');
        expect(r.stderr.trim()).toBe(`shardctl: --rows-per-second must be a non-negative integer (0 = unlimited), got ${JSON.stringify(bads[i])}`);
      });
      expect(await acceptedThrottles(h)).toBe(0);

      // Ctrl-C ends a watch of a running move at once, exit 130, the move untouched.
      const interrupted = await watchUntilInterrupted(tenant);
      expect(interrupted.code, interrupted.out).toBe(130);
      expect(interrupted.out).toMatch(/: copy \d+\/\d+ rows/);
      expect((await h.describe()).status.name).toBe('RUNNING');

      const throttled = await cli('move', 'throttle', tenant, '--rows-per-second', '0', '--actor', 'sre-throttle', '--reason', 'OPS-7 off-peak');
      expect(throttled.code, throttled.stderr).toBe(0);
      expect(throttled.stdout.trim()).toBe(`${tenant}: throttle 0 rows/s`);
      expect(await acceptedThrottles(h)).toBe(1);

      const done = await H.waitPhase(h, 'done', 200_000);
      // Its one blob was put directly (not through the index): the window listed the prefix.
      expect(done.cutoverBlobSync).toMatchObject({ via: 'prefix', objects: 1, copied: 0 });
      // Table copies scheduled after the throttle run unlimited; those before, at the start rate.
      const copies = await scheduledActivityInputs(h, 'copyTable');
      const after = copies.filter((c) => c.updatesBefore.includes('throttle'));
      expect(after.length, 'table copies scheduled after the throttle').toBeGreaterThan(0);
      expect(after.map((c) => c.input.rowsPerSecond)).toEqual(after.map(() => 0));
      expect(copies.filter((c) => !c.updatesBefore.includes('throttle')).map((c) => c.input.rowsPerSecond)).toContain(5);

      // watch, piped: a line per phase entered to the end, per table copied, rates while copying; exit 0.
      const watched = await watching;
      expect(watched.code, watched.stderr).toBe(0);
      const lines = watched.stdout.trimEnd().split('\n');
      expect(
        lines.every((l) => !l.includes('\x1b')),
        'no terminal control codes when piped',
      ).toBe(true);
      const phases = lines.map((l) => / phase (\S+)/.exec(l)?.[1]).filter(Boolean);
      // Polled every 500 ms (each poll a new Temporal connection), so short phases (switch, a 1 s soak)
      // may pass unseen; those seen come in order.
      const order = ['plan', 'copy', 'catchup', 'validate', 'fence', 'switch', 'soak', 'retire', 'done'];
      expect(phases.map((p) => order.indexOf(p!))).toEqual([...phases.map((p) => order.indexOf(p!))].sort((a, b) => a - b));
      expect(phases).toContain('copy');
      expect(phases[phases.length - 1]).toBe('done');
      for (const t of done.tables)
        expect(
          lines.some((l) => l.includes(`: table ${t.table} copied ${t.rowsCopied} rows`)),
          t.table,
        ).toBe(true);
      expect(lines.some((l) => / copy \d+\/\d+ rows \d+% [\d.-]+ rows\/s ETA \S+ blobs /.test(l))).toBe(true);
      expect(lines.some((l) => / pause \d+ms/.test(l))).toBe(true);
      expect(lines[lines.length - 1]).toBe(`${tenant}: move ${done.moveId} ended done`);

      // audit reads the move's entries back, the throttle with its operator, newest last.
      const audit = await cli('audit', '--tenant', tenant, '--json');
      expect(audit.code, audit.stderr).toBe(0);
      const entries = JSON.parse(audit.stdout).entries as { id: number; action: string; actor: string; reason: string | null; detail: any }[];
      const actions = entries.map((e) => e.action);
      const throttle = entries.filter((e) => e.action === 'move.throttle');
      expect(throttle).toHaveLength(1);
      expect(throttle[0]).toMatchObject({ actor: 'sre-throttle', reason: 'OPS-7 off-peak', detail: { rowsPerSecond: 0, moveId: done.moveId } });
      expect(actions.indexOf('move.start')).toBeLessThan(actions.indexOf('move.throttle'));
      expect(actions.indexOf('move.throttle')).toBeLessThan(actions.indexOf('move.switched'));
      // The move's end, and its headroom released in the same transaction, come last.
      expect(actions.slice(-2)).toEqual(['move.retired', 'reservation.release']);

      // The move is over: a throttle now is not found (3); watch prints its end at once.
      expect((await cli('move', 'throttle', tenant, '--rows-per-second', '5')).code).toBe(3);
      // On a terminal, watch draws bars (cli-progress) for the ended move, then its end.
      const tty = await runCliOnTty(['move', 'watch', tenant], '', { env: { SHARDCTL_TASK_QUEUE: env.tq }, timeoutMs: 120_000 });
      expect(tty.code, tty.stdout).toBe(0);
      expect(tty.stdout).toMatch(new RegExp(`${done.tables[0].table} +\\[█+\\] +100% `));
      expect(tty.stdout).toContain(`${tenant}  shard-a → shard-b  phase done`);
      expect(tty.stdout).toMatch(/timeline copy \d\d:\d\d:\d\d · catchup \+[\d.]+s/);
      expect(tty.stdout).toMatch(/cutover write pause \d+ ms \(attempt \d+[;)]/);
      expect(tty.stdout).toContain(`${tenant}: move ${done.moveId} ended done`);
    },
  );

  it(
    'move watch --json prints the status as one JSON line per change, in the shape of move status --json, until the move ends',
    { timeout: 240_000 },
    async () => {
      const tenant = await H.newTenant('shard-a', 'opsjs');
      await H.seed(tenant, 60, 0);
      // Paced so the copy spans several polls: its progress shows up as lines of its own. About 12 s:
      // at 20 rows/s (3 s) a fresh-clone CI at load 17 started the watching CLI after the copy ended.
      const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { rowsPerSecond: 5, copyBatchRows: 5, soakSeconds: 1 }));
      const watched = await cli('move', 'watch', tenant, '--json');
      expect(watched.code, watched.stderr).toBe(0);
      const lines = watched.stdout.trimEnd().split('\n');
      const statuses = lines.map((l) => JSON.parse(l));
      lines.slice(1).forEach((l, i) => expect(l, `line ${i + 2} repeats line ${i + 1}`).not.toBe(lines[i]));
      const copied = statuses.filter((s) => s.phase === 'copy').map((s) => s.copy.rowsCopied);
      expect(new Set(copied).size, 'lines during the copy').toBeGreaterThan(1);
      const order = ['plan', 'copy', 'catchup', 'validate', 'fence', 'switch', 'soak', 'retire', 'done'];
      const seen = statuses.map((s) => order.indexOf(s.phase));
      expect(seen).toEqual([...seen].sort((a, b) => a - b));
      // The last line is the ended move, exactly as `move status --json` shows it.
      const final = await cli('move', 'status', tenant, '--json');
      expect(statuses[statuses.length - 1]).toEqual(JSON.parse(final.stdout));
      expect(statuses[statuses.length - 1].phase).toBe('done');
      expect((await h.describe()).status.name).toBe('COMPLETED');
    },
  );

  it('move approve, move extend-soak and move retire are audited with their operators and reasons', { timeout: 240_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'opsap');
    await H.seed(tenant, 30, 0);
    const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { approveCutover: 'manual', soakSeconds: 3600 }));
    await H.waitFor(h, (s) => s.awaitingApproval, 120_000);
    const approved = await cli('move', 'approve', tenant, '--actor', 'sre-approver', '--reason', 'CHG-42 window');
    expect(approved.code, approved.stderr).toBe(0);
    await H.waitPhase(h, 'soak', 120_000);
    const extended = await cli('move', 'extend-soak', tenant, '--by', '2h', '--actor', 'sre-soak', '--reason', 'watching p99');
    expect(extended.code, extended.stderr).toBe(0);
    const retired = await cli('move', 'retire', tenant, '--yes', '--actor', 'sre-retire', '--reason', 'CHG-43 soak clean');
    expect(retired.code, retired.stderr).toBe(0);
    const done = await H.waitPhase(h, 'done', 120_000);
    const audit = await cli('audit', '--tenant', tenant, '--json');
    expect(audit.code, audit.stderr).toBe(0);
    const entries = JSON.parse(audit.stdout).entries as { action: string; actor: string; reason: string | null; detail: any }[];
    expect(entries.filter((e) => e.action === 'move.approve')).toEqual([
      expect.objectContaining({ actor: 'sre-approver', reason: 'CHG-42 window', detail: expect.objectContaining({ moveId: done.moveId }) }),
    ]);
    expect(entries.filter((e) => e.action === 'move.extend-soak')).toEqual([
      expect.objectContaining({ actor: 'sre-soak', reason: 'watching p99', detail: expect.objectContaining({ seconds: 7200, moveId: done.moveId }) }),
    ]);
    // Retire is recorded when it is done, with the reason given when it was asked.
    expect(entries.filter((e) => e.action === 'move.retired')).toEqual([
      expect.objectContaining({ actor: 'sre-retire', reason: 'CHG-43 soak clean', detail: expect.objectContaining({ moveId: done.moveId }) }),
    ]);
    const actions = entries.map((e) => e.action);
    expect(actions.indexOf('move.approve')).toBeLessThan(actions.indexOf('move.switched'));
    expect(actions.indexOf('move.extend-soak')).toBeGreaterThan(actions.indexOf('move.switched'));
  });
});
