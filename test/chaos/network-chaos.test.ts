// The nightly network-fault chaos (issue 14; `npm run test:chaos -- --seed S`): each iteration
// draws from prng(seed) (test/helpers/chaos-draws.ts) a link (worker ↔ source, target or
// Temporal, router ↔ directory), a toxic and its parameters, when it starts (a fault point where
// the worker stops itself, a phase, or a delay), how long it lasts, and the path; runs a real
// move under loadgen on the moving tenant and two bystanders, cuts, heals, finishes (a second
// worker beside one that is cut off), and asserts DESIGN.md §5 as the network suite does. The
// same seed replays the same draws; rows go to test-results/network-chaos-<seed>.md.
import { describe, it, expect, beforeAll } from 'vitest';
import path from 'node:path';
import fs from 'node:fs';
import { uniq } from '../helpers/stack';
import * as H from '../helpers/move';
import * as C from '../helpers/crash';
import { NetLab, Link, ProxiedServer } from '../helpers/proxy';
import { exited, failAfter, firstAckAfter, FENCE_BUDGET_MS, FROZEN_BOUND_MS, isStoppedAt, NetRow, netRow, watchFrozen, writeNetReport } from '../helpers/net';
import { drawNetChaos, isWorkerLink, netDrawLabel, ownerAfter, SEVERING, type NetDraw } from '../helpers/chaos-draws';
import { driveToEnd } from '../helpers/chaos';
import * as M from '../../workflows/messages';
import { isTerminal, phaseReached } from '../../workflows/phases';
import { sleep } from '../../lib/dev/proc';

const SEED = Number(process.env.CHAOS_SEED ?? Date.now() % 1_000_000);
const ITERATIONS = Number(process.env.CHAOS_NET_ITERATIONS ?? process.env.CHAOS_ITERATIONS ?? 5);
/** Each iteration's bound: setting up, the move with its fault (at most 20 s), the checks. */
const ITERATION_MS = 300_000;
const MOVE_MS = 220_000;
const REPORT = path.join(C.ARTIFACTS, `network-chaos-${SEED}.md`);

const draws = drawNetChaos(SEED, ITERATIONS);
const rows: NetRow[] = [];
const faults = { applied: 0, notApplied: 0 };
let lab: NetLab;

const suite = C.crashSuite({
  before: async () => {
    process.stdout.write(`network chaos: seed ${SEED}, ${ITERATIONS} iterations (replay with --seed ${SEED})\n`);
  },
  report: async () => {
    const summary = `network chaos seed ${SEED}: ${faults.applied} of ${rows.length} iterations applied their fault; ${faults.notApplied} did not (the move ended before the fault's moment)\n`;
    process.stdout.write(`\nnetwork chaos report (${path.relative(process.cwd(), REPORT)}):\n${writeNetReport(rows, REPORT)}${summary}`);
    fs.appendFileSync(REPORT, `\n${summary}`);
    await lab?.close({ stopServer: true });
  },
});

// Its own hook: installing toxiproxy on a cold Go module cache takes minutes (lib/dev/toxiproxy.ts).
beforeAll(async () => {
  lab = await NetLab.start(path.join(C.ARTIFACTS, 'network-chaos'));
}, 600_000);

/** The drawn toxic on `link`; latency and bandwidth both ways, so requests and answers slow alike. */
async function applyToxic(link: Link, d: NetDraw): Promise<void> {
  const p = d.params;
  switch (d.toxic) {
    case 'down':
      await link.down();
      return;
    case 'blackhole':
      return link.blackhole();
    case 'latency':
      await link.latency(p.latencyMs, p.jitterMs);
      await link.latency(p.latencyMs, p.jitterMs, 'upstream');
      return;
    case 'reset_peer':
      await link.resetPeer(p.resetAfterMs, p.toxicity);
      return;
    case 'limit_data':
      await link.limitData(p.bytes);
      return;
    case 'bandwidth':
      await link.bandwidth(p.kbPerSecond);
      await link.bandwidth(p.kbPerSecond, 'upstream');
      return;
  }
}

interface Run {
  d: NetDraw;
  h: C.Handle;
  w1: C.ChildWorker;
  link: Link;
  faultLog: string;
  notes: string[];
  /** Set once the move has ended (or the iteration gave up): a fault still waiting for its moment is not applied. */
  ended: () => boolean;
  second(): Promise<C.ChildWorker>;
}

const phaseNow = (h: C.Handle) =>
  Promise.race([h.query(M.statusQuery).then((s) => s.phase as string), sleep(3000).then(() => 'unknown (no answer in 3 s)')]).catch(() => 'unknown');

