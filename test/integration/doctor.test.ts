// `shardctl doctor` against the real stack: each condition is created for real (an orphaned slot
// and publication, a live move's slot holding WAL, a unit frozen with no move, fences that
// disagree with the directory, an unreachable shard, an unfenced table, Temporal down), and
// doctor reports it with its fix; `--fix` repairs only the safe ones and never a live move's slot.
import Long from 'long';
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { runCli, closedPort, configFile } from '../helpers/cli';
import { testConfig, shardPool, directoryPool, uniq, closePools } from '../helpers/stack';
import * as H from '../helpers/move';
import { replicationNames, moveWorkflowId } from '../../lib/ids';
import { compareAndSetPlacement, getPlacement } from '../../lib/directory/placements';
import { freezeSource, installOwner, disown, getUnitFence } from '../../lib/shard/fence';
import { startWorker } from '../../worker';
import type { Finding } from '../../lib/doctor/findings';
import { DeleteObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { switchedTenant, putDirect, keysOn, type MoveRef } from '../helpers/blobs';
import { createActivities } from '../../activities';
import { s3ClientFor } from '../../lib/s3';

let env: Awaited<ReturnType<typeof H.moveEnv>>;

async function doctor(...args: string[]): Promise<{ code: number; findings: Finding[]; stderr: string; stdout: string }> {
  // `--config F` (a global option) goes before the verb.
  const at = args.indexOf('--config');
  const global = at >= 0 ? args.splice(at, 2) : [];
  const r = await runCli([...global, 'doctor', '--json', ...args], { timeoutMs: 60_000 });
  const body = r.stdout ? JSON.parse(r.stdout) : { findings: [] };
  return { code: r.code, findings: body.findings ?? [], stderr: r.stderr, stdout: r.stdout };
}
const ids = (fs: Finding[]) => fs.map((f) => f.id);

async function slotExists(shard: string, slot: string): Promise<boolean> {
  const r = await shardPool(shard).query('select 1 from pg_replication_slots where slot_name = $1', [slot]);
  return (r.rowCount ?? 0) > 0;
}

/** A slot and publication named like a move's, whose move never ran: what a gone workflow leaves. */
async function orphanFor(shard: string, unit: string) {
  const names = replicationNames(`${unit}.e1.deadbeef`, 'forward');
  const p = shardPool(shard);
  await p.query(`select pg_create_logical_replication_slot($1, 'pgoutput')`, [names.slot]);
  await p.query(`create publication ${names.publication}`);
  return names.slot;
}

const listKeys = (s3: S3Client, shard: string, tenant: string) => keysOn(() => s3, shard, tenant);

async function deleteKeysDirect(s3: S3Client, shard: string, keys: string[]) {
  const bucket = testConfig().shards.find((x) => x.name === shard)!.bucket;
  for (const Key of keys) await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key }));
}

