// The CLI's contract with scripts, through the real `shardctl` against the real stack: one exit
// code per failure class (cli/exit.ts), errors as one JSON line on stderr under --json, the
// --json shapes of the read verbs, and read verbs that never migrate the directory.
import { describe, it, expect, beforeAll, afterAll, onTestFinished } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { Pool } from 'pg';
import { WorkflowNotFoundError } from '@temporalio/client';
import { runCli, runCliOnTty, closedPort, configFile, jsonError, CliResult } from '../helpers/cli';
import { testConfig, uniq, directoryPool, closePools } from '../helpers/stack';
import { prepareStack, newTenant, seed, temporal, placement, rowCount, blobCount } from '../helpers/move';
import { moveWorkflowId } from '../../lib/ids';
import { REBALANCE_WORKFLOW_ID } from '../../workflows/rebalance-messages';
import { openPool } from '../../lib/connections';
import { DIRECTORY_MIGRATIONS } from '../../lib/directory/schema';
import type { Config } from '../../lib/config';

let tenant: string;
beforeAll(async () => {
  await prepareStack();
  tenant = await newTenant('shard-a', 'cli');
});
afterAll(closePools);

/** The exit code, and a failure that printed only on stderr, in one line, prefixed. */
function expectFailure(r: CliResult, code: number, args: string[]) {
  expect(r.code, `${args.join(' ')}\n${r.stderr}`).toBe(code);
  expect(r.stdout, args.join(' ')).toBe('');
  expect(r.stderr, args.join(' ')).not.toBe('');
}

/** Runs with a config of the test's own, derived from the stack's. */
async function withConfig(edit: (c: Config) => Config, args: string[]): Promise<CliResult> {
  const f = configFile(edit(structuredClone(testConfig())));
  try {
    return await runCli(['--config', f.file, ...args]);
  } finally {
    f.remove();
  }
}

