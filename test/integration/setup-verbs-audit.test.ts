// The set-up verbs record their operator in the audit log (issue 12: "every verb records the
// operator"), through the real CLI on a directory of the test's own: `shards prepare` one
// `shard.prepare` entry per shard (the tables fenced, those this run changed), `directory migrate`
// a `directory.migrate` entry for the migrations it applied and `shard.register` for the shards it
// added, each under --actor (else $SHARDCTL_ACTOR) with --reason; a run that changes nothing in the
// directory records nothing there. `blobs gc` is in test/integration/blob-index.test.ts.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { runCli, configFile } from '../helpers/cli';
import { closePools, shardPool, testConfig, uniq } from '../helpers/stack';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { openPool } from '../../lib/connections';
import { readAudit } from '../../lib/directory/audit';
import type { Queryable } from '../../lib/directory/db';

let fleet: Fleet;
beforeAll(async () => {
  fleet = await ownFleet('sva', { worker: false });
}, 120_000);
afterAll(async () => {
  await fleet?.close();
  await closePools();
});

const cli = (args: string[]) => runCli(args, { env: { SHARDCTL_ACTOR: 'env-operator' } });

/** The directory's entries of these actions, oldest first, as (action, actor, reason, detail). */
async function entriesOf(db: Queryable, ...actions: string[]) {
  const page = await readAudit(db, { sinceMs: 3_600_000, limit: 1000 });
  return page.entries.filter((e) => actions.includes(e.action)).map((e) => ({ action: e.action, actor: e.actor, reason: e.reason, detail: e.detail }));
}

describe('set-up verbs are audited', () => {
  it(
    'shards prepare appends one shard.prepare entry per shard with the operator, the reason, the tables fenced and those it changed',
    { timeout: 120_000 },
    async () => {
      // A tenant table in a schema of its own (named in this config only): the prepare fences it.
      const schema = `sva_${uniq('s').replace(/-/g, '_')}`;
      const base = fleet.config;
      const cfg = configFile({ ...base, tenant: { ...base.tenant, schemas: [...base.tenant.schemas, schema] } });
      await shardPool('shard-c').query(
        `create schema ${schema}; create table ${schema}.t (tenant_id text not null, id int not null, primary key (tenant_id, id))`,
      );
      try {
        const prep = await cli(['--config', cfg.file, 'shards', 'prepare', '--shard', 'shard-c', '--actor', 'sre-prep', '--reason', 'release 42']);
        expect(prep.code, prep.stdout + prep.stderr).toBe(0);
        const again = await cli(['--config', cfg.file, 'shards', 'prepare']);
        expect(again.code, again.stdout + again.stderr).toBe(0);
        const entries = await entriesOf(fleet.directory, 'shard.prepare');
        expect(entries.map((e) => [e.actor, e.reason, e.detail.shard, e.detail.changed])).toEqual([
          ['sre-prep', 'release 42', 'shard-c', [`${schema}.t`]],
          // Without --actor: $SHARDCTL_ACTOR; every configured shard, in order; nothing changed on a re-run.
          ['env-operator', null, 'shard-a', []],
          ['env-operator', null, 'shard-b', []],
          ['env-operator', null, 'shard-c', []],
        ]);
        expect(entries[0].detail).toMatchObject({ demoSchema: false, bucketMarker: 'present' });
        expect(entries[0].detail.tables).toContain(`${schema}.t`);
      } finally {
        await shardPool('shard-c').query(`drop schema ${schema} cascade`);
        cfg.remove();
      }
    },
  );

  it(
    'directory migrate records its operator for the migrations it applied and the shards it registered, and nothing when it changes nothing',
    { timeout: 120_000 },
    async () => {
      const base = testConfig();
      const name = uniq('svamig').replace(/-/g, '_');
      const admin = openPool(base.directory.dsn, { max: 1 });
      await admin.query(`create database ${name}`);
      const url = new URL(base.directory.dsn);
      url.pathname = `/${name}`;
      const cfg = configFile({ ...fleet.config, directory: { ...base.directory, dsn: url.toString() } });
      const db = openPool(url.toString(), { max: 1 });
      try {
        const first = await cli(['--config', cfg.file, 'directory', 'migrate', '--actor', 'sre-mig', '--reason', 'new fleet', '--json']);
        expect(first.code, first.stderr).toBe(0);
        const { migrated } = JSON.parse(first.stdout);
        expect(migrated.length).toBeGreaterThan(0);
        const again = await cli(['--config', cfg.file, 'directory', 'migrate']);
        expect(again.code, again.stderr).toBe(0);
        expect(await entriesOf(db, 'directory.migrate', 'shard.register')).toEqual([
          { action: 'directory.migrate', actor: 'sre-mig', reason: 'new fleet', detail: { migrated } },
          {
            action: 'shard.register',
            actor: 'sre-mig',
            reason: 'new fleet',
            detail: { shards: base.shards.map((s) => s.name).sort(), capacity: 1000, via: 'config-sync' },
          },
        ]);
      } finally {
        await db.end();
        cfg.remove();
        await admin.query(`drop database if exists ${name} with (force)`);
        await admin.end();
      }
    },
  );
});
