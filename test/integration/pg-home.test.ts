// Where the dev stack keeps Postgres data (lib/dev/pg-home.ts), against the real file system
// and OS users: these cases need root, who runs the servers as `nobody`. The whole start-up
// from a 0700 folder is test/e2e/fresh-checkout.test.ts.
import { describe, it, expect, afterEach } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ensurePgHome, findPgHome, removeRelocatedData, runtimeDirFor } from '../../lib/dev/pg-home';
import { StackError } from '../../lib/dev/stack-error';

const isRoot = process.getuid?.() === 0;
const SERVERS = ['directory', 'shard-a'];
const made: string[] = [];

function checkout(mode: number): { root: string; dev: string } {
  const parent = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-pghome-'));
  made.push(parent);
  fs.chmodSync(parent, mode);
  const root = path.join(parent, 'co');
  fs.mkdirSync(path.join(root, '.dev'), { recursive: true });
  return { root, dev: path.join(root, '.dev') };
}

afterEach(() => {
  for (const d of made.splice(0)) {
    const rt = path.join(d, 'co');
    if (fs.existsSync(rt)) fs.rmSync(runtimeDirFor(rt), { recursive: true, force: true });
    fs.rmSync(d, { recursive: true, force: true });
  }
});

describe.skipIf(!isRoot)('postgres data home (as root)', () => {
  it('stays in .dev/pg when the servers user can enter the checkout', () => {
    const { root, dev } = checkout(0o755);
    const home = ensurePgHome(dev, root, 'nobody', SERVERS);
    expect(home).toEqual({ dir: path.join(dev, 'pg'), relocated: false });
    expect(fs.lstatSync(home.dir).isDirectory()).toBe(true);
  });

  it('moves to a per-checkout runtime folder behind a .dev/pg link when it cannot, and finds it again', () => {
    const { root, dev } = checkout(0o700);
    const home = ensurePgHome(dev, root, 'nobody', SERVERS);
    expect(home.relocated).toBe(true);
    expect(home.dir).toBe(path.join(runtimeDirFor(root), 'pg'));
    expect(fs.readlinkSync(path.join(dev, 'pg'))).toBe(home.dir);
    expect((fs.statSync(runtimeDirFor(root)).mode & 0o777).toString(8)).toBe('711');
    expect(findPgHome(dev)).toEqual(home);
    expect(ensurePgHome(dev, root, 'nobody', SERVERS)).toEqual(home);
    expect(removeRelocatedData(home)).toBe(runtimeDirFor(root));
    expect(fs.existsSync(runtimeDirFor(root))).toBe(false);
  });

  it('gives two checkouts two runtime folders', () => {
    const a = checkout(0o700);
    const b = checkout(0o700);
    expect(runtimeDirFor(a.root)).not.toBe(runtimeDirFor(b.root));
    expect(ensurePgHome(a.dev, a.root, 'nobody', SERVERS).dir).not.toBe(ensurePgHome(b.dev, b.root, 'nobody', SERVERS).dir);
  });

  it('fails at once, naming the fix, for data already initialised where the servers user cannot reach it', () => {
    const { root, dev } = checkout(0o700);
    fs.mkdirSync(path.join(dev, 'pg', 'shard-a', 'data'), { recursive: true });
    fs.writeFileSync(path.join(dev, 'pg', 'shard-a', 'data', 'PG_VERSION'), '15\n');
    expect(() => ensurePgHome(dev, root, 'nobody', SERVERS)).toThrow(StackError);
    expect(() => ensurePgHome(dev, root, 'nobody', SERVERS)).toThrow(/cannot be reached by OS user nobody.*`shardctl dev reset`/);
    expect(fs.lstatSync(path.join(dev, 'pg')).isDirectory()).toBe(true); // nothing moved, nothing lost
  });

  it('refuses a runtime folder someone else planted', () => {
    const { root, dev } = checkout(0o700);
    fs.symlinkSync(os.tmpdir(), runtimeDirFor(root));
    try {
      expect(() => ensurePgHome(dev, root, 'nobody', SERVERS)).toThrow(/is not a folder owned by uid 0/);
    } finally {
      fs.rmSync(runtimeDirFor(root), { force: true });
    }
  });
});
