// `move plan` and `move start` against a target the directory does not keep open, through the
// real CLI on a directory of its own (test/helpers/fleet.ts), so draining or closing a shard there
// changes nothing the other suites see: refused with exit 4 and the status in words, nothing
// started; the same target open again plans. And a target whose server has no free replication
// slot (the reverse slot of the soak needs one): a Postgres server of the test's own, whose slots
// it fills without touching the shared stack's.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { WorkflowNotFoundError } from '@temporalio/client';
import { runCli } from '../helpers/cli';
import { closePools, uniq } from '../helpers/stack';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { moveWorkflowId } from '../../lib/ids';
import { getPlacement } from '../../lib/directory/placements';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { CreateBucketCommand, DeleteBucketCommand, DeleteObjectCommand } from '@aws-sdk/client-s3';
import { upPostgresServers, downPostgresServers, pgDsn, type PgStack } from '../../lib/dev/postgres';
import { removeRelocatedData, findPgHome } from '../../lib/dev/pg-home';
import { s3ClientFor } from '../../lib/s3';
import { BUCKET_MARKER_KEY } from '../../lib/blobs/marker';
import { ensureDirectory } from '../../lib/directory/ensure';
import { configFile } from '../helpers/cli';
import type { Config } from '../../lib/config';

let fleet: Fleet;
let cli: (...args: string[]) => ReturnType<typeof runCli>;
beforeAll(async () => {
  fleet = await ownFleet('plantgt', { worker: false });
  cli = (...args) => runCli(['--config', fleet.configFile, ...args]);
}, 120_000);
afterAll(async () => {
  await fleet?.close();
  await closePools();
});

describe('move plan onto a shard that is not open', () => {
  it(
    'refuses a target whose server has no free replication slot, naming the slots used, and so does move start; planned once one is free',
    { timeout: 180_000 },
    async () => {
      const server = await scratchShard('shard-x');
      try {
        const tenant = await fleet.tenant('shard-a', { rows: 5 });
        const plan = async () => {
          const r = await runCli(['--config', server.configFile, 'move', 'plan', '--tenant', tenant, '--to', 'shard-x', '--json']);
          return { code: r.code, body: JSON.parse(r.stdout || '{}'), stderr: r.stderr };
        };
        const max = Number((await server.db.query('show max_replication_slots')).rows[0].max_replication_slots);
        // Physical slots reserve no WAL until used; each counts against max_replication_slots all the same.
        for (let i = 0; i < max; i++) await server.db.query(`select pg_create_physical_replication_slot('probe_${i}')`);
        const full = await plan();
        expect(full.code, full.stderr).toBe(4);
        expect(full.body.reasons).toEqual([
          `target shard-x has no free replication slot (${max} of max_replication_slots=${max} used): the reverse slot (the way back during soak) needs one; raise max_replication_slots or drop orphaned slots (\`shardctl doctor\`)`,
        ]);
        // move start runs the same checks: refused with the same words, nothing started.
        const started = await runCli(['--config', server.configFile, 'move', 'start', '--tenant', tenant, '--to', 'shard-x', '--yes'], {
          env: { SHARDCTL_TASK_QUEUE: uniq('idle') },
        });
        expect(started.code, started.stderr).toBe(4);
        expect(started.stderr.trim()).toBe(`shardctl: move start refused, nothing started: ${full.body.reasons.join('; ')}`);
        await expect(fleet.t.client.workflow.getHandle(moveWorkflowId(tenant)).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
        await server.db.query(`select pg_drop_replication_slot('probe_0')`);
        const free = await plan();
        expect(free.code, JSON.stringify(free.body) + free.stderr).toBe(0);
        expect(free.body.ok).toBe(true);
      } finally {
        await server.stop();
      }
    },
  );

  it('refuses a draining target with exit 4 and its status; move start refuses with the same words and starts nothing', { timeout: 120_000 }, () =>
    refusedWhile('draining'),
  );
  it('refuses a closed target with exit 4 and its status; move start refuses with the same words and starts nothing', { timeout: 120_000 }, () =>
    refusedWhile('closed'),
  );
});

/** Plan and start onto shard-b while the fleet's directory keeps it `status`; then open, it plans. */
async function refusedWhile(status: 'draining' | 'closed') {
  const tenant = await fleet.tenant('shard-a', { rows: 5 });
  const set = await cli('shards', 'set-status', 'shard-b', status, '--actor', 'test', '--reason', `plan refuses ${status}`);
  expect(set.code, set.stderr).toBe(0);
  try {
    const planned = await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-b', '--json');
    expect(planned.code, planned.stderr).toBe(4);
    const reasons: string[] = JSON.parse(planned.stdout).reasons;
    expect(reasons).toContain(`target shard-b is ${status}, not open`);
    // A task queue no worker polls: were a workflow started, it would stay to be seen.
    const started = await runCli(['--config', fleet.configFile, 'move', 'start', '--tenant', tenant, '--to', 'shard-b', '--yes'], {
      env: { SHARDCTL_TASK_QUEUE: uniq('idle') },
    });
    expect(started.code, started.stderr).toBe(4);
    expect(started.stderr).toContain(`target shard-b is ${status}, not open`);
    await expect(fleet.t.client.workflow.getHandle(moveWorkflowId(tenant)).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
    expect(await getPlacement(fleet.directory, tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active' });
  } finally {
    const open = await cli('shards', 'set-status', 'shard-b', 'open', '--actor', 'test');
    expect(open.code, open.stderr).toBe(0);
  }
  const again = await cli('move', 'plan', '--tenant', tenant, '--to', 'shard-b', '--json');
  expect(again.code, again.stdout + again.stderr).toBe(0);
  expect(JSON.parse(again.stdout).ok).toBe(true);
}

/** A free TCP port on loopback now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

/**
 * A shard of the fleet on a Postgres server and a bucket of the test's own: started as the dev
 * stack starts its servers, registered in the fleet's directory, prepared (demo schema, fence,
 * bucket marker) by the real `shards prepare`. `stop` stops the server and removes all of it.
 */
async function scratchShard(name: string) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-scratch-'));
  const s: PgStack = { root, dev: path.join(root, '.dev'), ports: { pg: { [name]: await freePort() } }, servers: [name] };
  fs.mkdirSync(s.dev);
  const bucket = uniq(`shardctl-${name}`).toLowerCase();
  const s3 = s3ClientFor(fleet.config, 'shard-a');
  let db: Client | undefined;
  let cfg: { file: string; remove: () => void } | undefined;
  const stop = async () => {
    await db?.end().catch(() => {});
    cfg?.remove();
    await downPostgresServers(s, () => {});
    removeRelocatedData(findPgHome(s.dev));
    fs.rmSync(root, { recursive: true, force: true });
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: BUCKET_MARKER_KEY })).catch(() => {});
    await s3.send(new DeleteBucketCommand({ Bucket: bucket })).catch(() => {});
  };
  try {
    await upPostgresServers(s, () => {});
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    const config: Config = { ...fleet.config, shards: [...fleet.config.shards, { ...fleet.config.shards[0], name, dsn: pgDsn(s, name), bucket }] };
    await ensureDirectory(fleet.directory, config);
    cfg = configFile(config);
    const prep = await runCli(['--config', cfg.file, 'shards', 'prepare', '--shard', name, '--demo-schema']);
    expect(prep.code, prep.stdout + prep.stderr).toBe(0);
    db = new Client({ connectionString: pgDsn(s, name) });
    await db.connect();
    return { db, configFile: cfg.file, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}
