// The dev stack's four PostgreSQL servers (wal_level=logical): initdb, start, stop, restart and
// the shards' preparation for moves. Started by root they run as `nobody`, with their data
// wherever that user can reach it (lib/dev/pg-home.ts). Node-only.
import fs from 'node:fs';
import path from 'node:path';
import { Client } from 'pg';
import * as T from './topology';
import { portOpen, run, sleep, tail } from './proc';
import { StackError } from './stack-error';
import { ensurePgHome, findPgHome, PgHome, relocatedLogFile } from './pg-home';
import type { Config } from '../config';
import { createConnections } from '../connections';
import { prepareAllShards } from '../shard/prepare';

/** What this module needs of a stack (lib/dev/stack.ts). */
export interface PgStack {
  root: string;
  dev: string;
  ports: { pg: Record<T.PgServerName, number> };
  /** `directory` and every shard of the stack. */
  servers: readonly string[];
}

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

export function pgOsUser(): string | undefined {
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

export function pgDsn(s: PgStack, name: T.PgServerName, db = T.PG_DATABASE): string {
  return `postgres://${T.PG_USER}:${T.PG_PASSWORD}@127.0.0.1:${s.ports.pg[name]}/${db}`;
}

const dataDir = (home: PgHome, name: T.PgServerName) => path.join(home.dir, name, 'data');
const logFileOf = (s: PgStack, home: PgHome, name: T.PgServerName) =>
  home.relocated ? relocatedLogFile(home, name) : path.join(s.dev, 'logs', `pg-${name}.log`);

export async function pgHealthy(s: PgStack, name: T.PgServerName, db = 'postgres'): Promise<string | undefined> {
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

/** Brings every server up (idempotent); returns where their data lives. */
export async function upPostgresServers(s: PgStack, log: (m: string) => void): Promise<PgHome> {
  const bin = findPgBin();
  const home = ensurePgHome(s.dev, s.root, pgOsUser(), s.servers);
  if (home.relocated) log(`postgres data in ${home.dir} (${pgOsUser()}, who runs the servers, cannot enter ${s.root})`);
  for (const n of s.servers) await upPostgres(s, home, n, bin, log);
  return home;
}

async function upPostgres(s: PgStack, home: PgHome, name: T.PgServerName, bin: string, log: (m: string) => void) {
  const base = path.join(home.dir, name);
  const data = dataDir(home, name);
  const logFile = logFileOf(s, home, name);
  fs.mkdirSync(base, { recursive: true });
  chownToPgUser(home.dir);
  if (!fs.existsSync(path.join(data, 'PG_VERSION'))) {
    log(`initdb ${name}`);
    const pw = path.join(base, 'pwfile');
    fs.writeFileSync(pw, T.PG_PASSWORD + '\n');
    chownToPgUser(base);
    const [c, a] = asPgUser(path.join(bin, 'initdb'), [
      '-D',
      data,
      '-U',
      T.PG_USER,
      '--pwfile',
      pw,
      '--auth-host=scram-sha-256',
      '--auth-local=trust',
      '-E',
      'UTF8',
      '--no-locale',
    ]);
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
    prepareLogFile(s, home, name, logFile);
    const r = run(...asPgUser(path.join(bin, 'pg_ctl'), ['start', '-w', '-t', '60', '-D', data, '-l', logFile]));
    if (r.code !== 0) {
      throw new StackError(
        `postgres ${name} failed to start. Last lines of ${logFile}:\n${tail(logFile)}\nhint: \`shardctl dev reset\` wipes .dev/ if the data directory is damaged`,
      );
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

/** The servers' user must own its log; a relocated log is linked from .dev/logs where people look. */
function prepareLogFile(s: PgStack, home: PgHome, name: T.PgServerName, logFile: string) {
  fs.mkdirSync(path.dirname(logFile), { recursive: true });
  fs.appendFileSync(logFile, '');
  chownToPgUser(logFile);
  if (!home.relocated) return;
  chownToPgUser(path.dirname(logFile));
  const link = path.join(s.dev, 'logs', `pg-${name}.log`);
  fs.mkdirSync(path.dirname(link), { recursive: true });
  fs.rmSync(link, { force: true });
  fs.symlinkSync(logFile, link);
}

export async function downPostgresServers(s: PgStack, log: (m: string) => void): Promise<void> {
  let bin: string;
  try {
    bin = findPgBin();
  } catch {
    return; // no binaries: nothing of ours can be running
  }
  const home = findPgHome(s.dev);
  await Promise.all(
    s.servers.map(async (n) => {
      const data = dataDir(home, n);
      if (!fs.existsSync(path.join(data, 'postmaster.pid'))) return;
      run(...asPgUser(path.join(bin, 'pg_ctl'), ['stop', '-D', data, '-m', 'fast', '-w', '-t', '60']));
      log(`stopped postgres ${n}`);
    }),
  );
}

/**
 * Prepares the dev shards for moves, as `shardctl shards prepare` does (same lib function, so
 * the first `tenant create` on a fresh stack works). Idempotent; the demo schema stays opt-in.
 */
export async function prepareDevShards(config: Config): Promise<void> {
  const conns = createConnections(config, { max: 1, connectionTimeoutMillis: 5000 });
  try {
    const results = await prepareAllShards(config, conns.shardPool, { s3For: conns.s3For });
    const bad = results.filter((r) => r.error);
    if (bad.length) throw new StackError(`could not prepare the dev shards: ${bad.map((b) => `${b.shard}: ${b.error}`).join('; ')}`);
  } finally {
    await conns.close();
  }
}

/** Restarts one Postgres server (immediate shutdown: open connections are cut, as in a crash-restart). */
export async function restartPostgres(s: PgStack, name: T.PgServerName, downMs = 0): Promise<void> {
  const bin = findPgBin();
  const home = findPgHome(s.dev);
  const data = dataDir(home, name);
  const r = run(...asPgUser(path.join(bin, 'pg_ctl'), ['stop', '-D', data, '-m', 'immediate', '-w', '-t', '60']));
  if (r.code !== 0) throw new StackError(`could not stop postgres ${name}: ${r.stderr.trim()}`);
  if (downMs > 0) await sleep(downMs);
  const logFile = logFileOf(s, home, name);
  const st = run(...asPgUser(path.join(bin, 'pg_ctl'), ['start', '-w', '-t', '60', '-D', data, '-l', logFile]));
  if (st.code !== 0) throw new StackError(`postgres ${name} failed to restart. Last lines of ${logFile}:\n${tail(logFile)}`);
  for (let i = 0; i < 100 && !(await pgHealthy(s, name)); i++) await sleep(100);
}
