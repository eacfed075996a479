// loadgen on a split tenant (issue 13; docs/architecture.md, "Splitting a tenant"): its tables'
// split column is the row's id, so every write and read is routed to the row's sub-unit by its id
// as split key, and each record names the sub-unit it was opened for; `loadgen verify` finds each
// key's owner by its sub-unit and checks it there, per sub-unit, and names a lost write.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { shardPool, directoryPool, uniq } from '../helpers/stack';
import { dropSplitSchema, setUpSplitSchema } from '../helpers/split-schema';
import { createTenant } from '../../lib/tenants';
import { splitTenant } from '../../lib/tenant-split';
import { tenantUnitForRow } from '../../lib/buckets/route';
import { runLoadgen, verifyLog, readLog } from '../../lib/loadgen';
import { loadSplitTables } from '../../lib/loadgen/run';
import type { Config } from '../../lib/config';

const SHARD = 'shard-a';
const WAYS = 4;
const schema = `lgs_${randomBytes(4).toString('hex')}`;
const TABLES = ['accounts', 'documents', 'events'];
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lgsplit-'));
let config: Config;

beforeAll(async () => {
  config = await setUpSplitSchema(
    SHARD,
    schema,
    Object.fromEntries(TABLES.map((t) => [t, 'id'])),
    `    create table ${schema}.accounts (tenant_id text not null, id uuid not null, name text not null, balance numeric(14,2) not null default 0,
      updated_at timestamptz not null default now(), primary key (tenant_id, id));
    create table ${schema}.documents (tenant_id text not null, id uuid not null, title text not null, body text, blob_key text,
      version int not null default 1, updated_at timestamptz not null default now(), primary key (tenant_id, id));
    create table ${schema}.events (tenant_id text not null, id uuid not null, kind text not null, payload jsonb not null default '{}',
      at timestamptz not null default now(), primary key (tenant_id, id))`,
  );
}, 60_000);

afterAll(async () => {
  fs.rmSync(dir, { recursive: true, force: true });
  await dropSplitSchema(SHARD, schema);
});

describe('loadgen on a split tenant', () => {
  it(
    "writes each row through its sub-unit (its id the split key), and verify checks every acknowledged write on its sub-unit's owner, naming a lost one",
    { timeout: 60_000 },
    async () => {
      const tenant = uniq('lgs');
      await createTenant({ directory: directoryPool(), shardPool, config }, { tenant, shard: SHARD, actor: 'test' });
      await splitTenant({ directory: directoryPool(), shardPool, config }, { tenant, ways: WAYS, actor: 'test' });
      const logFile = path.join(dir, 'load.jsonl');
      const stats = await runLoadgen({
        config,
        tenants: [tenant],
        rate: 60,
        durationMs: 4000,
        logFile,
        concurrency: 2,
        schema,
        blobOps: false,
        bodyBytes: 3000,
      });
      expect(stats.writes.ack).toBeGreaterThan(40);
      expect({ refused: stats.writes.refused, unknown: stats.writes.unknown, errors: stats.errorsByType, mismatches: stats.readMismatches }).toEqual({
        refused: 0,
        unknown: 0,
        errors: {},
        mismatches: 0,
      });
      const splits = new Map([[tenant, WAYS]]);
      const acks = readLog(logFile).filter((r) => r.status === 'ack');
      // Each write was opened for its row's sub-unit, as Node names it from the id.
      expect(acks.filter((r) => r.unit !== tenantUnitForRow(tenant, r.key, splits))).toEqual([]);
      expect(new Set(acks.map((r) => r.unit)).size).toBe(WAYS);

      const ok = await verifyLog({ logFile, config, schema });
      expect({ ok: ok.ok, missing: ok.missing, wrongValue: ok.wrongValue }).toEqual({ ok: true, missing: [], wrongValue: [] });
      expect(Object.keys(ok.checkedByUnit).sort()).toEqual(Array.from({ length: WAYS }, (_, k) => `${tenant}:${k}`).sort());
      expect(Object.values(ok.checkedByUnit).reduce((a, b) => a + b, 0)).toBe(ok.checked);
      expect(Object.keys(ok.owners).sort()).toEqual(Array.from({ length: WAYS }, (_, k) => `${tenant}:${k}`).sort());

      // An acknowledged row lost behind the router's back (a replica-role delete, the fence bypassed) is named.
      const last = new Map(acks.map((r) => [`${r.table}/${r.key}`, r]));
      const victim = [...last.values()].find((r) => r.op === 'insert' || r.op === 'update')!;
      const c = await shardPool(SHARD).connect();
      try {
        await c.query('begin');
        await c.query(`set local session_replication_role = replica`);
        await c.query(`delete from ${schema}.${victim.table} where tenant_id = $1 and id = $2`, [tenant, victim.key]);
        await c.query('commit');
      } finally {
        c.release();
      }
      const lost = await verifyLog({ logFile, config, schema });
      expect(lost.ok).toBe(false);
      expect(lost.missing.map((m) => [m.table, m.key, m.shard])).toEqual([[victim.table, victim.key, SHARD]]);
    },
  );

  it('refuses a loadgen table whose split column is not its id (the only key loadgen knows before a write)', () => {
    expect(() => loadSplitTables({ tenant: { ...config.tenant, splitColumns: { [`${schema}.events`]: 'kind' } } }, schema)).toThrow(
      `loadgen writes ${schema}.events with its id as the split key, but config.tenant.splitColumns names kind`,
    );
    expect([...loadSplitTables(config, schema)].sort()).toEqual(['accounts', 'documents', 'events']);
    expect([...loadSplitTables(config)]).toEqual([]);
  });
});
