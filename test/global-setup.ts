// Brings the real stack up once per test run (idempotent) and, if this run started it, stops
// it at the end so CI leaves nothing running; stops any shardctl process the tests left behind.
// Tests read endpoints from .dev/config.json.
import * as stack from '../lib/dev/stack';
import { projectRoot, loadConfig } from '../lib/config';
import { openPool } from '../lib/connections';
import { ensureDirectory } from '../lib/directory/ensure';
import { DEFAULT_SHARD_CAPACITY, listShards, setShardCapacity } from '../lib/directory/shards';
import { killMarked, newMark, RUN_MARK_VAR } from './helpers/procs';

let startedHere = false;
const runMark = newMark('run');

export async function setup() {
  require('../lib/quiet-warnings.js');
  const s = stack.stackAt(projectRoot());
  const before = await stack.status(s).catch(() => []);
  startedHere = before.length === 0 || before.some((p) => !p.healthy);
  await stack.up(s, (m) => process.stderr.write(`dev: ${m}\n`));
  const after = await stack.status(s);
  const bad = after.filter((p) => !p.healthy);
  if (bad.length) throw new Error(`dev stack unhealthy: ${bad.map((b) => `${b.part} (${b.detail})`).join(', ')}`);
  await roomForTheSuite();
  // Set after the stack is up, so only what the tests start inherits it (forks, and their children).
  process.env[RUN_MARK_VAR] = runMark;
}

export async function teardown() {
  // Any shardctl process a test started and did not stop (a worker, a loadgen, a CLI call) would
  // keep polling or writing after the run: stop it, and say so.
  const left = await killMarked(runMark, RUN_MARK_VAR, (p) => /shardctl\.js/.test(p.cmdline) && p.pid !== process.pid);
  for (const p of left) process.stderr.write(`test run left ${p.cmdline} (pid ${p.pid}) running; stopped it\n`);
  if (startedHere && process.env.SHARDCTL_KEEP_STACK !== '1') {
    await stack.down(stack.stackAt(projectRoot()));
  }
}

/**
 * The shared directory's shards get room for the whole suite. Every file's tenants (load 1 each,
 * more than a thousand by the crash tier, most of them on shard-a) would otherwise pass shard-a's
 * usable 900 of the default capacity 1000, and moves onto it would be refused for headroom by
 * tenants of other files. Files that test capacity and headroom use directories of their own
 * (test/helpers/fleet.ts ownFleet, headroom.test.ts); only a shard still at the default is raised.
 */
export const SUITE_SHARD_CAPACITY = 1_000_000;
async function roomForTheSuite() {
  const config = loadConfig();
  const pool = openPool(config.directory.dsn, { max: 1 });
  try {
    await ensureDirectory(pool, config);
    const known = new Set(config.shards.map((x) => x.name));
    for (const s of await listShards(pool))
      if (known.has(s.name) && s.capacity === DEFAULT_SHARD_CAPACITY)
        await setShardCapacity(pool, s.name, SUITE_SHARD_CAPACITY, { actor: 'test-setup', reason: "room for the whole suite's tenants on the shared stack" });
  } finally {
    await pool.end();
  }
}