/**
 * Waits for the drawn moment (given up once the move has ended), applies the toxic for its whole
 * duration (the traffic goes on after the move's end), then heals; returns when it healed, or
 * undefined when the fault was never applied.
 */
async function nemesis(r: Run): Promise<number | undefined> {
  const { d, h, w1 } = r;
  const t = d.trigger;
  const t0 = Date.now();
  let where: string;
  if (t.kind === 'point') {
    while (!isStoppedAt(w1, r.faultLog, t.point)) {
      if (r.ended() || exited(w1)) return undefined;
      await sleep(20);
    }
    where = `at ${t.point}`;
  } else if (t.kind === 'phase') {
    for (;;) {
      if (r.ended()) return undefined;
      const s = await h.query(M.statusQuery).catch(() => undefined);
      // Cancelling or rolling back: past every forward phase this path still reaches.
      if (s && (phaseReached(s.phase, t.phase) || s.phase === 'cancelling' || s.phase === 'rolling-back')) {
        where = `in ${s.phase}`;
        break;
      }
      if (s && isTerminal(s.phase)) return undefined;
      await sleep(100);
    }
  } else {
    while (Date.now() - t0 < t.ms) {
      if (r.ended()) return undefined;
      await sleep(50);
    }
    where = `in ${await phaseNow(h)}`;
  }
  await applyToxic(r.link, d);
  const cutAt = Date.now();
  if (t.kind === 'point') process.kill(w1.proc.pid!, 'SIGCONT');
  const beside = isWorkerLink(d.link) && SEVERING.includes(d.toxic);
  // Started during the cut, not before its clock: the fault lasts what was drawn.
  const second = beside ? r.second() : undefined;
  let endedInFault = false;
  while (Date.now() - cutAt < d.durationMs) {
    endedInFault ||= r.ended();
    await sleep(100);
  }
  await r.link.heal();
  const healedAt = Date.now();
  await second;
  r.notes.push(
    `fault applied ${where}, ${cutAt - t0} ms after its wait began, healed after ${healedAt - cutAt} ms${endedInFault ? ' (the move ended inside it)' : ''}${beside ? '; second worker beside the first' : ''}`,
  );
  return healedAt;
}

