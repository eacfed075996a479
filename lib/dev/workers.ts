// Which shardctl workers run against a dev stack. A `shardctl worker` started from a checkout
// keeps a pid file in .dev/run/workers/ while it runs (removed on exit; the file of a SIGKILLed
// one is dropped once its process is gone). Temporal's poller list adds the workers no file of
// ours knows: another checkout's on the same ports, an in-process test worker. Node-only.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pidAlive, stopGroup } from './proc';

export interface WorkerRecord {
  pid: number;
  /** The process's start time (/proc/<pid>/stat): a reused pid is not mistaken for the worker. */
  startTicks?: string;
  taskQueue: string;
  temporalAddress: string;
  cwd: string;
  startedAt: string;
}

export interface RunningWorker {
  /** `pid@host`, as Temporal's poller list names workers. */
  identity: string;
  pid?: number;
  taskQueues: string[];
  /** `checkout`: registered in this checkout's .dev/run/workers (`dev down` stops it); `poller`: only Temporal knows it. */
  source: 'checkout' | 'poller';
  /** Folder the process runs in, when it runs on this machine. */
  cwd?: string;
}

const workersDir = (dev: string) => path.join(dev, 'run', 'workers');

function startTicks(pid: number): string | undefined {
  try {
    // Fields after the command name, which is in parentheses and may hold spaces; starttime is field 22.
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

function cwdOf(pid: number): string | undefined {
  try {
    return fs.readlinkSync(`/proc/${pid}/cwd`);
  } catch {
    return undefined;
  }
}

/**
 * Records this process as a worker of the checkout whose .dev is `dev` (nothing when there is
 * no .dev: not a dev checkout). Returns the unregister function; it also runs at exit.
 */
export function registerWorker(dev: string, w: { taskQueue: string; temporalAddress: string }): () => void {
  if (!fs.existsSync(dev)) return () => {};
  const dir = workersDir(dev);
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${process.pid}.json`);
  const rec: WorkerRecord = { pid: process.pid, startTicks: startTicks(process.pid), ...w, cwd: process.cwd(), startedAt: new Date().toISOString() };
  fs.writeFileSync(file, JSON.stringify(rec));
  const unregister = () => fs.rmSync(file, { force: true });
  process.once('exit', unregister);
  return unregister;
}

/** This checkout's live workers (against any address); files of dead ones are removed. */
export function checkoutWorkers(dev: string): WorkerRecord[] {
  let names: string[];
  try {
    names = fs.readdirSync(workersDir(dev)).filter((n) => n.endsWith('.json'));
  } catch {
    return [];
  }
  const out: WorkerRecord[] = [];
  for (const n of names) {
    const file = path.join(workersDir(dev), n);
    let rec: WorkerRecord | undefined;
    try {
      rec = JSON.parse(fs.readFileSync(file, 'utf8')) as WorkerRecord;
    } catch {
      rec = undefined;
    }
    const alive = rec && pidAlive(rec.pid) && (!rec.startTicks || startTicks(rec.pid) === undefined || startTicks(rec.pid) === rec.startTicks);
    if (alive) out.push(rec!);
    else fs.rmSync(file, { force: true });
  }
  return out;
}

/** A poller not seen for this long is gone (a live worker re-polls within about a minute). */
const POLLER_SEEN_WITHIN_MS = 120_000;

/** Identities polling the given task queues, from Temporal; pollers whose local pid is dead are left out. */
export async function pollingWorkers(address: string, namespace: string, taskQueues: string[]): Promise<Map<string, Set<string>>> {
  const { Connection } = await import('@temporalio/client');
  const out = new Map<string, Set<string>>();
  const conn = await Connection.connect({ address, connectTimeout: 2000 });
  try {
    for (const name of new Set(taskQueues)) {
      for (const taskQueueType of [1, 2]) {
        // 1 = workflow, 2 = activity task queue: a worker may poll only one of them.
        const r = await conn.workflowService.describeTaskQueue({ namespace, taskQueue: { name, kind: 1 }, taskQueueType });
        for (const p of r.pollers ?? []) {
          if (!p.identity || !seenRecently(p.lastAccessTime?.seconds)) continue;
          const local = localPid(p.identity);
          if (local !== undefined && !pidAlive(local)) continue;
          if (!out.has(p.identity)) out.set(p.identity, new Set());
          out.get(p.identity)!.add(name);
        }
      }
    }
  } finally {
    await conn.close().catch(() => {});
  }
  return out;
}

function seenRecently(seconds: unknown): boolean {
  if (seconds === undefined || seconds === null) return true;
  return Date.now() - Number(seconds) * 1000 < POLLER_SEEN_WITHIN_MS;
}

/** The pid of an identity `pid@host` when host is this machine. */
function localPid(identity: string): number | undefined {
  const m = /^(\d+)@(.+)$/.exec(identity);
  return m && m[2] === os.hostname() ? Number(m[1]) : undefined;
}

/**
 * Every worker running against the stack at `temporal.address`: this checkout's registered
 * ones, and whatever else Temporal sees polling the default queue or theirs. Temporal being
 * down leaves the registered ones.
 */
export async function listWorkers(dev: string, temporal: { address: string; namespace: string; taskQueue: string }): Promise<RunningWorker[]> {
  const host = os.hostname();
  const mine = checkoutWorkers(dev).filter((w) => w.temporalAddress === temporal.address);
  const out = new Map<string, RunningWorker>();
  for (const w of mine) {
    out.set(`${w.pid}@${host}`, { identity: `${w.pid}@${host}`, pid: w.pid, taskQueues: [w.taskQueue], source: 'checkout', cwd: w.cwd });
  }
  let polling = new Map<string, Set<string>>();
  try {
    polling = await pollingWorkers(temporal.address, temporal.namespace, [temporal.taskQueue, ...mine.map((w) => w.taskQueue)]);
  } catch {
    /* Temporal down: `dev status` reports that part on its own line */
  }
  for (const [identity, queues] of polling) {
    const known = out.get(identity);
    if (known) {
      known.taskQueues = [...new Set([...known.taskQueues, ...queues])];
      continue;
    }
    const pid = localPid(identity);
    out.set(identity, { identity, pid, taskQueues: [...queues], source: 'poller', cwd: pid !== undefined ? cwdOf(pid) : undefined });
  }
  return [...out.values()];
}

/** Stops this checkout's workers against `temporalAddress` (their process groups); returns their pids. */
export async function stopCheckoutWorkers(dev: string, temporalAddress: string, log: (m: string) => void = () => {}): Promise<number[]> {
  const mine = checkoutWorkers(dev).filter((w) => w.temporalAddress === temporalAddress);
  await Promise.all(
    mine.map(async (w) => {
      await stopGroup(w.pid, 15_000);
      fs.rmSync(path.join(workersDir(dev), `${w.pid}.json`), { force: true });
      log(`stopped worker ${w.pid} (task queue ${w.taskQueue})`);
    }),
  );
  return mine.map((w) => w.pid);
}
