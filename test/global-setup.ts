// Brings the real stack up once per test run (idempotent) and, if this run started it, stops
// it at the end so CI leaves nothing running. Tests read endpoints from .dev/config.json.
import * as stack from '../lib/dev/stack';
import { projectRoot } from '../lib/config';

let startedHere = false;

export async function setup() {
  require('../lib/quiet-warnings.js');
  const s = stack.stackAt(projectRoot());
  const before = await stack.status(s).catch(() => []);
  startedHere = before.length === 0 || before.some((p) => !p.healthy);
  await stack.up(s, (m) => process.stderr.write(`dev: ${m}\n`));
  const after = await stack.status(s);
  const bad = after.filter((p) => !p.healthy);
  if (bad.length) throw new Error(`dev stack unhealthy: ${bad.map((b) => `${b.part} (${b.detail})`).join(', ')}`);
}

export async function teardown() {
  if (startedHere && process.env.SHARDCTL_KEEP_STACK !== '1') {
    await stack.down(stack.stackAt(projectRoot()));
  }
}