/** How the first worker took its SIGTERM at the end: ms to exit, and the shutdown errors it logged (the notes' SIGTERM items). */
async function stopFirst(w: C.ChildWorker): Promise<string> {
  if (exited(w)) return `first worker exited by itself (${w.proc.signalCode ?? `code ${w.proc.exitCode}`}); log ${w.log}`;
  const t = Date.now();
  await C.stopWorker(w);
  const closed = fs.readFileSync(w.log, 'utf8').match(/IllegalStateError[^\n"]*/)?.[0];
  return `first worker ${w.proc.signalCode === 'SIGKILL' ? 'SIGKILLed 15 s after its SIGTERM' : `exited ${w.proc.exitCode ?? w.proc.signalCode} ${Date.now() - t} ms after SIGTERM`}${closed ? `, logged ${closed.slice(0, 80)}` : ''}`;
}

async function runIteration(d: NetDraw, i: number) {
  const t0 = Date.now();
  const label = netDrawLabel(d, i);
  const { owner, epoch } = ownerAfter(d.path, d.source, d.target);
  const server: ProxiedServer =
    d.link === 'worker-source'
      ? (d.source as ProxiedServer)
      : d.link === 'worker-target'
        ? (d.target as ProxiedServer)
        : d.link === 'worker-temporal'
          ? 'temporal'
          : 'directory';
  const tq = uniq('netchaos');
  const faultLog = path.join(C.ARTIFACTS, 'network-chaos', `${SEED}-${i}.faults.jsonl`);
  const workers: C.ChildWorker[] = [];
  const notes: string[] = [];
  let ended = false;
  let row: NetRow | undefined;
  let w1: C.ChildWorker | undefined;
  let traffic: C.Traffic | undefined;
  let frozen: ReturnType<typeof watchFrozen>[] = [];
  let fault: Promise<number | undefined> | undefined;
  const longestFrozen = () => Math.max(0, ...frozen.map((f) => f.longest()));
  try {
    const tenant = await H.newTenant(d.source, 'nx');
    const bystander = await H.newTenant(d.source, 'nxb');
    const bystanderOnTarget = await H.newTenant(d.target, 'nxt');
    await H.seed(tenant, d.rows, d.blobs);
    await H.seed(bystander, 50, 1);
    await H.seed(bystanderOnTarget, 50, 1);
    const baselines = await Promise.all([tenant, bystander, bystanderOnTarget].map((x) => C.baselineOf(x)));
    const client = uniq('nw1');
    const net = await lab.configFor(isWorkerLink(d.link) ? client : `router-${client}`, [server]);
    traffic = await C.startTraffic(
      `netchaos-${SEED}-${i}`,
      [tenant, bystander, bystanderOnTarget],
      d.rate,
      isWorkerLink(d.link) ? {} : { directoryDsn: net.config.directory.dsn },
    );
    // Invariant 8 on both sides: the source freezes for the forward cutover, the target for a rollback's.
    frozen = [watchFrozen(d.source, tenant), watchFrozen(d.target, tenant)];
    fs.mkdirSync(path.dirname(faultLog), { recursive: true });
    fs.writeFileSync(faultLog, '');
    w1 = C.spawnWorker(tq, {
      env: isWorkerLink(d.link) ? { SHARDCTL_CONFIG: net.file } : {},
      faultPoint: d.trigger.kind === 'point' ? d.trigger.point : undefined,
      faultLog,
      faultAction: 'stop',
    });
    workers.push(w1);
    await w1.ready;
    const h = await H.startMove(
      suite.client,
      tq,
      H.moveInput(tenant, d.target, {
        soakSeconds: d.path === 'rollback' ? 600 : 3,
        rowsPerSecond: d.rowsPerSecond,
        approveCutover: d.path === 'cancel' ? 'manual' : 'auto',
        copyBatchRows: d.copyBatchRows,
        fenceBudgetMs: FENCE_BUDGET_MS,
      }),
    );
    fault = nemesis({
      d,
      h,
      w1,
      link: net.links[server],
      faultLog,
      notes,
      ended: () => ended,
      async second() {
        const w = C.spawnWorker(tq);
        workers.push(w);
        await w.ready;
        return w;
      },
    });
    let status: M.MoveStatus;
    try {
      status = await driveToEnd(h, d.path, {
        actor: 'network-chaos',
        timeoutMs: MOVE_MS,
        approveBlocked: true,
        onApprove: (s) => notes.push(`approved again after repeated cutover aborts (${s.lastError?.slice(0, 80)})`),
      });
    } finally {
      ended = true;
    }
    const healedAt = await fault;
    // Whatever the fault, once healed the owner takes the tenant's writes again.
    const ackMs = await firstAckAfter(traffic.logFile, tenant, owner, healedAt ?? Date.now());
    notes.push(`first ack on the owner ${owner} ${ackMs} ms after ${healedAt ? 'the heal' : 'the end'}`);
    // An aborted attempt's freeze is not in the status' pause (the last attempt's): say there were any.
    if (status.cutoverAttempts > 1) notes.push(`${status.cutoverAttempts} cutover attempts (last error: ${status.lastError?.slice(0, 100)})`);
    await sleep(1000); // traffic continues on the owner
    await traffic.stop();
    for (const f of frozen) await f.stop();
    const counts = await C.assertInvariants({
      tenant,
      bystanders: [bystander, bystanderOnTarget],
      source: d.source,
      target: d.target,
      status,
      expectOwner: owner,
      expectEpoch: epoch,
      traffic,
      baselines,
      // As in the network suite: reads of the moved tenant through a router that cannot learn of
      // the switch are refused by its old owner until the heal (refusals, never wrong answers).
      maxFailedReads: isWorkerLink(d.link) ? 0 : 50,
    });
    expect(counts.acked).toBeGreaterThan(0);
    faults[healedAt ? 'applied' : 'notApplied']++;
    row = netRow(label, status, longestFrozen(), counts, t0);
    if (!healedAt) row.outcome += ` (no fault: the move ended before ${d.trigger.kind === 'point' ? d.trigger.point : 'its moment'})`;
    rows.push(row);
    // The invariants held: the row keeps their numbers if the frozen bound fails.
    expect(longestFrozen(), 'longest stretch the tenant stayed frozen (ms)').toBeLessThanOrEqual(FROZEN_BOUND_MS);
  } catch (e) {
    if (row) failAfter(row, e);
    else {
      row = { ...C.failedRow(label, false, e, t0), fault: label, frozenMs: longestFrozen(), acked: 0, refused: 0, notes: '' };
      rows.push(row);
    }
    throw e;
  } finally {
    ended = true;
    await fault?.catch(() => undefined);
    for (const f of frozen) await f.stop();
    await traffic?.stop();
    await lab.healAll();
    if (w1) notes.push(await stopFirst(w1));
    for (const w of workers) await C.stopWorker(w);
    if (row) row.notes = notes.join('; ');
  }
}

describe(`network chaos (seed ${SEED})`, () => {
  draws.forEach((d, i) => it(netDrawLabel(d, i), { timeout: ITERATION_MS }, () => runIteration(d, i)));
});
