// The blob index is the authority (issue 15, DESIGN.md §2): putBlob uploads a new immutable object
// per version and commits its index row (sha256 recorded at write time) in the router's fenced
// transaction; getBlob resolves through the index; deleteBlob removes the row. The collector
// (lib/blobs/gc.ts) deletes only unreferenced version objects older than the grace period, on the
// owner only, and never an object whose row commits while it runs. Real stack: Postgres shards,
// moto, the router.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { createHash } from 'node:crypto';
import { HeadObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { testConfig, shardPool, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import * as B from '../helpers/blobs';
import type { Deps } from '../../activities/deps';
import { Router } from '../../lib/router';
import { freezeSource, setUnitFence, unfreeze } from '../../lib/shard/fence';
import { collectTenantBlobs, type GcDeps } from '../../lib/blobs/gc';
import { isVersionKey, newVersionId, versionKeyOf } from '../../lib/blobs/index-table';
import { projectRoot, shardByName } from '../../lib/config';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { runCli } from '../helpers/cli';
import { readAudit } from '../../lib/directory/audit';

const SOURCE = 'shard-a';
const TARGET = 'shard-b';
let deps: Deps;
let router: Router;
let env: H.InProcess | undefined;
let gcDeps: GcDeps;

beforeAll(async () => {
  env = await H.inProcessActivities({ router: true });
  ({ deps, router } = env);
  gcDeps = {
    tenantColumn: testConfig().tenant.column,
    directoryPool,
    shardPool,
    bucketOf: (s) => ({ shard: s, s3: deps.s3For(s), bucket: shardByName(testConfig(), s).bucket }),
  };
});
afterAll(async () => {
  await env?.close();
});

const keysOn = (shard: string, tenant: string) => B.keysOn(deps.s3For, shard, tenant);
const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const gc = (tenant: string, o: { graceMs?: number; shard?: string; dryRun?: boolean } = {}) =>
  collectTenantBlobs(gcDeps, { tenant, graceMs: o.graceMs ?? 0, shard: o.shard, dryRun: o.dryRun, operator: { actor: 'test' } });

async function indexRows(shard: string, tenant: string) {
  const r = await shardPool(shard).query(
    `select name, object_key, version, size::int as size, sha256, state from shardctl.blob_index where tenant_id = $1 order by name`,
    [tenant],
  );
  return r.rows;
}

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(projectRoot(), 'cli/shardctl.js'), ...args], { cwd: projectRoot(), timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as any).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** True once a session waits for the blob index lock (class 4214) on the shard. */
async function indexLockWaiting(shard: string): Promise<boolean> {
  const r = await shardPool(shard).query(`select count(*)::int as n from pg_locks where locktype = 'advisory' and classid = 4214 and not granted`);
  return r.rows[0].n > 0;
}

/** A put whose upload succeeded and whose transaction then rolled back (the app failed after it): its object's key. */
async function orphanedPut(tenant: string, name: string): Promise<string> {
  let key = '';
  await expect(
    router.withTenant(tenant, { tenants: [tenant] }, 'write', async (_tx, route) => {
      key = (await route.blobs.write(name, 'never committed')).key;
      throw new Error('the application failed after the upload');
    }),
  ).rejects.toThrow('the application failed after the upload');
  return key;
}

describe('the blob index is the authority', () => {
  it('putBlob writes a new immutable object per version and commits its index row with the sha256; getBlob reads the current version; deleteBlob removes the row only', async () => {
    const tenant = await H.newTenant(SOURCE, 'bi-put');
    const grant = { tenants: [tenant] };
    const v1 = await router.putBlob(tenant, grant, 'docs/report.pdf', 'version one');
    const v2 = await router.putBlob(tenant, grant, 'docs/report.pdf', 'version two, longer');
    expect(v1.key).not.toBe(v2.key);
    expect(isVersionKey(v1.key) && isVersionKey(v2.key)).toBe(true);
    expect(v2.key.startsWith(`tenants/${tenant}/docs/report.pdf@`)).toBe(true);
    // Both objects exist (immutable versions); the index names the second, with its sha256 and size.
    expect(await keysOn(SOURCE, tenant)).toEqual([v1.key, v2.key].sort());
    expect(await indexRows(SOURCE, tenant)).toEqual([
      { name: 'docs/report.pdf', object_key: v2.key, version: v2.version, size: 19, sha256: sha('version two, longer'), state: 'live' },
    ]);
    expect(await router.getBlob(tenant, grant, 'docs/report.pdf')).toEqual(Buffer.from('version two, longer'));
    expect(await router.getBlob(tenant, grant, 'docs/none')).toBeUndefined();

    expect(await router.deleteBlob(tenant, grant, 'docs/report.pdf')).toEqual({ deleted: true });
    expect(await router.deleteBlob(tenant, grant, 'docs/report.pdf')).toEqual({ deleted: false });
    expect(await indexRows(SOURCE, tenant)).toEqual([]);
    expect(await router.getBlob(tenant, grant, 'docs/report.pdf')).toBeUndefined();
    // The objects are the collector's: still there until it runs.
    expect(await keysOn(SOURCE, tenant)).toEqual([v1.key, v2.key].sort());
    // A name that would look like a version object is refused before any I/O.
    await expect(router.putBlob(tenant, grant, `x@${newVersionId()}`, 'y')).rejects.toMatchObject({ type: 'InvalidInput' });
    // … by the direct API too, so no key the application manages is ever taken for an unreferenced version.
    await expect(router.withTenant(tenant, grant, 'write', (_tx, route) => route.blobs.put(`x@${newVersionId()}`, 'y'))).rejects.toMatchObject({
      type: 'InvalidInput',
    });
    expect(await keysOn(SOURCE, tenant)).toEqual([v1.key, v2.key].sort());
  });

  it('a put refused as frozen leaves no row and no object; a put rolled back after its upload leaves an unreferenced object that gc collects only after the grace period', async () => {
    const tenant = await H.newTenant(SOURCE, 'bi-fenced');
    const grant = { tenants: [tenant] };
    expect((await freezeSource(shardPool(SOURCE), tenant, 1)).ok).toBe(true);
    await expect(router.putBlob(tenant, grant, 'docs/while-frozen', 'x', { deadlineMs: 400 })).rejects.toMatchObject({ type: 'Frozen' });
    expect((await unfreeze(shardPool(SOURCE), tenant, 1)).ok).toBe(true);
    expect(await indexRows(SOURCE, tenant)).toEqual([]);
    expect(await keysOn(SOURCE, tenant)).toEqual([]);

    const orphan = await orphanedPut(tenant, 'docs/orphan');
    expect(await indexRows(SOURCE, tenant)).toEqual([]);
    expect(await keysOn(SOURCE, tenant)).toEqual([orphan]);
    expect(await router.getBlob(tenant, grant, 'docs/orphan')).toBeUndefined();
    // Within the grace period it is kept (it could be a put whose row has not committed yet).
    expect(await gc(tenant, { graceMs: 3_600_000 })).toMatchObject({ shard: SOURCE, scanned: 1, young: 1, collected: [] });
    expect(await gc(tenant, { dryRun: true })).toMatchObject({ dryRun: true, collected: [orphan] });
    expect(await keysOn(SOURCE, tenant)).toEqual([orphan]);
    expect(await gc(tenant)).toMatchObject({ dryRun: false, collected: [orphan] });
    expect(await keysOn(SOURCE, tenant)).toEqual([]);
  });

  it('gc keeps every object a committed index row names and every object that is not a version; it deletes superseded and deleted versions', async () => {
    const tenant = await H.newTenant(SOURCE, 'bi-keep');
    const grant = { tenants: [tenant] };
    const a1 = await router.putBlob(tenant, grant, 'a', 'a one');
    const b = await router.putBlob(tenant, grant, 'b', 'b one');
    const a2 = await router.putBlob(tenant, grant, 'a', 'a two');
    const c = await router.putBlob(tenant, grant, 'c', 'c one');
    await router.deleteBlob(tenant, grant, 'c');
    // The application's own key (the direct API): not index-managed, never collected.
    const plain = await router.withTenant(tenant, grant, 'write', (_tx, route) => route.blobs.put('plain/file', 'kept by its own row'));
    const r = await gc(tenant);
    expect(r).toMatchObject({ scanned: 5, referenced: 2, young: 0, notVersions: 1 });
    expect([...r.collected].sort()).toEqual([a1.key, c.key].sort());
    expect(await keysOn(SOURCE, tenant)).toEqual([a2.key, b.key, plain.key].sort());
    expect(await router.getBlob(tenant, grant, 'a')).toEqual(Buffer.from('a two'));
    expect(await router.getBlob(tenant, grant, 'b')).toEqual(Buffer.from('b one'));
    expect((await gc(tenant)).collected).toEqual([]);
  });

  it('gc waits for a put in flight and never deletes an object whose index row commits after gc began', async () => {
    const tenant = await H.newTenant(SOURCE, 'bi-race');
    const grant = { tenants: [tenant] };
    let uploaded!: () => void;
    let commit!: () => void;
    const reached = new Promise<void>((r) => (uploaded = r));
    const gate = new Promise<void>((r) => (commit = r));
    let key = '';
    const put = router.withTenant(tenant, grant, 'write', async (_tx, route) => {
      key = (await route.blobs.write('docs/in-flight', 'committed after gc began')).key;
      uploaded();
      await gate;
    });
    await reached;
    // The row is not committed: a collector that does not wait would see an unreferenced object.
    const collecting = gc(tenant);
    let settled = false;
    void collecting.then(
      () => (settled = true),
      () => (settled = true),
    );
    let waiting = false;
    for (let i = 0; i < 150 && !settled && !waiting; i++) {
      waiting = await indexLockWaiting(SOURCE);
      if (!waiting) await new Promise((r) => setTimeout(r, 20));
    }
    commit();
    await put;
    const r = await collecting;
    expect(r.collected).toEqual([]);
    expect(r.referenced).toBe(1);
    expect(await keysOn(SOURCE, tenant)).toEqual([key]);
    expect(await router.getBlob(tenant, grant, 'docs/in-flight')).toEqual(Buffer.from('committed after gc began'));
    expect(waiting, 'gc was seen waiting for the put to end').toBe(true);
  });

  it('gc refuses on a shard that does not own the tenant, and where the owner’s fence does not accept its writes, deleting nothing', async () => {
    const tenant = await H.newTenant(SOURCE, 'bi-owner');
    // An unreferenced version object, old enough, in the bucket of a shard that is not the owner.
    const stray = versionKeyOf(tenant, 'docs/stray', newVersionId(Date.now() - 86_400_000));
    await deps.s3For(TARGET).send(new PutObjectCommand({ Bucket: shardByName(testConfig(), TARGET).bucket, Key: stray, Body: 'stray' }));
    await expect(gc(tenant, { shard: TARGET })).rejects.toMatchObject({
      type: 'PreconditionFailed',
      message: expect.stringMatching(/its owner is shard shard-a/),
    });
    await deps.s3For(TARGET).send(new HeadObjectCommand({ Bucket: shardByName(testConfig(), TARGET).bucket, Key: stray }));
    expect(await keysOn(TARGET, tenant)).toEqual([stray]);

    // The directory names the source, but the source's fence says it does not own the unit: refused there too.
    const orphan = await orphanedPut(tenant, 'docs/orphan');
    await setUnitFence(shardPool(SOURCE), { unit: tenant, epoch: 1, owned: false, frozen: false });
    try {
      await expect(gc(tenant)).rejects.toMatchObject({ type: 'PreconditionFailed', message: expect.stringMatching(/does not accept its writes/) });
      expect(await keysOn(SOURCE, tenant)).toEqual([orphan]);
    } finally {
      await setUnitFence(shardPool(SOURCE), { unit: tenant, epoch: 1, owned: true, frozen: false });
    }
    expect((await gc(tenant)).collected).toEqual([orphan]);
    expect(await keysOn(TARGET, tenant)).toEqual([stray]);
  });

  it('shardctl blobs gc: --dry-run lists what it would delete and deletes nothing, a non-owner --shard exits 4, a run deletes only the unreferenced version', async () => {
    const tenant = await H.newTenant(SOURCE, 'bi-cli');
    const kept = await router.putBlob(tenant, { tenants: [tenant] }, 'docs/kept', 'committed');
    const orphan = await orphanedPut(tenant, 'docs/orphan');
    const dry = await cli(['blobs', 'gc', '--tenant', tenant, '--grace', '0s', '--dry-run', '--json']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(JSON.parse(dry.stdout)).toMatchObject({
      dryRun: true,
      graceMs: 0,
      tenants: [{ tenant, shard: SOURCE, referenced: 1, collected: [orphan] }],
      skipped: [],
    });
    expect(await keysOn(SOURCE, tenant)).toEqual([kept.key, orphan].sort());
    const refused = await cli(['blobs', 'gc', '--tenant', tenant, '--shard', TARGET, '--grace', '0s', '--json']);
    expect(refused.code).toBe(4);
    expect(JSON.parse(refused.stderr).error.message).toContain(`its owner is shard ${SOURCE}`);
    expect(await keysOn(SOURCE, tenant)).toEqual([kept.key, orphan].sort());
    const young = await cli(['blobs', 'gc', '--tenant', tenant]);
    expect(young.code, young.stderr).toBe(0);
    expect(young.stdout).toContain(`${tenant} on ${SOURCE}: deleted 0 unreferenced version object(s); kept 1 referenced, 1 within the grace period`);
    const run = await cli(['blobs', 'gc', '--tenant', tenant, '--grace', '0s']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain(`${tenant} on ${SOURCE}: deleted 1 unreferenced version object(s); kept 1 referenced`);
    expect(run.stdout).toContain(`  ${orphan}`);
    expect(await keysOn(SOURCE, tenant)).toEqual([kept.key]);
  });

  it('shardctl blobs gc records who deleted what: one blobs.gc entry per tenant collected, with the operator, the reason and the keys deleted', async () => {
    const tenant = await H.newTenant(SOURCE, 'bi-aud');
    await router.putBlob(tenant, { tenants: [tenant] }, 'docs/kept', 'committed');
    const orphan = await orphanedPut(tenant, 'docs/orphan');
    const run = await runCli(['blobs', 'gc', '--tenant', tenant, '--grace', '0s', '--actor', 'sre-gc', '--reason', 'OPS-9 over quota']);
    expect(run.code, run.stderr).toBe(0);
    // Without --actor: $SHARDCTL_ACTOR, as every verb; a run that deletes nothing is recorded too.
    const again = await runCli(['blobs', 'gc', '--tenant', tenant, '--grace', '0s'], { env: { SHARDCTL_ACTOR: 'env-operator' } });
    expect(again.code, again.stderr).toBe(0);
    expect((await gcEntries(tenant)).map((e) => ({ actor: e.actor, reason: e.reason, detail: e.detail }))).toEqual([
      {
        actor: 'sre-gc',
        reason: 'OPS-9 over quota',
        detail: {
          shard: SOURCE,
          epoch: 1,
          bucket: shardByName(testConfig(), SOURCE).bucket,
          dryRun: false,
          graceMs: 0,
          deleted: 1,
          keys: [orphan],
          kept: { referenced: 1, young: 0, notVersions: 0 },
        },
      },
      { actor: 'env-operator', reason: null, detail: expect.objectContaining({ deleted: 0, keys: [] }) },
    ]);
  });

  it('shardctl blobs gc --dry-run records nothing in the audit log (as every dry run)', async () => {
    const tenant = await H.newTenant(SOURCE, 'bi-dry');
    const orphan = await orphanedPut(tenant, 'docs/orphan');
    const dry = await runCli(['blobs', 'gc', '--tenant', tenant, '--grace', '0s', '--dry-run', '--actor', 'sre-gc', '--json']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(JSON.parse(dry.stdout).tenants[0].collected).toEqual([orphan]);
    expect(await gcEntries(tenant)).toEqual([]);
  });
});

/** The tenant's `blobs.gc` audit entries, oldest first. */
async function gcEntries(tenant: string) {
  return (await readAudit(directoryPool(), { unit: tenant, sinceMs: 3_600_000, limit: 100 })).entries.filter((e) => e.action === 'blobs.gc');
}