describe('exit codes', () => {
  it('exits 2 for bad usage or configuration: missing or extra arguments, unknown options and phases, invalid ids, a bad config file', async () => {
    const bad = path.join(fs.mkdtempSync('/tmp/shardctl-cli-'), 'bad.json');
    fs.writeFileSync(bad, JSON.stringify({ temporal: {} }));
    const cases: string[][] = [
      ['tenant', 'show'],
      ['tenant', 'show', tenant, 'extra'],
      ['tenant', 'show', 'A B'],
      ['move', 'list', '--no-such-option'],
      ['move', 'wait', tenant],
      ['move', 'wait', tenant, '--phase', 'almost-done'],
      ['move', 'start', '--tenant', tenant, '--to', 'shard-b', '--approve-cutover', 'maybe'],
      ['move', 'no-such-verb'],
      ['--config', bad, 'tenant', 'list'],
    ];
    for (const args of cases) expectFailure(await runCli(args), 2, args);
    fs.rmSync(path.dirname(bad), { recursive: true });
  });

  it('exits 3 for a tenant, shard or move that does not exist', async () => {
    const missing = uniq('missing');
    const cases: [string[], RegExp][] = [
      [['tenant', 'show', missing], new RegExp(`no tenant ${missing}`)],
      [['move', 'status', missing], new RegExp(`no move found for tenant ${missing}`)],
      [['move', 'plan', '--tenant', tenant, '--to', 'shard-z'], /unknown shard "shard-z"/],
      [['shards', 'prepare', '--shard', 'shard-z'], /unknown shard "shard-z"/],
      [['tenant', 'create', uniq('new'), '--shard', 'shard-z'], /unknown shard "shard-z"/],
    ];
    for (const [args, why] of cases) {
      const r = await runCli(args);
      expectFailure(r, 3, args);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(why);
    }
  });

  it('exits 4 with the reason when the current state refuses: the tenant exists, the plan is refused', async () => {
    const again = await runCli(['tenant', 'create', tenant, '--shard', 'shard-b']);
    expectFailure(again, 4, ['tenant create (existing)']);
    expect(again.stderr).toContain(`tenant ${tenant} already exists on shard-a`);
    const plan = await runCli(['move', 'plan', '--tenant', tenant, '--to', 'shard-a']);
    expect(plan.code).toBe(4);
    expect(plan.stdout).toContain(`refused: unit ${tenant} is already on shard-a`);
  });

  it('exits 5 when the directory, Temporal or a shard is unreachable (a config pointing at a closed port)', async () => {
    const port = await closedPort();
    const at = (dsn: string) => {
      const u = new URL(dsn);
      u.port = String(port);
      return u.toString();
    };
    const noDirectory = (c: Config) => ({ ...c, directory: { dsn: at(c.directory.dsn) } });
    for (const args of [
      ['tenant', 'show', tenant],
      ['tenant', 'list'],
      ['directory', 'status'],
    ]) {
      const r = await withConfig(noDirectory, args);
      expectFailure(r, 5, args);
      expect(r.stderr).toContain(`placement directory unreachable at 127.0.0.1:${port}`);
    }
    const noTemporal = (c: Config) => ({ ...c, temporal: { ...c.temporal, address: `127.0.0.1:${port}` } });
    for (const args of [
      ['move', 'status', tenant],
      ['move', 'list'],
      ['move', 'cancel', tenant],
    ]) {
      const r = await withConfig(noTemporal, args);
      expectFailure(r, 5, args);
      expect(r.stderr).toContain(`cannot reach Temporal at 127.0.0.1:${port}`);
    }
    // shards list reports every shard, and the exit code says one of them is down.
    const r = await withConfig(
      (c) => ({ ...c, shards: c.shards.map((s) => (s.name === 'shard-c' ? { ...s, dsn: at(s.dsn) } : s)) }),
      ['shards', 'list', '--json'],
    );
    expect(r.code).toBe(5);
    const rows = JSON.parse(r.stdout);
    expect(rows.map((x: any) => [x.name, x.reachable])).toEqual([
      ['shard-a', true],
      ['shard-b', true],
      ['shard-c', false],
    ]);
  });

  it('with --json, a failure is one JSON line on stderr with its stable code, exit code and message', async () => {
    const missing = uniq('missing');
    const port = await closedPort();
    const cases: [Promise<CliResult>, string, number][] = [
      [runCli(['tenant', 'show', 'A B', '--json']), 'InvalidInput', 2],
      [runCli(['tenant', 'show', tenant, 'extra', '--json']), 'Usage', 2],
      [runCli(['tenant', 'show', missing, '--json']), 'NotFound', 3],
      [runCli(['move', 'status', missing, '--json']), 'NotFound', 3],
      [runCli(['tenant', 'create', tenant, '--json']), 'AlreadyExists', 4],
      [withConfig((c) => ({ ...c, temporal: { ...c.temporal, address: `127.0.0.1:${port}` } }), ['move', 'list', '--json']), 'Unavailable', 5],
    ];
    for (const [run, code, exitCode] of cases) {
      const r = await run;
      expect(r.code, r.stderr).toBe(exitCode);
      expect(r.stdout).toBe('');
      const e = jsonError(r);
      expect(e).toEqual({ code, exitCode, message: expect.any(String) });
      expect(e.message).not.toMatch(/^error:|\n/);
    }
  });

  it('--version prints the version of package.json and exits 0', async () => {
    const r = await runCli(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../package.json'), 'utf8')).version);
  });
});

describe('--json shapes of the read verbs', () => {
  const TENANT_KEYS = ['epoch', 'expectedLoad', 'moveId', 'shard', 'state', 'tenant', 'updatedAt'];

  it('tenant show and tenant list: a placement, and {generation, tenants} of the same placements', async () => {
    const shown = await runCli(['tenant', 'show', tenant, '--json']);
    expect(shown.code).toBe(0);
    const v = JSON.parse(shown.stdout);
    expect(Object.keys(v).sort()).toEqual(TENANT_KEYS);
    expect(v).toMatchObject({ tenant, shard: 'shard-a', epoch: 1, state: 'active', moveId: null, expectedLoad: 1 });
    const listed = await runCli(['tenant', 'list', '--shard', 'shard-a', '--json']);
    expect(listed.code).toBe(0);
    const l = JSON.parse(listed.stdout);
    expect(Object.keys(l).sort()).toEqual(['generation', 'tenants']);
    expect(typeof l.generation).toBe('number');
    expect(l.tenants).toContainEqual(v);
    for (const t of l.tenants) expect(t.shard).toBe('shard-a');
  });

  it('shards list, directory status and move list', async () => {
    const shards = await runCli(['shards', 'list', '--json']);
    expect(shards.code).toBe(0);
    for (const row of JSON.parse(shards.stdout)) {
      expect(Object.keys(row).sort()).toEqual([
        'capacity',
        'capacityBytes',
        'class',
        'dedicatedTo',
        'fence',
        'fencedTables',
        'name',
        'reachable',
        'region',
        'schemaInstalled',
        'slotRetainedBytes',
        'status',
        'tenantBytes',
        'tenantRows',
        'tenantTables',
        'unfenced',
        'units',
        'writesPerSecond',
      ]);
      // The shared directory's shards stay open: tests that drain or close one use a fleet of their own.
      expect(row.status).toBe('open');
      expect(Number.isInteger(row.units)).toBe(true);
    }
    const dir = await runCli(['directory', 'status', '--json']);
    expect(dir.code).toBe(0);
    expect(JSON.parse(dir.stdout)).toEqual({ applied: DIRECTORY_MIGRATIONS.map((m) => m.version), pending: [], current: true });
    // No move of this tenant exists: the query finds none, and the shape still holds.
    const moves = await runCli(['move', 'list', '--phase', 'validate', '--blocked', '--json']);
    expect(moves.code, moves.stderr).toBe(0);
    const m = JSON.parse(moves.stdout);
    expect(Object.keys(m)).toEqual(['moves']);
    expect(Array.isArray(m.moves)).toBe(true);
  });
});

describe('read verbs on a directory that is not migrated', () => {
  /** Every relation, column and schema_migrations row of the database: what "changed nothing" compares. */
  async function catalog(db: Pool) {
    const rels = await db.query(
      `select n.nspname || '.' || c.relname || ':' || c.relkind::text as r from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname not in ('pg_catalog', 'information_schema', 'pg_toast') order by 1`,
    );
    const cols = await db.query(
      `select table_schema || '.' || table_name || '.' || column_name as c from information_schema.columns where table_schema = 'shardctl' order by 1`,
    );
    const schemas = await db.query(`select nspname from pg_namespace where nspname = 'shardctl'`);
    const versions = schemas.rowCount
      ? (await db.query(`select to_regclass('shardctl.schema_migrations') is not null as t`)).rows[0].t
        ? (await db.query('select version from shardctl.schema_migrations order by 1')).rows.map((r) => r.version)
        : []
      : [];
    return { rels: rels.rows.map((x) => x.r), cols: cols.rows.map((x) => x.c), schemas: schemas.rows.length, versions };
  }

  // About twenty CLI processes: on a loaded 2-core machine each takes seconds to start.
  it('refuses with exit 4, naming `shardctl directory migrate`, and changes nothing; after the migration they answer', { timeout: 360_000 }, async () => {
    const name = uniq('dir_unmigrated').replace(/-/g, '_');
    const admin = directoryPool();
    await admin.query(`create database ${name}`);
    const url = new URL(testConfig().directory.dsn);
    url.pathname = `/${name}`;
    const db = openPool(url.toString(), { max: 2 });
    const f = configFile({ ...testConfig(), directory: { dsn: url.toString() } });
    const reads = [
      ['tenant', 'list'],
      ['tenant', 'list', '--json'],
      ['tenant', 'show', tenant],
      ['move', 'plan', '--tenant', tenant, '--to', 'shard-b'],
      ['audit'],
      ['audit', '--tenant', tenant, '--json'],
    ];
    try {
      const expectRefusedUnchanged = async (state: RegExp) => {
        const before = await catalog(db);
        for (const args of reads) {
          const r = await runCli(['--config', f.file, ...args]);
          expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(4);
          expect(r.stdout).toBe('');
          const message = args.includes('--json') ? jsonError(r).message : r.stderr;
          expect(message).toMatch(state);
          expect(message).toContain('run `shardctl directory migrate`');
        }
        expect(await catalog(db)).toEqual(before);
      };

      // Never migrated: not even the schema exists, and none is created.
      expect((await catalog(db)).schemas).toBe(0);
      await expectRefusedUnchanged(/the placement directory has never been migrated/);
      const status = await runCli(['--config', f.file, 'directory', 'status', '--json']);
      expect(JSON.parse(status.stdout)).toEqual({ applied: [], pending: DIRECTORY_MIGRATIONS.map((m) => m.version), current: false });
      expect((await catalog(db)).schemas).toBe(0);

      // Partly migrated (an older build's directory): refused the same way, nothing added.
      const [first, second] = DIRECTORY_MIGRATIONS;
      await db.query(
        `create schema shardctl; create table shardctl.schema_migrations (version int primary key, name text not null, applied_at timestamptz not null default now())`,
      );
      for (const m of [first, second]) {
        await db.query(m.sql);
        await db.query('insert into shardctl.schema_migrations(version, name) values ($1, $2)', [m.version, m.name]);
      }
      const lacking = DIRECTORY_MIGRATIONS.slice(2).map((m) => m.version);
      await expectRefusedUnchanged(new RegExp(`is at schema version ${second.version}, lacking ${lacking.join(', ')}`));
      expect(await db.query('select count(*)::int as n from shardctl.shards')).toMatchObject({ rows: [{ n: 0 }] });

      const migrated = await runCli(['--config', f.file, 'directory', 'migrate', '--json']);
      expect(migrated.code, migrated.stderr).toBe(0);
      expect(JSON.parse(migrated.stdout)).toEqual({ migrated: lacking, shardsAdded: testConfig().shards.map((s) => s.name) });
      const listed = await runCli(['--config', f.file, 'tenant', 'list', '--json']);
      expect(listed.code, listed.stderr).toBe(0);
      expect(JSON.parse(listed.stdout)).toEqual({ generation: 0, tenants: [] });
      const missing = await runCli(['--config', f.file, 'tenant', 'show', tenant]);
      expect(missing.code).toBe(3);
    } finally {
      f.remove();
      await db.end();
      await admin.query(`drop database if exists ${name} with (force)`);
    }
  });
});

describe('safety rails: a soak shorter than the default', () => {
  /** The tenant's placement and source copy, and whether a move workflow exists: what "changed nothing" compares. */
  async function state(t: string) {
    const tc = await temporal();
    try {
      const exists = await tc.client.workflow
        .getHandle(moveWorkflowId(t))
        .describe()
        .then(
          () => true,
          (e) => {
            if (e instanceof WorkflowNotFoundError) return false;
            throw e;
          },
        );
      return { placement: await placement(t), rows: await rowCount('shard-a', t), blobs: await blobCount('shard-a', t), workflow: exists };
    } finally {
      await tc.close();
    }
  }

  it(
    'move start --soak under the default refuses without --yes off a terminal (exit 4), printing the shard, tables, row counts and blob prefix; nothing starts',
    { timeout: 120_000 },
    async () => {
      const t = await newTenant('shard-a', 'rail');
      await seed(t, 30, 2);
      const before = await state(t);
      expect(before.workflow).toBe(false);
      // A task queue no worker polls: a move that did start would only sit there.
      const env = { SHARDCTL_TASK_QUEUE: uniq('rail-nobody') };
      // Whatever did start (the rail failing) is not left behind on the shared stack.
      onTestFinished(async () => {
        const tc = await temporal();
        await tc.client.workflow
          .getHandle(moveWorkflowId(t))
          .terminate('rail test over')
          .catch(() => {});
        await tc.close();
      });
      for (const soak of ['10m', '0']) {
        const r = await runCli(['move', 'start', '--tenant', t, '--to', 'shard-b', '--soak', soak], { env });
        expect(r.code, r.stderr).toBe(4);
        expect(r.stdout).toBe('');
        expect(r.stderr).toContain(`start a move of ${t} with a ${soak === '0' ? '0s' : '10m'} soak (default 72h)`);
        expect(r.stderr).toMatch(new RegExp(`on shard shard-a: ${before.rows} row\\(s\\) of ${t} in \\d+ table\\(s\\)`));
        expect(r.stderr).toMatch(/public\.accounts\s+\d+ row\(s\)/);
        expect(r.stderr).toContain(`blobs: 2 object(s)`);
        expect(r.stderr).toContain(`s3://${testConfig().shards[0].bucket}/tenants/${t}/`);
        expect(r.stderr).toContain(`shardctl: refused to start a move of ${t}`);
        expect(r.stderr).toContain('without --yes (no terminal to ask on); nothing changed');
      }
      expect(await state(t)).toEqual(before);

      // On a terminal it asks for the tenant id: anything else aborts, and nothing starts.
      const wrong = await runCliOnTty(['move', 'start', '--tenant', t, '--to', 'shard-b', '--soak', '10m'], 'yes', { env });
      expect(wrong.code, wrong.stdout).toBe(4);
      expect(wrong.stdout).toContain(`type ${t} to confirm`);
      expect(wrong.stdout).toContain(`not confirmed (expected ${t}); nothing changed`);
      expect(await state(t)).toEqual(before);

      // The default soak, or a longer one, does not ask; typing the id back, or --yes, starts it.
      const tc = await temporal();
      try {
        const typed = await runCliOnTty(['move', 'start', '--tenant', t, '--to', 'shard-b', '--soak', '10m'], t, { env });
        expect(typed.code, typed.stdout).toBe(0);
        expect(typed.stdout).toContain(`started move of ${t} to shard-b`);
        await tc.client.workflow.getHandle(moveWorkflowId(t)).terminate('rail test');
        const yes = await runCli(['move', 'start', '--tenant', t, '--to', 'shard-b', '--soak', '10m', '--yes'], { env });
        expect(yes.code, yes.stderr).toBe(0);
        expect(yes.stderr).toBe('');
        await tc.client.workflow.getHandle(moveWorkflowId(t)).terminate('rail test');
        const long = await runCli(['move', 'start', '--tenant', t, '--to', 'shard-b', '--soak', '96h'], { env });
        expect(long.code, long.stderr).toBe(0);
        await tc.client.workflow.getHandle(moveWorkflowId(t)).terminate('rail test');
      } finally {
        await tc.close();
      }
      expect((await state(t)).placement).toEqual(before.placement);
    },
  );
});

describe('safety rails: a rebalance with a short soak', () => {
  it('rebalance start --soak under the default shows the plan and refuses without --yes (exit 4); no run starts', { timeout: 120_000 }, async () => {
    const tc = await temporal();
    const running = () =>
      tc.client.workflow
        .getHandle(REBALANCE_WORKFLOW_ID)
        .describe()
        .then(
          (d) => d.status.name === 'RUNNING',
          () => false,
        );
    try {
      expect(await running()).toBe(false);
      const r = await runCli(['rebalance', 'start', '--soak', '10m', '--tolerance', '0'], { env: { SHARDCTL_TASK_QUEUE: uniq('rail-nobody') } });
      expect(r.code, r.stderr).toBe(4);
      expect(r.stdout).toMatch(/^plan: rebalance the fleet — [1-9]\d* move\(s\)/);
      expect(r.stderr).toMatch(/its copy on shard-\w is deleted 10m after its switch to shard-\w/);
      expect(r.stderr).toContain('shardctl: refused to rebalance the fleet with a 10m soak per move (default 72h) without --yes');
      expect(await running()).toBe(false);
    } finally {
      await tc.client.workflow
        .getHandle(REBALANCE_WORKFLOW_ID)
        .terminate('rail test over')
        .catch(() => {});
      await tc.close();
    }
  });
});

describe('strict config and secrets from files', () => {
  /** The stack's config with every password moved to files beside it (as production would), written to a temp dir. */
  function passwordFileConfig(password: (dsn: string) => string) {
    const dir = fs.mkdtempSync('/tmp/shardctl-secrets-');
    const raw: any = structuredClone(testConfig());
    const strip = (holder: { dsn: string; passwordFile?: string }, name: string) => {
      const u = new URL(holder.dsn);
      fs.writeFileSync(path.join(dir, `${name}.pw`), `${password(holder.dsn)}\n`, { mode: 0o600 });
      u.password = '';
      holder.dsn = u.toString();
      holder.passwordFile = `${name}.pw`; // relative: read from the config file's directory
    };
    strip(raw.directory, 'directory');
    raw.shards.forEach((s: any) => strip(s, s.name));
    fs.writeFileSync(path.join(dir, 's3.key'), `${raw.s3.secretAccessKey}\n`);
    delete raw.s3.secretAccessKey;
    raw.s3.secretAccessKeyFile = 's3.key';
    const file = path.join(dir, 'config.json');
    fs.writeFileSync(file, JSON.stringify(raw));
    return { file, raw, dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
  }

  it('refuses an unknown key with exit 2, naming its path and the nearest known key; the stack config and its round trip stay valid', async () => {
    const raw: any = structuredClone(testConfig());
    raw.limits.soakSecond = 60;
    raw.shards[1].passwordfile = 'x';
    const dir = fs.mkdtempSync('/tmp/shardctl-cfg-');
    const file = path.join(dir, 'config.json');
    fs.writeFileSync(file, JSON.stringify(raw));
    try {
      const r = await runCli(['--config', file, 'tenant', 'list']);
      expectFailure(r, 2, ['unknown keys']);
      expect(r.stderr).toContain(`shardctl: invalid configuration in ${file}:`);
      expect(r.stderr).toContain('limits.soakSecond: unknown key (did you mean limits.soakSeconds?)');
      expect(r.stderr).toContain('shards.1.passwordfile: unknown key (did you mean shards.1.passwordFile?)');
      const j = await runCli(['--config', file, 'tenant', 'list', '--json']);
      expect(jsonError(j)).toMatchObject({ code: 'ConfigError', exitCode: 2 });
      const env = await runCli(['tenant', 'list'], { env: { SHARDCTL_SOAK_SECONDS: '3 days' } });
      expectFailure(env, 2, ['bad env override']);
      expect(env.stderr.trim()).toBe('shardctl: invalid environment variable SHARDCTL_SOAK_SECONDS: expected a whole number, got "3 days"');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
    // The dev stack's own file (read by every other test) and a parsed config written back both parse.
    expect((await runCli(['tenant', 'list', '--json'])).code).toBe(0);
    const back = configFile(testConfig());
    try {
      expect((await runCli(['--config', back.file, 'tenant', 'list', '--json'])).code).toBe(0);
    } finally {
      back.remove();
    }
  });

  it('reads DSN passwords and the S3 secret from files named in the config; a wrong one is refused without ever printing it', async () => {
    const right = passwordFileConfig((dsn) => decodeURIComponent(new URL(dsn).password));
    try {
      expect(JSON.stringify(right.raw)).not.toContain(':shardctl-dev@');
      const shown = await runCli(['--config', right.file, 'tenant', 'show', tenant, '--json']);
      expect(shown.code, shown.stderr).toBe(0);
      expect(JSON.parse(shown.stdout)).toMatchObject({ tenant, shard: 'shard-a' });
      const shards = await runCli(['--config', right.file, 'shards', 'list', '--json']);
      expect(shards.code, shards.stderr).toBe(0);
      expect(JSON.parse(shards.stdout).map((s: any) => s.reachable)).toEqual([true, true, true]);
      const plan = await runCli(['--config', right.file, 'move', 'plan', '--tenant', tenant, '--to', 'shard-b', '--json']);
      expect(plan.code, plan.stderr).toBe(0);
    } finally {
      right.remove();
    }
    const secret = `Wr0ng-s3cret-${uniq('pw')}`;
    const wrong = passwordFileConfig(() => secret);
    try {
      for (const args of [
        ['tenant', 'show', tenant],
        ['tenant', 'show', tenant, '--json'],
        ['shards', 'list', '--json'],
        ['directory', 'migrate'],
      ]) {
        const r = await runCli(['--config', wrong.file, ...args]);
        expect(r.code, `${args.join(' ')}: ${r.stderr}`).not.toBe(0);
        expect(`${r.stdout}${r.stderr}`, args.join(' ')).toMatch(/password authentication failed/);
        expect(`${r.stdout}${r.stderr}`, args.join(' ')).not.toContain(secret);
        expect(`${r.stdout}${r.stderr}`).not.toContain(encodeURIComponent(secret));
      }
    } finally {
      wrong.remove();
    }
  });
});
