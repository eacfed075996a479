// `shards list` measures what it says (issue 13), on the real stack: `writesPerSecond` counts a
// tenant's writes through the router while they happen, and `slotRetainedBytes` counts the WAL a
// real replication slot holds back. A fleet of the test's own (test/helpers/fleet.ts) whose tenant
// tables are one table in a schema of its own, so the write counters read only this test's
// writes; the slot is the test's own and is dropped at the end, so no other suite sees it.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { runCli, configFile } from '../helpers/cli';
import { closePools, shardPool, uniq } from '../helpers/stack';
import type { Config } from '../../lib/config';
import { createTenant } from '../../lib/tenants';
import { Router } from '../../lib/router';

let fleet: Fleet;
let config: Config;
let file: { file: string; remove: () => void };
let schema: string;

const cli = (args: string[]) => runCli(args, { env: { SHARDCTL_CONFIG: file.file, SHARDCTL_ACTOR: 'metrics-test' } });
const rowOf = (stdout: string, shard: string) => JSON.parse(stdout).find((r: { name: string }) => r.name === shard);

beforeAll(async () => {
  fleet = await ownFleet('smet', { worker: false });
  schema = uniq('smet').replace(/-/g, '_');
  config = { ...fleet.config, tenant: { ...fleet.config.tenant, schemas: [schema] } };
  file = configFile(config);
  await shardPool('shard-a').query(
    `create schema ${schema}; create table ${schema}.items(tenant_id text not null, id bigint not null, primary key (tenant_id, id))`,
  );
  const prepared = await cli(['shards', 'prepare', '--shard', 'shard-a']);
  expect(prepared.code, prepared.stderr).toBe(0);
}, 120_000);

afterAll(async () => {
  file?.remove();
  await shardPool('shard-a')
    .query(`drop schema if exists ${schema} cascade`)
    .catch(() => {});
  await fleet?.close();
  await closePools();
});

describe('shards list metrics', () => {
  it('reports writesPerSecond above zero on the shard a tenant is being written on through the router', { timeout: 120_000 }, async () => {
    const tenant = uniq('smw');
    await createTenant({ directory: fleet.directory, shardPool, config }, { tenant, shard: 'shard-a', actor: 'test' });
    const router = await Router.create(config);
    let writing = true;
    let written = 0;
    // Three writers, so three backends flush their statistics (each at most once a second) at different instants.
    const writer = async (w: number) => {
      for (let i = 0; writing; i++) {
        await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) => tx.query(`insert into ${schema}.items values ($1, $2)`, [tenant, w * 1e6 + i]));
        written++;
      }
    };
    const writers = [0, 1, 2].map(writer);
    try {
      // Writes are under way (and their statistics flushed once) before the sampling starts.
      while (written < 50) await new Promise((r) => setTimeout(r, 50));
      await new Promise((r) => setTimeout(r, 1200));
      const list = await cli(['shards', 'list', '--rate-window', '1s', '--json']);
      expect(list.code, list.stderr).toBe(0);
      expect(rowOf(list.stdout, 'shard-a').writesPerSecond).toBeGreaterThan(0);
    } finally {
      writing = false;
      await Promise.all(writers);
      await router.close();
    }
  });

  it('reports slotRetainedBytes at least the WAL a logical slot of its own holds back', { timeout: 120_000 }, async () => {
    const pool = shardPool('shard-b');
    const slot = uniq('smet_slot').replace(/-/g, '_');
    await pool.query(`select pg_create_logical_replication_slot($1, 'pgoutput')`, [slot]);
    try {
      // Over two megabytes of WAL after the slot's restart point: a logical message of md5 text (a
      // repeated character would be compressed), transactional so that its commit flushes it and
      // pg_current_wal_lsn() is past it.
      await pool.query(`select pg_logical_emit_message(true, 'shardctl-test', (select string_agg(md5(i::text), '') from generate_series(1, 70000) i))`);
      const held = await pool.query(
        `select pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint::text as bytes from pg_replication_slots where slot_name = $1`,
        [slot],
      );
      const bytes = Number(held.rows[0].bytes);
      expect(bytes).toBeGreaterThanOrEqual(2_000_000);
      const list = await cli(['shards', 'list', '--rate-window', '0', '--json']);
      expect(list.code, list.stderr).toBe(0);
      // The server's other slots (other suites' moves) only add to it.
      expect(rowOf(list.stdout, 'shard-b').slotRetainedBytes).toBeGreaterThanOrEqual(bytes);
    } finally {
      await pool.query('select pg_drop_replication_slot($1)', [slot]);
    }
  });
});
