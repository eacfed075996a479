// `shardctl audit` through the real CLI on a directory of its own (test/helpers/fleet.ts): the
// audited actions of other verbs read back with their operators, newest last, filtered by tenant
// and by time on the directory's clock, as the documented JSON and as a table; reading changes
// neither the catalog nor the audit log.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { Pool } from 'pg';
import { runCli, jsonError } from '../helpers/cli';
import { closePools, uniq } from '../helpers/stack';
import { ownFleet, type Fleet } from '../helpers/fleet';

let fleet: Fleet;
let cli: (...args: string[]) => ReturnType<typeof runCli>;
beforeAll(async () => {
  fleet = await ownFleet('audit', { worker: false });
  cli = (...args) => runCli(['--config', fleet.configFile, ...args]);
}, 120_000);
afterAll(async () => {
  await fleet?.close();
  await closePools();
});

const ENTRY_KEYS = ['action', 'actor', 'at', 'detail', 'id', 'reason', 'unit'];

/** Everything `audit` could change: relations, columns, migrations, and every audit row whole. */
async function snapshot(db: Pool) {
  const rels = await db.query(
    `select n.nspname || '.' || c.relname || ':' || c.relkind::text as r from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast') order by 1`,
  );
  const versions = await db.query('select version, applied_at from shardctl.schema_migrations order by 1');
  const audit = await db.query('select * from shardctl.audit order by id');
  const seq = await db.query('select last_value from shardctl.audit_id_seq');
  return { rels: rels.rows, versions: versions.rows, audit: audit.rows, seq: seq.rows };
}

describe('shardctl audit', () => {
  it('reads back audited actions with their operators, newest last, by tenant and --since, and changes nothing', { timeout: 180_000 }, async () => {
    const tenant = uniq('aud');
    const other = uniq('aud');
    const created = await cli('tenant', 'create', tenant, '--shard', 'shard-a', '--actor', 'alice', '--reason', 'new customer');
    expect(created.code, created.stderr).toBe(0);
    expect((await cli('tenant', 'create', other, '--shard', 'shard-b', '--actor', 'carol')).code).toBe(0);
    const draining = await cli('shards', 'set-status', 'shard-c', 'draining', '--actor', 'bob', '--reason', 'disk swap');
    expect(draining.code, draining.stderr).toBe(0);
    expect((await cli('shards', 'set-status', 'shard-c', 'open', '--actor', 'bob')).code).toBe(0);
    // An entry from three days ago (the log is append-only: inserting is what every writer does).
    await fleet.directory.query(
      `insert into shardctl.audit(at, actor, action, unit, reason) values (now() - interval '3 days', 'dave', 'test.old', $1, 'long ago')`,
      [tenant],
    );
    const before = await snapshot(fleet.directory);

    const all = await cli('audit', '--json');
    expect(all.code, all.stderr).toBe(0);
    const doc = JSON.parse(all.stdout);
    expect(Object.keys(doc).sort()).toEqual(['entries', 'since', 'tenant', 'truncated']);
    expect(doc).toMatchObject({ since: '24h', tenant: null, truncated: false });
    for (const e of doc.entries) expect(Object.keys(e).sort()).toEqual(ENTRY_KEYS);
    const mine = doc.entries.filter((e: any) => e.unit === tenant || e.unit === other || e.action === 'shard.status');
    expect(mine.map((e: any) => [e.action, e.actor, e.unit, e.reason])).toEqual([
      ['tenant.create', 'alice', tenant, 'new customer'],
      ['tenant.create', 'carol', other, null],
      ['shard.status', 'bob', null, 'disk swap'],
      ['shard.status', 'bob', null, null],
    ]);
    expect(mine[0].detail).toMatchObject({ shard: 'shard-a' });
    expect(mine[2].detail).toMatchObject({ shard: 'shard-c', status: 'draining' });
    // Newest last, with a time on each entry.
    const ids = doc.entries.map((e: any) => e.id);
    expect(ids).toEqual([...ids].sort((a: number, b: number) => a - b));
    expect(doc.entries.every((e: any) => !Number.isNaN(Date.parse(e.at)))).toBe(true);
    expect(doc.entries.some((e: any) => e.action === 'test.old')).toBe(false);

    const byTenant = JSON.parse((await cli('audit', '--tenant', tenant, '--since', '4d', '--json')).stdout);
    expect(byTenant.entries.map((e: any) => [e.action, e.actor])).toEqual([
      ['test.old', 'dave'],
      ['tenant.create', 'alice'],
    ]);
    const newest = JSON.parse((await cli('audit', '--since', '4d', '--limit', '1', '--json')).stdout);
    expect(newest).toMatchObject({ truncated: true, entries: [{ action: 'shard.status', reason: null }] });

    const table = await cli('audit', '--tenant', tenant, '--since', '4d');
    expect(table.code, table.stderr).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^AT \(UTC\)\s+ACTOR\s+ACTION\s+TENANT\s+REASON\s+DETAIL$/);
    expect(lines.slice(1).map((l) => l.split(/\s{2,}/).slice(1, 5))).toEqual([
      ['dave', 'test.old', tenant, 'long ago'],
      ['alice', 'tenant.create', tenant, 'new customer'],
    ]);
    expect((await cli('audit', '--tenant', uniq('nobody'))).stdout).toMatch(/^no audit entries for nobody-/);

    // Bad input: exit 2, one line, nothing read.
    for (const args of [
      ['audit', '--since', 'yesterday'],
      ['audit', '--tenant', "x'; drop table shardctl.audit;--"],
      ['audit', '--limit', '0'],
    ]) {
      const r = await cli(...args, '--json');
      expect(r.code, args.join(' ')).toBe(2);
      expect(jsonError(r)).toMatchObject({ exitCode: 2 });
    }
    expect(await snapshot(fleet.directory)).toEqual(before);
  });
});