beforeAll(async () => {
  env = await H.moveEnv('doctor');
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

describe('shardctl doctor', () => {
  it('reports an orphaned slot and publication with their fix, --fix drops them, and a second --fix finds nothing', async () => {
    const unit = uniq('orph');
    const slot = await orphanFor('shard-a', unit);
    // WAL written after the slot was made is what it retains.
    await shardPool('shard-a').query(`select pg_logical_emit_message(false, 'doctor-test', repeat('x', 200000))`);
    const d = await doctor('--wal-threshold', '100KiB');
    expect(d.code).toBe(1);
    const f = d.findings.find((x) => x.id === `orphaned-slot:shard-a:${slot}`)!;
    expect(f).toMatchObject({ kind: 'orphaned-slot', severity: 'critical', autoFix: true, fix: `shardctl doctor --fix orphaned-slot:shard-a:${slot}` });
    expect(f.retainedBytes).toBeGreaterThan(100 * 1024);
    expect(ids(d.findings)).toContain(`orphaned-publication:shard-a:${slot}`);

    const fixed = await runCli(['doctor', '--fix', `orphaned-slot:shard-a:${slot}`, '--fix', `orphaned-publication:shard-a:${slot}`, '--actor', 'doctor-test']);
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(fixed.stdout).toContain(`dropped replication slot ${slot} on shard-a`);
    expect(await slotExists('shard-a', slot)).toBe(false);
    const pubs = await shardPool('shard-a').query('select 1 from pg_publication where pubname = $1', [slot]);
    expect(pubs.rowCount).toBe(0);
    const audit = await directoryPool().query(`select actor from shardctl.audit where action = 'doctor.drop-slot' and detail->>'slot' = $1`, [slot]);
    expect(audit.rows).toEqual([{ actor: 'doctor-test' }]);
    const again = await runCli(['doctor', '--fix', `orphaned-slot:shard-a:${slot}`]);
    expect(again.code).toBe(3);
  });

  it('never calls a live move’s slot an orphan — with its worker up or down — and reports the WAL it holds', { timeout: 180_000 }, async () => {
    const tenant = await H.newTenant('shard-a', 'doclive');
    await H.seed(tenant, 50, 0);
    const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { approveCutover: 'manual' }));
    let slot = '';
    try {
      await checkLiveMove();
    } finally {
      // A failed assertion must not leave a running move holding WAL on the shared stack.
      const d = await env.t.client.workflow
        .getHandle(moveWorkflowId(tenant))
        .describe()
        .catch(() => undefined);
      if (d?.status.name === 'RUNNING') {
        await env.t.client.workflow.getHandle(moveWorkflowId(tenant)).terminate('doctor test failed');
        if (slot) await shardPool('shard-a').query(`select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = $1`, [slot]);
        if (slot) await shardPool('shard-a').query(`drop publication if exists ${slot}`);
      }
    }

    async function checkLiveMove() {
      const s = await H.waitFor(h, (x) => x.awaitingApproval, 120_000);
      slot = replicationNames(s.moveId, 'forward').slot;
      expect(await slotExists('shard-a', slot)).toBe(true);
      await shardPool('shard-a').query(`select pg_logical_emit_message(false, 'doctor-test', repeat('x', 200000))`);

      const d = await doctor('--wal-threshold', '100KiB');
      expect(ids(d.findings)).not.toContain(`orphaned-slot:shard-a:${slot}`);
      // Waiting for approval is a phase like any other: past the threshold, it is reported (default 6 h: not yet).
      expect(ids(d.findings)).not.toContain(`move-phase-too-long:${tenant}`);
      const stuck = await doctor('--phase-threshold', '1ms');
      expect(stuck.findings.find((x) => x.id === `move-phase-too-long:${tenant}`)).toMatchObject({
        kind: 'move-phase-too-long',
        message: expect.stringMatching(new RegExp(`the move of ${tenant} has been in phase \\w+ for \\d+ s`)),
        fix: expect.stringContaining(`shardctl move status ${tenant}`),
      });
      expect(d.findings.find((x) => x.id === `slot-retention:shard-a:${slot}`)).toMatchObject({
        unit: tenant,
        autoFix: false,
        fix: expect.stringContaining(`shardctl move status ${tenant}`),
      });
      const refused = await runCli(['doctor', '--fix', `orphaned-slot:shard-a:${slot}`]);
      expect(refused.code).toBe(3);
      expect(await slotExists('shard-a', slot)).toBe(true);

      // No worker answers the status query: the move's id is unknown, and every name its unit could produce stays protected.
      await env.close();
      try {
        const blind = await doctor();
        expect(ids(blind.findings).filter((i) => i.includes(slot))).toEqual([]);
        expect(await slotExists('shard-a', slot)).toBe(true);
      } finally {
        const w = await startWorker(testConfig(), { taskQueue: env.tq });
        const t = await H.temporal();
        env = {
          ...env,
          t,
          close: async () => {
            await t.close();
            await w.shutdown();
          },
        };
      }
      await env.t.client.workflow.getHandle(moveWorkflowId(tenant)).executeUpdate('cancel', { args: [{ actor: 'doctor-test' }] });
      await H.waitPhase(env.t.client.workflow.getHandle(moveWorkflowId(tenant)), 'cancelled', 120_000);
      expect(await slotExists('shard-a', slot)).toBe(false);
    }
  });

  it('reports the search attributes a namespace lacks, with the commands that create them', { timeout: 120_000 }, async () => {
    // A namespace of its own, registered without shardctl's search attributes.
    const ns = uniq('doctor-ns');
    await env.t.client.connection.workflowService.registerNamespace({ namespace: ns, workflowExecutionRetentionPeriod: { seconds: Long.fromNumber(86_400) } });
    const cfg = configFile({ ...testConfig(), temporal: { ...testConfig().temporal, namespace: ns } });
    try {
      let d = await doctor('--config', cfg.file);
      // A new namespace takes a moment to be served everywhere: asked again until it is.
      for (let i = 0; i < 20 && !d.findings.some((x) => x.kind === 'search-attributes-missing'); i++) {
        await new Promise((r) => setTimeout(r, 1000));
        d = await doctor('--config', cfg.file);
      }
      const f = d.findings.find((x) => x.kind === 'search-attributes-missing');
      expect(f, d.stdout + d.stderr).toMatchObject({
        severity: 'critical',
        message: expect.stringContaining(`namespace ${ns} lacks the search attribute(s) ShardctlUnit`),
      });
      expect(f!.fix).toContain(`temporal operator search-attribute create --namespace ${ns} --name ShardctlBlockedReason --type Keyword`);
      expect(d.code).not.toBe(0);
      // The stack's own namespace has them all.
      expect((await doctor()).findings.map((x) => x.kind)).not.toContain('search-attributes-missing');
    } finally {
      cfg.remove();
    }
  });

  it('reports a unit frozen with no move, and --fix unfreezes it so its writes succeed again', async () => {
    const tenant = await H.newTenant('shard-a', 'docfrz');
    const p = (await getPlacement(directoryPool(), tenant))!;
    const moveId = `${tenant}.e${p.epoch}.gone0000`;
    const cas = await compareAndSetPlacement(
      directoryPool(),
      tenant,
      { shard: 'shard-a', epoch: p.epoch, state: 'active' },
      { shard: 'shard-a', state: 'moving', moveId, freezeToken: 'tok-gone' },
      { actor: 'doctor-test', action: 'freeze' },
    );
    expect(cas.ok).toBe(true);
    await freezeSource(shardPool('shard-a'), tenant, p.epoch, { token: 'tok-gone' });
    expect(await H.tryWrite('shard-a', tenant, p.epoch)).toBe('SC423');

    const d = await doctor();
    expect(d.findings.find((x) => x.id === `frozen-without-move:${tenant}`)).toMatchObject({
      severity: 'critical',
      autoFix: true,
      fix: `shardctl doctor --fix frozen-without-move:${tenant}`,
    });
    const fixed = await runCli(['doctor', '--fix', `frozen-without-move:${tenant}`, '--actor', 'doctor-test']);
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(await getPlacement(directoryPool(), tenant)).toMatchObject({ shard: 'shard-a', epoch: p.epoch, state: 'active', moveId: null });
    expect(await getUnitFence(shardPool('shard-a'), tenant)).toMatchObject({ owned: true, frozen: false, epoch: p.epoch });
    expect(await H.tryWrite('shard-a', tenant, p.epoch)).toBe('ok');
    expect(ids((await doctor()).findings)).not.toContain(`frozen-without-move:${tenant}`);
  });

  it('reports fences that disagree with the directory, and the statement it prints fixes them', async () => {
    const tenant = await H.newTenant('shard-a', 'docfnc');
    await installOwner(shardPool('shard-c'), tenant, 1);
    const d = await doctor();
    expect(d.code).toBe(1);
    const split = d.findings.find((x) => x.id === `fence-disagrees:shard-c:${tenant}`)!;
    expect(split.message).toMatch(/two write authorities/);
    expect(split.fix).toContain('pg_advisory_xact_lock(421');
    // The printed psql command's statement, run as printed, removes the finding.
    const sql = /-c "(.*)"$/.exec(split.fix)![1];
    await shardPool('shard-c').query(sql);
    expect(ids((await doctor()).findings)).not.toContain(`fence-disagrees:shard-c:${tenant}`);
    expect(await H.tryWrite('shard-c', tenant, 1)).toBe('SC421');

    await disown(shardPool('shard-a'), tenant, 1);
    const own = (await doctor()).findings.find((x) => x.id === `fence-disagrees:shard-a:${tenant}`)!;
    expect(own.message).toMatch(/does not own it/);
    await shardPool('shard-a').query(/-c "(.*)"$/.exec(own.fix)![1]);
    expect(ids((await doctor()).findings)).not.toContain(`fence-disagrees:shard-a:${tenant}`);
    expect(await H.tryWrite('shard-a', tenant, 1)).toBe('ok');
  });

  it('reports a tenant table without the fence trigger, fixed by shards prepare', () => unfencedTableFixedByPrepare('missing'));
  it('reports a tenant table whose fence trigger is disabled, fixed by shards prepare', () => unfencedTableFixedByPrepare('disabled'));

  async function unfencedTableFixedByPrepare(how: 'missing' | 'disabled') {
    // In a schema of its own, named only in this test's config: every suite prepares the shared
    // stack's shards, and a concurrent prepare would fence a table in public before doctor looks.
    const schema = `doc_${uniq('s').replace(/-/g, '_')}`;
    const base = testConfig();
    const cfg = configFile({ ...base, tenant: { ...base.tenant, schemas: [...base.tenant.schemas, schema] } });
    const shard = shardPool('shard-c');
    const prepare = async () => {
      const prep = await runCli(['--config', cfg.file, 'shards', 'prepare', '--shard', 'shard-c']);
      expect(prep.code, prep.stdout + prep.stderr).toBe(0);
    };
    // The trigger's state as pg_trigger holds it: 'O' fires for ordinary writers, 'D' never.
    const fenceTrigger = async () =>
      (await shard.query(`select tgenabled from pg_trigger where tgrelid = $1::regclass and tgname = 'shardctl_fence'`, [`${schema}.t`])).rows[0]?.tgenabled;
    await shard.query(`create schema ${schema}; create table ${schema}.t (tenant_id text not null, id int not null, primary key (tenant_id, id))`);
    try {
      if (how === 'disabled') {
        await prepare();
        await shard.query(`alter table ${schema}.t disable trigger shardctl_fence`);
        expect(await fenceTrigger()).toBe('D');
      } else {
        expect(await fenceTrigger()).toBeUndefined();
      }
      const f = (await doctor('--config', cfg.file)).findings.find((x) => x.id === 'unfenced-tables:shard-c')!;
      expect(f?.message).toContain(`${schema}.t`);
      expect(f.fix).toBe('shardctl shards prepare --shard shard-c');
      await prepare();
      expect(await fenceTrigger()).toBe('O');
      expect(ids((await doctor('--config', cfg.file)).findings)).not.toContain('unfenced-tables:shard-c');
    } finally {
      await shard.query(`drop schema ${schema} cascade`);
      cfg.remove();
    }
  }

  it('reports an unreachable shard, and with Temporal down calls no slot an orphan', async () => {
    const unit = uniq('orph');
    const slot = await orphanFor('shard-b', unit);
    const base = testConfig();
    const cfg = configFile({
      ...base,
      temporal: { ...base.temporal, address: `127.0.0.1:${await closedPort()}` },
      shards: [...base.shards, { name: 'shard-x', dsn: `postgres://shardctl:pw@127.0.0.1:${await closedPort()}/shardctl`, bucket: 'shardctl-shard-x' }],
    });
    try {
      const r = await runCli(['--config', cfg.file, 'doctor', '--json'], { timeoutMs: 60_000 });
      expect(r.code).toBe(1);
      const findings: Finding[] = JSON.parse(r.stdout).findings;
      expect(ids(findings)).toEqual(expect.arrayContaining(['temporal-unreachable', 'shard-unreachable:shard-x']));
      expect(findings.filter((f) => f.kind === 'orphaned-slot' || f.kind === 'orphaned-publication')).toEqual([]);
      const fix = await runCli(['--config', cfg.file, 'doctor', '--fix', `orphaned-slot:shard-b:${slot}`], { timeoutMs: 60_000 });
      expect(fix.code).not.toBe(0);
      expect(await slotExists('shard-b', slot)).toBe(true);
    } finally {
      cfg.remove();
      const d = await runCli(['doctor', '--fix', `orphaned-slot:shard-b:${slot}`, '--fix', `orphaned-publication:shard-b:${slot}`]);
      expect(d.code, d.stderr).toBe(0);
    }
  });
  it(
    'reports objects written behind shardctl’s back into a non-owner’s bucket under a moved tenant’s prefix, and nothing for a clean move',
    { timeout: 120_000 },
    async () => {
      const refs: MoveRef[] = [];
      const p = await H.inProcessActivities({ refs });
      const written: { shard: string; keys: string[] }[] = [];
      try {
        // Moved from shard-a to shard-b by the move's own activities; shard-a keeps its copy (soak).
        const { tenant } = await switchedTenant(p.act, refs, 'docblob', 'shard-a', 'shard-b');
        const ofTenant = (fs: Finding[]) => fs.filter((f) => f.kind === 'foreign-blobs' && f.unit === tenant);
        // Clean: the old owner's copy is what the syncs recorded in its ledger, so nothing is reported.
        expect(ofTenant((await doctor()).findings)).toEqual([]);

        written.push({ shard: 'shard-a', keys: await putDirect(p.deps.s3For('shard-a'), 'shard-a', tenant, 2, 'late') });
        written.push({ shard: 'shard-c', keys: await putDirect(p.deps.s3For('shard-c'), 'shard-c', tenant, 1, 'stray') });
        const d = await doctor();
        expect(d.code).toBe(1);
        const [onA, onC] = ['shard-a', 'shard-c'].map((s) => d.findings.find((x) => x.id === `foreign-blobs:${s}:${tenant}`));
        expect(onA, d.stdout).toMatchObject({ kind: 'foreign-blobs', severity: 'critical', shard: 'shard-a', unit: tenant, autoFix: false });
        expect(onA!.message).toContain(`2 object(s) of ${tenant} in bucket shardctl-shard-a of shard-a`);
        expect(onA!.message).toContain('the directory places it on shard-b');
        for (const k of written[0].keys) expect(onA!.message).toContain(`${k} written`);
        expect(onA!.fix).toContain('aws s3 rm s3://shardctl-shard-a/');
        expect(onC!.message).toContain(`${written[1].keys[0]} written`);
        // The owner's bucket is never reported, and only these three objects were.
        expect(
          ofTenant(d.findings)
            .map((f) => f.id)
            .sort(),
        ).toEqual([`foreign-blobs:shard-a:${tenant}`, `foreign-blobs:shard-c:${tenant}`]);
      } finally {
        for (const w of written) await deleteKeysDirect(p.deps.s3For(w.shard), w.shard, w.keys);
        await p.close();
      }
    },
  );
  it(
    'reports objects deleted behind shardctl’s back from the way back (every one of a moved tenant’s, so none is listed), and nothing once its fix let a soak round copy them back',
    { timeout: 120_000 },
    async () => {
      const refs: MoveRef[] = [];
      const p = await H.inProcessActivities({ refs });
      try {
        const { tenant, ref } = await switchedTenant(p.act, refs, 'docdel', 'shard-a', 'shard-b');
        const ofTenant = (fs: Finding[]) => fs.filter((f) => f.kind === 'foreign-blobs' && f.unit === tenant);
        const keys = (await listKeys(p.deps.s3For('shard-a'), 'shard-a', tenant)).sort();
        expect(keys).toHaveLength(5);
        expect(ofTenant((await doctor()).findings)).toEqual([]);

        await deleteKeysDirect(p.deps.s3For('shard-a'), 'shard-a', keys);
        const d = await doctor();
        expect(d.code).toBe(1);
        const [f] = ofTenant(d.findings);
        expect(f, d.stdout).toMatchObject({
          id: `foreign-blobs:shard-a:${tenant}`,
          kind: 'foreign-blobs',
          severity: 'critical',
          shard: 'shard-a',
          autoFix: false,
        });
        expect(f.message).toContain(`5 object(s) of ${tenant} in bucket shardctl-shard-a of shard-a`);
        expect(f.message).toContain('were deleted behind shardctl');
        for (const k of keys) expect(f.message).toContain(`${k} deleted`);
        expect(f.fix).toContain(`delete from shardctl.blob_ledger where unit = '${tenant}'`);
        expect(ofTenant(d.findings)).toHaveLength(1);

        // A sync reports them and restores nothing; once the ledger is let go as the fix says, the
        // soak's next reverse sync copies them back from the owner: the way back is whole again.
        const round = await p.act.copyBlobs({ ...ref, direction: 'reverse' });
        expect(round.outOfBand.map((o) => `${o.key} ${o.change}`).sort()).toEqual(keys.map((k) => `${k} deleted`));
        expect(await listKeys(p.deps.s3For('shard-a'), 'shard-a', tenant)).toEqual([]);
        await shardPool('shard-a').query('delete from shardctl.blob_ledger where unit = $1', [tenant]);
        await p.act.copyBlobs({ ...ref, direction: 'reverse' });
        expect(await listKeys(p.deps.s3For('shard-a'), 'shard-a', tenant)).toEqual(keys);
        expect(ofTenant((await doctor()).findings)).toEqual([]);
      } finally {
        await p.close();
      }
    },
  );
  it(
    'takes a sync’s own deletes, between deleting the objects and forgetting them, for shardctl’s: nothing reported while it runs',
    { timeout: 120_000 },
    async () => {
      const refs: MoveRef[] = [];
      const p = await H.inProcessActivities({ refs });
      // shard-a's client lets each DeleteObjects through, then holds its answer: the objects are gone
      // and the sync has not yet recorded it.
      let release!: () => void;
      let reach!: () => void;
      const open = new Promise<void>((r) => (release = r));
      const reached = new Promise<void>((r) => (reach = r));
      const held = s3ClientFor(testConfig(), 'shard-a');
      held.middlewareStack.add(
        (next, context) => async (args) => {
          const out = await next(args);
          if (context.commandName === 'DeleteObjectsCommand') {
            reach();
            await open;
          }
          return out;
        },
        { step: 'initialize', name: 'hold-after-delete' },
      );
      try {
        const { tenant, ref } = await switchedTenant(p.act, refs, 'docown', 'shard-a', 'shard-b');
        const ofTenant = (fs: Finding[]) => fs.filter((f) => f.kind === 'foreign-blobs' && f.unit === tenant);
        // Deleted on the owner (the application's business there): the soak's reverse sync deletes them from the way back.
        const gone = (await listKeys(p.deps.s3For('shard-b'), 'shard-b', tenant)).slice(0, 3);
        await deleteKeysDirect(p.deps.s3For('shard-b'), 'shard-b', gone);
        const sync = createActivities({ ...p.deps, s3For: (sh) => (sh === 'shard-a' ? held : p.deps.s3For(sh)) }).copyBlobs({ ...ref, direction: 'reverse' });
        await reached;
        expect((await listKeys(p.deps.s3For('shard-a'), 'shard-a', tenant)).filter((k) => gone.includes(k))).toEqual([]);
        expect(ofTenant((await doctor()).findings)).toEqual([]);
        release();
        expect((await sync).deleted).toBe(3);
        expect(ofTenant((await doctor()).findings)).toEqual([]);
      } finally {
        release();
        held.destroy();
        await p.close();
      }
    },
  );
});
