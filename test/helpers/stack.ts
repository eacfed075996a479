// Test helpers: the stack's config, pools and clients, plus unique names for isolation.
import type { Pool } from 'pg';
import { randomBytes } from 'node:crypto';
import { loadConfig, Config, shardByName } from '../../lib/config';
import { openPool } from '../../lib/connections';

let cached: Config | undefined;
export function testConfig(): Config {
  return (cached ??= loadConfig());
}

/** A name unique to this test run, safe as a tenant id, table suffix or task queue. */
export function uniq(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
}

const pools: Pool[] = [];
export function shardPool(name: string): Pool {
  const p = openPool(shardByName(testConfig(), name).dsn, { max: 8 });
  pools.push(p);
  return p;
}
export function directoryPool(): Pool {
  const p = openPool(testConfig().directory.dsn, { max: 8 });
  pools.push(p);
  return p;
}
export async function closePools() {
  await Promise.all(pools.splice(0).map((p) => p.end().catch(() => {})));
}
