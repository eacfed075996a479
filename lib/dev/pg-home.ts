// Where a dev stack keeps its PostgreSQL data. Started by root, the servers run as another OS
// user (`nobody`: initdb refuses root), who must be able to enter the data directory; a
// checkout under a folder only root can enter (a clone in /root, any 0700 parent) does not let
// it. Then the data lives in a per-checkout folder under /var/tmp and .dev/pg is a symlink to
// it, so up, status, down and reset find it again. Otherwise it stays in .dev/pg. Node-only.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { run } from './proc';
import { StackError } from './stack-error';

export interface PgHome {
  /** Holds one folder per server, `<dir>/<name>/data`. */
  dir: string;
  /** True when dir is the runtime folder .dev/pg points to. */
  relocated: boolean;
}

/** Folder names this module creates under the runtime base; reset removes only these. */
const RUNTIME_NAME = /^shardctl-\d+-[0-9a-f]{12}$/;

/** The per-checkout runtime folder: same checkout, same folder; another checkout, another. */
export function runtimeDirFor(root: string, env: NodeJS.ProcessEnv = process.env): string {
  const base = env.SHARDCTL_DEV_RUNTIME_DIR || '/var/tmp';
  const hash = crypto.createHash('sha256').update(fs.realpathSync(root)).digest('hex').slice(0, 12);
  return path.join(base, `shardctl-${process.getuid?.() ?? 0}-${hash}`);
}

/** The data folder in use, creating nothing (status, down, reset, restarts). */
export function findPgHome(dev: string): PgHome {
  const link = path.join(dev, 'pg');
  try {
    if (fs.lstatSync(link).isSymbolicLink()) return { dir: path.resolve(dev, fs.readlinkSync(link)), relocated: true };
  } catch {
    /* no .dev/pg yet */
  }
  return { dir: link, relocated: false };
}

/** Whether OS user `user` can enter `dir` (every folder above it must let it through). */
export function canEnter(user: string, dir: string): boolean {
  return run('runuser', ['-u', user, '--', 'test', '-x', dir]).code === 0;
}

/**
 * For `up`: the folder in use, or a new one `osUser` can enter. Data already initialised in
 * .dev/pg that osUser cannot reach fails at once with the fix instead of a failed start.
 */
export function ensurePgHome(dev: string, root: string, osUser: string | undefined, servers: readonly string[]): PgHome {
  const found = findPgHome(dev);
  if (found.relocated) {
    ensureOwnDir(path.dirname(found.dir));
    fs.mkdirSync(found.dir, { recursive: true });
    return found;
  }
  const hasData = servers.some((n) => fs.existsSync(path.join(found.dir, n, 'data', 'PG_VERSION')));
  if (!osUser || canEnter(osUser, dev)) {
    fs.mkdirSync(found.dir, { recursive: true });
    return found;
  }
  if (hasData) {
    throw new StackError(
      `the PostgreSQL data in ${found.dir} cannot be reached by OS user ${osUser}, who runs the servers (a parent folder is closed to it). ` +
        `Fix: \`shardctl dev reset\` (wipes the dev data) and \`shardctl dev up\`, which then keeps the data in ${runtimeDirFor(root)}; ` +
        `or open the parent folders to ${osUser} (chmod o+x)`,
    );
  }
  const rt = runtimeDirFor(root);
  ensureOwnDir(rt);
  const dir = path.join(rt, 'pg');
  fs.mkdirSync(dir, { recursive: true });
  if (!canEnter(osUser, dir)) {
    throw new StackError(`OS user ${osUser} cannot enter ${dir} either; set SHARDCTL_DEV_RUNTIME_DIR to a folder it can reach (e.g. /var/tmp)`);
  }
  fs.rmSync(found.dir, { recursive: true, force: true }); // nothing initialised there: safe to replace
  fs.symlinkSync(dir, found.dir);
  return { dir, relocated: true };
}

/** For `reset`: removes the runtime folder and returns it (the caller wipes .dev/ and the link with it). */
export function removeRelocatedData(home: PgHome): string | undefined {
  if (!home.relocated) return undefined;
  const rt = path.dirname(home.dir);
  const gone = RUNTIME_NAME.test(path.basename(rt)) ? rt : home.dir;
  fs.rmSync(gone, { recursive: true, force: true });
  return gone;
}

/** Where a relocated server's log goes (the servers' user cannot write into .dev/logs). */
export function relocatedLogFile(home: PgHome, name: string): string {
  return path.join(path.dirname(home.dir), 'logs', `pg-${name}.log`);
}

/**
 * A folder in a world-writable place must be ours and not a link planted by someone else;
 * 0711 lets the servers' user through to its own subfolder without listing the rest.
 */
function ensureOwnDir(dir: string): void {
  fs.mkdirSync(dir, { recursive: true, mode: 0o711 });
  const st = fs.lstatSync(dir);
  const uid = process.getuid?.();
  if (!st.isDirectory() || (uid !== undefined && st.uid !== uid)) {
    throw new StackError(`${dir} exists but is not a folder owned by uid ${uid}; remove it, or set SHARDCTL_DEV_RUNTIME_DIR`);
  }
  fs.chmodSync(dir, 0o711);
}
