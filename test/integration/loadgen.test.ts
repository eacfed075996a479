// Seed, loadgen and verify against the real stack: the evidence the crash tests rely on. Verify
// must pass on honest data and name every kind of damage precisely: a lost acked row, a changed
// value (including a body nulled like a mishandled unchanged-TOAST update), a refused write that
// appears, a deleted row that comes back, a missing blob.
import { inTransaction } from '../../lib/pg';
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Pool as PgPool, type Pool, type PoolClient } from 'pg';
import { DeleteObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { testConfig, uniq, shardPool, directoryPool, closePools } from '../helpers/stack';
import { ensureDirectory } from '../../lib/directory/ensure';
import { prepareShard } from '../../lib/shard/prepare';
import { createTenant } from '../../lib/tenants';
import { getUnitFence, setUnitFence } from '../../lib/shard/fence';
import { Router } from '../../lib/router';
import { createDeps, Deps } from '../../activities/deps';
import { seedTenant } from '../../lib/seed';
import { runLoadgen, startLoadgen, verifyLog, readLog, foldLog, LogRecord, TenantRouter, snapshotUnit, addAcked } from '../../lib/loadgen';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { projectRoot, shardByName } from '../../lib/config';

const execFileP = promisify(execFile);
const config = testConfig();
let dir: Pool;
const pools = new Map<string, Pool>();
const pool = (s: string) => {
  if (!pools.has(s)) pools.set(s, shardPool(s));
  return pools.get(s)!;
};
let router: Router;
let deps: Deps;
let tmp: string;

beforeAll(async () => {
  dir = directoryPool();
  await ensureDirectory(dir, config);
  for (const s of config.shards) await prepareShard(pool(s.name), config, { demoSchema: true });
  router = await Router.create(config);
  deps = createDeps(config);
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shardctl-loadgen-'));
});

afterAll(async () => {
  await router?.close();
  await deps?.close();
  await closePools();
  fs.rmSync(tmp, { recursive: true, force: true });
});

async function newTenant(prefix: string, shard: string): Promise<string> {
  const tenant = uniq(prefix);
  await createTenant({ directory: dir, shardPool: pool, config }, { tenant, shard, actor: 'loadgen-test' });
  return tenant;
}

const logPath = (name: string) => path.join(tmp, `${uniq(name)}.jsonl`);

/** Four seconds of mostly writes on one tenant: long enough for many blob puts, overwrites and deletes. */
const blobHeavyLoad = (tenant: string, logFile: string, blobWrites: 'direct' | 'index') =>
  runLoadgen({
    config,
    router,
    s3For: deps.s3For,
    tenants: [tenant],
    rate: 150,
    durationMs: 4000,
    logFile,
    concurrency: 2,
    seed: 12,
    readFraction: 0.1,
    blobWrites,
  });
const bucketOf = (shard: string) => config.shards.find((s) => s.name === shard)!.bucket;

/** The data plane's way in: replica role skips the fence trigger, as copy/apply do. */
async function asReplica(shard: string, fn: (c: PoolClient) => Promise<void>) {
  await inTransaction(pool(shard), async (c) => {
    await c.query('set local session_replication_role = replica');
    await fn(c);
  });
}

/** Keys whose expected final state is definite and present (or absent), from the log. */
function finalKeys(records: LogRecord[]) {
  const keys = foldLog(records).keys.filter((k) => k.states.length === 1 && k.unknown === 0);
  return {
    present: keys.filter((k) => k.states[0].present && k.acks > 0),
    deleted: keys.filter((k) => !k.states[0].present && k.acks > 0),
    refusedOnly: keys.filter((k) => k.acks === 0 && k.refused.length > 0),
  };
}

describe('seed', () => {
  it('writes the planned rows through the router, TOASTs large bodies and puts each blob in the owner bucket', async () => {
    const tenant = await newTenant('seed', 'shard-b');
    const sum = await seedTenant({ router, s3For: deps.s3For, config, tenant, rows: 1000, blobs: 12 });
    expect(sum).toMatchObject({ tenant, shard: 'shard-b', accounts: 100, documents: 300, events: 450, jobs: 150, blobs: 12 });
    const db = pool('shard-b');
    const count = async (sql: string) => Number((await db.query(sql, [tenant])).rows[0].n);
    expect(await count('select count(*) n from public.accounts where tenant_id = $1')).toBe(100);
    expect(await count('select count(*) n from public.documents where tenant_id = $1')).toBe(300);
    expect(await count('select count(*) n from public.events where tenant_id = $1')).toBe(450);
    expect(await count(`select count(*) n from public.jobs where tenant_id = $1 and state = 'queued'`)).toBe(150);
    expect(await count(`select count(distinct payload->>'kind') n from public.events where tenant_id = $1`)).toBeGreaterThan(1);
    // Jobs spread over time: some due already, some in the future.
    expect(await count(`select count(*) n from public.jobs where tenant_id = $1 and run_at < now()`)).toBeGreaterThan(0);
    expect(await count(`select count(*) n from public.jobs where tenant_id = $1 and run_at > now() + interval '5 minutes'`)).toBeGreaterThan(0);
    // Incompressible > 20 KB bodies: stored at full size, which only fits out of line (TOAST).
    expect(sum.largeBodies).toBe(75);
    expect(await count(`select count(*) n from public.documents where tenant_id = $1 and pg_column_size(body) > 20000`)).toBe(75);
    const toast = await db.query(`select pg_relation_size(reltoastrelid) as size from pg_class where oid = 'public.documents'::regclass`);
    expect(Number(toast.rows[0].size)).toBeGreaterThan(75 * 20000);
    // Every blob row names an object that exists in the owning shard's bucket.
    const blobs = await db.query('select blob_key from public.documents where tenant_id = $1 and blob_key is not null order by blob_key', [tenant]);
    expect(blobs.rows.map((r) => r.blob_key)).toEqual([...sum.blobKeys].sort());
    for (const key of sum.blobKeys) {
      expect(key).toMatch(new RegExp(`^tenants/${tenant}/docs/[0-9a-f-]{36}$`));
      const head = await deps.s3For('shard-b').send(new HeadObjectCommand({ Bucket: bucketOf('shard-b'), Key: key }));
      expect(head.ContentLength).toBeGreaterThan(0);
    }
  });
});

describe('loadgen and verify', () => {
  it('acks writes on two tenants on two shards and verify finds every one of them', async () => {
    const [a, b] = [await newTenant('lg-a', 'shard-b'), await newTenant('lg-b', 'shard-c')];
    const logFile = logPath('two');
    const stats = await runLoadgen({ config, router, s3For: deps.s3For, tenants: [a, b], rate: 80, durationMs: 3000, logFile, concurrency: 4, seed: 1 });
    expect(stats.writes.ack).toBeGreaterThan(100);
    expect(stats.writes).toMatchObject({ refused: 0, unknown: 0 });
    expect(stats.byOp.blob_put.ack).toBeGreaterThan(0);
    expect(stats.byOp.delete.ack).toBeGreaterThan(0);
    expect(stats.reads.ok).toBeGreaterThan(0);
    expect(stats.readMismatches).toBe(0);
    expect(stats.latency.write.count).toBe(stats.writes.ack);
    const records = readLog(logFile);
    expect(records).toHaveLength(stats.writes.ack);
    expect(new Set(records.map((r) => r.tenant))).toEqual(new Set([a, b]));
    expect(new Set(records.map((r) => r.shard))).toEqual(new Set(['shard-b', 'shard-c']));
    for (const r of records) expect(Object.keys(r)).toEqual(expect.arrayContaining(['seq', 'ts', 'tenant', 'table', 'key', 'op', 'value', 'status']));
    const report = await verifyLog({ logFile, config });
    expect(report).toMatchObject({ ok: true, missing: [], wrongValue: [], presentButRefused: [], presentButDeleted: [], blobMissing: [], unknownOutcomes: 0 });
    expect(report.checked).toBe(new Set(records.map((r) => `${r.tenant}/${r.table}/${r.key}`)).size);
    expect(report.blobsChecked).toBe(stats.byOp.blob_put.ack - report.blobsDeleted);
  });

  it('overwrites and deletes objects: an overwrite keeps the old object, a delete clears the row and then the object', async () => {
    const tenant = await newTenant('lg-blobs', 'shard-b');
    const logFile = logPath('blobs');
    // Documents only take blob ops on keys they hold; a long enough run makes many of each.
    const stats = await blobHeavyLoad(tenant, logFile, 'direct');
    expect(stats.writes).toMatchObject({ refused: 0, unknown: 0 });
    const records = readLog(logFile);
    const overwrites = records.filter((r) => r.op === 'blob_put' && r.replaces);
    const deletes = records.filter((r) => r.op === 'blob_delete');
    expect(overwrites.length).toBeGreaterThan(0);
    expect(deletes.length).toBeGreaterThan(0);
    expect(deletes.every((r) => r.status === 'ack' && r.objectDeleted === true)).toBe(true);
    const s3 = deps.s3For('shard-b');
    const exists = (Key: string) =>
      s3.send(new HeadObjectCommand({ Bucket: bucketOf('shard-b'), Key })).then(
        () => true,
        () => false,
      );
    for (const d of deletes) expect(await exists(d.blobKey!), d.blobKey).toBe(false);
    // A replaced object stays unless it was deleted later (the row never names it again).
    const deleted = new Set(deletes.map((d) => d.blobKey));
    for (const o of overwrites.filter((o) => !deleted.has(o.replaces))) expect(await exists(o.replaces!), o.replaces).toBe(true);
    const report = await verifyLog({ logFile, config });
    expect(report.ok).toBe(true);
    expect(report.blobsDeleted).toBe(deletes.length);
    expect(report.blobsChecked).toBe(stats.byOp.blob_put.ack - deletes.length);
    // The row of a deleted object names none: put one back in the row and verify says so.
    const victim = deletes.find(
      (d) => !records.some((r) => r.key === d.key && r.seq > d.seq && r.status === 'ack' && (r.op === 'blob_put' || r.op === 'delete')),
    );
    expect(victim, 'a deleted object whose document kept no object').toBeDefined();
    await asReplica('shard-b', async (c) => {
      await c.query('update public.documents set blob_key = $3 where tenant_id = $1 and id = $2', [tenant, victim!.key, victim!.blobKey]);
    });
    const bad = await verifyLog({ logFile, config });
    expect(bad.wrongValue.map((f) => [f.key, f.columns])).toEqual([[victim!.key, ['blob_key']]]);
  });

  it("through the blob index: a put records a version in the row's transaction, an overwrite a new version of the same name, a delete unlinks the name with the row; verify checks index and object", async () => {
    const tenant = await newTenant('lg-index', 'shard-b');
    const seeded = await seedTenant({ router, s3For: deps.s3For, config, tenant, rows: 200, blobs: 5, blobWrites: 'index' });
    const db = pool('shard-b');
    const indexRows = async () =>
      (await db.query('select name, object_key, sha256 from shardctl.blob_index where tenant_id = $1 order by name', [tenant])).rows as Array<{
        name: string;
        object_key: string;
        sha256: string;
      }>;
    // The seed's documents name their blobs; the index holds a version object for each name.
    expect((await indexRows()).map((r) => `tenants/${tenant}/${r.name}`)).toEqual([...seeded.blobKeys].sort());
    const logFile = logPath('index');
    const stats = await blobHeavyLoad(tenant, logFile, 'index');
    expect(stats.writes).toMatchObject({ refused: 0, unknown: 0 });
    const records = readLog(logFile);
    const blobOps = records.filter((r) => r.op === 'blob_put' || r.op === 'blob_delete');
    expect(blobOps.every((r) => r.indexed === true && r.status === 'ack')).toBe(true);
    // Each name's last acknowledged op: a put (new name or overwrite) leaves a version, a delete none.
    const last = new Map(blobOps.map((r) => [r.blobKey!, r]));
    const live = [...last.values()].filter((r) => r.op === 'blob_put');
    const gone = [...last.values()].filter((r) => r.op === 'blob_delete');
    expect(live.filter((r) => r.overwrites).length, 'names whose last write was an overwrite').toBeGreaterThan(0);
    expect(live.filter((r) => !r.overwrites).length, 'names written once').toBeGreaterThan(0);
    expect(gone.length, 'names deleted').toBeGreaterThan(0);
    const rows = new Map((await indexRows()).map((r) => [`tenants/${tenant}/${r.name}`, r]));
    const grant = { tenants: [tenant] };
    const nameOf = (key: string) => key.slice(`tenants/${tenant}/`.length);
    for (const d of gone) {
      expect(rows.has(d.blobKey!), d.blobKey).toBe(false);
      expect(await router.getBlob(tenant, grant, nameOf(d.blobKey!)), d.blobKey).toBeUndefined();
    }
    const s3 = deps.s3For('shard-b');
    for (const p of live) {
      const row = rows.get(p.blobKey!);
      // An overwritten name names its last acknowledged version, not an earlier one.
      expect(row?.sha256, p.blobKey).toBe(p.value);
      // A version object, never the bare name: the document's key is the index's name.
      expect(row!.object_key).toMatch(new RegExp(`^${p.blobKey!.replace(/[.]/g, '\\.')}@`));
      const head = await s3.send(new HeadObjectCommand({ Bucket: bucketOf('shard-b'), Key: row!.object_key }));
      expect(head.ContentLength).toBeGreaterThan(0);
      await expect(s3.send(new HeadObjectCommand({ Bucket: bucketOf('shard-b'), Key: p.blobKey! }))).rejects.toThrow();
    }
    const report = await verifyLog({ logFile, config });
    expect(report).toMatchObject({ ok: true, blobMissing: [], blobPresentButDeleted: [], blobsChecked: live.length, unlinkedChecked: gone.length });

    // An index row lost, an overwritten name put back to the version it replaced, a version object
    // gone, and a deleted name back in the index: each named.
    const overwritten = live.find((p) => p.overwrites)!;
    const replaced = blobOps.filter((r) => r.blobKey === overwritten.blobKey && r.op === 'blob_put' && r.seq < overwritten.seq).pop()!;
    const [lost, gonePut] = live.filter((p) => p !== overwritten).map((p) => rows.get(p.blobKey!)!);
    expect(gonePut, 'three live names').toBeDefined();
    const resurrected = gone[0];
    await asReplica('shard-b', async (c) => {
      await c.query('delete from shardctl.blob_index where tenant_id = $1 and name = $2', [tenant, lost.name]);
      await c.query('update shardctl.blob_index set sha256 = $3 where tenant_id = $1 and name = $2', [tenant, nameOf(overwritten.blobKey!), replaced.value]);
      await c.query(`insert into shardctl.blob_index (tenant_id, name, object_key, version, size, sha256) values ($1, $2, $3, 'v0', 1, $4)`, [
        tenant,
        nameOf(resurrected.blobKey!),
        `${resurrected.blobKey}@v0`,
        'a'.repeat(64),
      ]);
    });
    await s3.send(new DeleteObjectCommand({ Bucket: bucketOf('shard-b'), Key: gonePut.object_key }));
    const bad = await verifyLog({ logFile, config });
    expect(bad.ok).toBe(false);
    expect(bad.blobMissing.map((f) => [f.blobKey, f.reason, f.actualSha256]).sort()).toEqual(
      [
        [`tenants/${tenant}/${lost.name}`, 'not in the blob index', undefined],
        [overwritten.blobKey, 'index sha256 mismatch', replaced.value],
        [`tenants/${tenant}/${gonePut.name}`, 'missing', undefined],
      ].sort(),
    );
    expect(bad.blobPresentButDeleted).toEqual([
      {
        tenant,
        key: resurrected.key,
        blobKey: resurrected.blobKey,
        shard: 'shard-b',
        objectKey: `${resurrected.blobKey}@v0`,
        actualSha256: 'a'.repeat(64),
        reason: 'deleted but in the blob index',
        lastAckSeq: resurrected.seq,
      },
    ]);
    // And getBlob, which resolves names through the same rows, finds the resurrected name again.
    expect(await router.getBlob(tenant, grant, nameOf(resurrected.blobKey!)).catch((e) => e.type)).toBe('Conflict');
  });

  it('checks the whole unit against a baseline: seeded rows and objects, stray rows and objects, writes made outside loadgen', async () => {
    const tenant = await newTenant('lg-unit', 'shard-c');
    await seedTenant({ router, s3For: deps.s3For, config, tenant, rows: 200, blobs: 3 });
    const baseline = await snapshotUnit({ config, tenant, directory: dir, shardPool: pool, s3For: deps.s3For });
    expect(baseline.blobs).toHaveLength(3);
    expect(baseline.tables.reduce((n, t) => n + t.rows, 0)).toBe(200);
    const logFile = logPath('unit');
    await runLoadgen({ config, router, s3For: deps.s3For, tenants: [tenant], rate: 80, durationMs: 2000, logFile, concurrency: 2, seed: 13 });
    // An acknowledged write outside loadgen: declared, it must exist; undeclared, it is a stray row.
    const extra = await router.withTenant(
      tenant,
      { tenants: [tenant] },
      'write',
      async (tx) => (await tx.query(`insert into public.events(tenant_id, kind) values ($1, 'outside') returning id::text`, [tenant])).rows[0].id as string,
    );
    const strayBefore = await verifyLog({ logFile, config, baselines: [baseline] });
    expect(strayBefore.unit.map((f) => f.what)).toEqual([
      expect.stringMatching(/^public\.events: \d+ rows outside loadgen's keys on shard-c, the baseline had \d+$/),
    ]);
    addAcked(baseline, 'public.events', [extra]);
    const honest = await verifyLog({ logFile, config, baselines: [baseline] });
    expect(honest.unit).toEqual([]);
    expect(honest.ok).toBe(true);
    expect(honest.ownerRows[tenant]['public.jobs']).toBe(baseline.tables.find((t) => t.table === 'public.jobs')!.rows);

    const seededAccount = (
      await pool('shard-c').query(`select id::text from public.accounts where tenant_id = $1 and name not like 'loadgen %' limit 1`, [tenant])
    ).rows[0].id;
    const seededJob = (await pool('shard-c').query(`select id::text from public.jobs where tenant_id = $1 limit 1`, [tenant])).rows[0].id;
    await asReplica('shard-c', async (c) => {
      await c.query(`update public.accounts set name = 'tampered' where tenant_id = $1 and id = $2`, [tenant, seededAccount]);
      await c.query(`delete from public.jobs where tenant_id = $1 and id = $2`, [tenant, seededJob]);
      await c.query(`delete from public.events where tenant_id = $1 and id = $2`, [tenant, extra]);
    });
    const s3 = deps.s3For('shard-c');
    await s3.send(new DeleteObjectCommand({ Bucket: bucketOf('shard-c'), Key: baseline.blobs[0].key }));
    await s3.send(new PutObjectCommand({ Bucket: bucketOf('shard-c'), Key: `tenants/${tenant}/docs/unexplained`, Body: 'x' }));
    const r = await verifyLog({ logFile, config, baselines: [baseline] });
    expect(r.ok).toBe(false);
    const whats = r.unit.map((f) => f.what);
    expect(whats).toHaveLength(5);
    expect(whats).toEqual(
      expect.arrayContaining([
        `1 objects in ${bucketOf('shard-c')} neither seeded nor written by loadgen, e.g. tenants/${tenant}/docs/unexplained`,
        `baseline object ${baseline.blobs[0].key} is missing from ${bucketOf('shard-c')}`,
        expect.stringMatching(/^public\.accounts: the \d+ baseline rows differ in content on shard-c$/),
        `public.events: 1 of 1 acknowledged writes made outside loadgen are missing on shard-c`,
        expect.stringMatching(/^public\.jobs: \d+ rows outside loadgen's keys on shard-c, the baseline had \d+$/),
      ]),
    );
  });

  it('a baseline read under other session settings (time zone, date style, float digits) still matches its rows', async () => {
    // The baseline and the check may read two shards whose servers differ in their defaults
    // (test/e2e/shard-settings.test.ts): the row text they hash must not depend on them.
    const tenant = await newTenant('lg-skew', 'shard-c');
    await seedTenant({ router, s3For: deps.s3For, config, tenant, rows: 60, blobs: 0 });
    const skewed = new PgPool({
      connectionString: shardByName(config, 'shard-c').dsn,
      max: 2,
      options: '-c timezone=Pacific/Chatham -c datestyle=SQL,DMY -c extra_float_digits=0 -c intervalstyle=sql_standard',
    });
    try {
      const baseline = await snapshotUnit({ config, tenant, directory: dir, shardPool: () => skewed, s3For: deps.s3For });
      expect(baseline.tables.reduce((n, t) => n + t.rows, 0)).toBe(60);
      const same = await snapshotUnit({ config, tenant, directory: dir, shardPool: pool, s3For: deps.s3For });
      expect(same.tables).toEqual(baseline.tables);
    } finally {
      await skewed.end();
    }
  });

  it('reports a lost acked row, a changed value, a nulled body, a refused insert that appears, a resurrected row and a missing blob, each by key', async () => {
    const tenant = await newTenant('lg-tamper', 'shard-b');
    const logFile = logPath('tamper');
    await runLoadgen({ config, router, s3For: deps.s3For, tenants: [tenant], rate: 100, durationMs: 2500, logFile, concurrency: 2, seed: 2 });
    // Refusals for real: the unit is frozen for the whole second run and its writers give up.
    const fence = (await getUnitFence(pool('shard-b'), tenant))!;
    await setUnitFence(pool('shard-b'), { ...fence, frozen: true });
    const refusedRun = await runLoadgen({
      config,
      router,
      s3For: deps.s3For,
      tenants: [tenant],
      rate: 40,
      durationMs: 600,
      logFile,
      concurrency: 2,
      seed: 3,
      deadlineMs: 150,
      readFraction: 0,
    });
    await setUnitFence(pool('shard-b'), { ...fence, frozen: false });
    expect(refusedRun.writes.ack).toBe(0);
    expect(refusedRun.writes.refused).toBeGreaterThan(0);
    expect(refusedRun.errorsByType.Frozen).toBe(refusedRun.writes.refused);

    const honest = await verifyLog({ logFile, config });
    expect(honest.ok).toBe(true);

    const records = readLog(logFile);
    const keys = finalKeys(records);
    const account = keys.present.find((k) => k.table === 'accounts')!;
    const event = keys.present.find((k) => k.table === 'events')!;
    const doc = keys.present.find((k) => k.table === 'documents' && k.states[0].bodySha)!;
    const deletedAccount = keys.deleted.find((k) => k.table === 'accounts')!;
    const refusedInsert = keys.refusedOnly.find((k) => k.table === 'accounts')!;
    const blob = foldLog(records).blobs[0];
    for (const x of [account, event, doc, deletedAccount, refusedInsert, blob]) expect(x).toBeDefined();

    await asReplica('shard-b', async (c) => {
      await c.query('delete from public.accounts where tenant_id = $1 and id = $2', [tenant, account.key]);
      await c.query(`update public.events set payload = jsonb_set(payload, '{v}', '999') where tenant_id = $1 and id = $2`, [tenant, event.key]);
      await c.query('update public.documents set body = null where tenant_id = $1 and id = $2', [tenant, doc.key]);
      await c.query(`insert into public.accounts (tenant_id, id, name) values ($1, $2, 'sneaked in')`, [tenant, refusedInsert.key]);
      await c.query(`insert into public.accounts (tenant_id, id, name) values ($1, $2, 'back from the dead')`, [tenant, deletedAccount.key]);
    });
    await deps.s3For('shard-b').send(new DeleteObjectCommand({ Bucket: bucketOf('shard-b'), Key: blob.blobKey }));

    const r = await verifyLog({ logFile, config });
    expect(r.ok).toBe(false);
    expect(r.missing.map((f) => [f.table, f.key])).toEqual([['accounts', account.key]]);
    expect(r.missing[0]).toMatchObject({ actual: 'absent', shard: 'shard-b', expected: account.states });
    expect(r.wrongValue.map((f) => [f.table, f.key, f.columns]).sort()).toEqual(
      [
        ['documents', doc.key, ['body']],
        ['events', event.key, ['payload.v']],
      ].sort(),
    );
    expect(r.presentButRefused.map((f) => [f.table, f.key])).toEqual([['accounts', refusedInsert.key]]);
    expect(r.presentButRefused[0].refused!.length).toBeGreaterThan(0);
    expect(r.presentButDeleted.map((f) => [f.table, f.key])).toEqual([['accounts', deletedAccount.key]]);
    expect(r.blobMissing).toEqual([expect.objectContaining({ tenant, key: blob.key, blobKey: blob.blobKey, bucket: bucketOf('shard-b'), reason: 'missing' })]);
    expect(r.checked).toBe(honest.checked);
  });

  it('delays writes while the tenant is frozen for a second, loses none of them', async () => {
    const tenant = await newTenant('lg-freeze', 'shard-c');
    const logFile = logPath('freeze');
    const h = startLoadgen({ config, router, s3For: deps.s3For, tenants: [tenant], rate: 50, durationMs: 3500, logFile, concurrency: 3, seed: 4 });
    await new Promise((r) => setTimeout(r, 1000));
    const fence = (await getUnitFence(pool('shard-c'), tenant))!;
    await setUnitFence(pool('shard-c'), { ...fence, frozen: true });
    // Writers that passed the fence before it rose may still be reporting their commit.
    await new Promise((r) => setTimeout(r, 100));
    const ackedBefore = h.stats.writes.ack;
    await new Promise((r) => setTimeout(r, 900));
    const ackedWhileFrozen = h.stats.writes.ack - ackedBefore;
    await setUnitFence(pool('shard-c'), { ...fence, frozen: false });
    const stats = await h.done;
    expect(ackedBefore).toBeGreaterThan(0);
    expect(ackedWhileFrozen).toBe(0);
    expect(stats.writes).toMatchObject({ refused: 0, unknown: 0 });
    expect(stats.writes.ack).toBeGreaterThan(ackedBefore);
    expect(stats.latency.write.max).toBeGreaterThan(800);
    expect(stats.readMismatches).toBe(0);
    const report = await verifyLog({ logFile, config });
    expect(report.ok).toBe(true);
    expect(report.checked).toBeGreaterThan(0);
  });

  it('logs a connection lost around COMMIT as unknown, and verify accepts the key before or after', async () => {
    const tenant = await newTenant('lg-unknown', 'shard-c');
    const logFile = logPath('unknown');
    // Every 4th write loses its connection once the body has run: half of those after the real
    // COMMIT (the write is there), half inside the transaction (rolled back, it is not).
    let n = 0;
    const lossy: TenantRouter = {
      async withTenant(t, grant, mode, fn, opts) {
        const i = mode === 'write' ? ++n : 0;
        const lost = () => Object.assign(new Error('Connection terminated unexpectedly'), { lostAt: i });
        const out = await router.withTenant(
          t,
          grant,
          mode,
          async (tx) => {
            const r = await fn(tx);
            if (i % 8 === 4) throw lost();
            return r;
          },
          opts,
        );
        if (i % 8 === 0 && i > 0) throw lost();
        return out;
      },
    };
    const stats = await runLoadgen({
      config,
      router: lossy,
      s3For: deps.s3For,
      tenants: [tenant],
      rate: 80,
      durationMs: 2000,
      logFile,
      concurrency: 2,
      seed: 6,
    });
    expect(stats.writes.unknown).toBeGreaterThan(4);
    expect(stats.writes.refused).toBe(0);
    const records = readLog(logFile);
    const unknown = records.filter((r) => r.status === 'unknown');
    expect(unknown.filter((r) => r.errorType !== 'ConnectionLost').map((r) => `${r.errorType}: ${r.error}`)).toEqual([]);
    // The writer never touches a key again after an unknown outcome.
    for (const u of unknown) expect(records.filter((r) => r.key === u.key && r.seq > u.seq && r.run === u.run)).toEqual([]);
    const report = await verifyLog({ logFile, config });
    expect(
      report.ok,
      JSON.stringify({
        missing: report.missing,
        wrong: report.wrongValue,
        refused: report.presentButRefused,
        deleted: report.presentButDeleted,
        blobs: report.blobMissing,
        unit: report.unit,
      }).slice(0, 3000),
    ).toBe(true);
    expect(report.unknownOutcomes).toBe(unknown.length);
    expect(report.ambiguousKeys).toBe(new Set(unknown.map((u) => u.key)).size);
  });

  it('stops early on abort, with its own router, and logs an intent and an outcome for every write', async () => {
    const tenant = await newTenant('lg-abort', 'shard-b');
    const logFile = logPath('abort');
    const ac = new AbortController();
    const t0 = Date.now();
    setTimeout(() => ac.abort(), 500);
    // No router or S3 clients injected: loadgen creates its own and closes them.
    const stats = await runLoadgen({ config, tenants: [tenant], rate: 50, durationMs: 60_000, logFile, signal: ac.signal, intents: true });
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(stats.stopped).toBe('aborted');
    const written = stats.writes.ack + stats.writes.refused + stats.writes.unknown;
    const records = readLog(logFile);
    // With intents, each write has a 'pending' record before its outcome.
    expect(records.filter((r) => r.status === 'pending')).toHaveLength(written);
    expect(records).toHaveLength(2 * written);
    expect((await verifyLog({ logFile, config })).ok).toBe(true);
  });
});

describe('shardctl loadgen (CLI)', () => {
  const cli = (args: string[]) =>
    execFileP(process.execPath, [path.join(projectRoot(), 'cli/shardctl.js'), ...args], { cwd: projectRoot(), timeout: 60_000 }).then(
      (r) => ({ code: 0, ...r }),
      (e) => ({ code: e.code as number, stdout: e.stdout as string, stderr: e.stderr as string }),
    );

  it('runs a bounded load, verifies it with exit 0, and exits 1 once an acked row is gone', async () => {
    const tenant = await newTenant('lg-cli', 'shard-c');
    const logFile = logPath('cli');
    const run = await cli(['loadgen', '--tenants', tenant, '--rate', '50', '--duration', '2s', '--log', logFile]);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/writes: \d+ ack, 0 refused, 0 unknown/);
    expect(run.stdout).toMatch(/write\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+/);
    const ok = await cli(['loadgen', 'verify', '--log', logFile]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^OK: \d+ keys checked/);

    const victim = finalKeys(readLog(logFile)).present[0];
    await asReplica('shard-c', async (c) => {
      await c.query(`delete from public.${victim.table} where tenant_id = $1 and id = $2`, [tenant, victim.key]);
    });
    const bad = await cli(['loadgen', 'verify', '--json', '--log', logFile]);
    expect(bad.code).toBe(1);
    const report = JSON.parse(bad.stdout);
    expect(report.ok).toBe(false);
    expect(report.missing.map((f: any) => f.key)).toEqual([victim.key]);
  });

  it('seed --blob-writes index records each blob in the index; an unknown value is refused with exit 2 before anything is written', async () => {
    const tenant = await newTenant('seed-cli-idx', 'shard-c');
    const bad = await cli(['seed', tenant, '--rows', '50', '--blobs', '2', '--blob-writes', 'indexed']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--blob-writes must be direct or index, got "indexed"/);
    const docs = async () => Number((await pool('shard-c').query('select count(*) n from public.documents where tenant_id = $1', [tenant])).rows[0].n);
    expect(await docs()).toBe(0);
    const ok = await cli(['seed', tenant, '--rows', '50', '--blobs', '3', '--blob-writes', 'index', '--json']);
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ tenant, blobs: 3 });
    const idx = await pool('shard-c').query(
      `select d.blob_key, i.object_key from public.documents d join shardctl.blob_index i on i.tenant_id = d.tenant_id and 'tenants/' || i.tenant_id || '/' || i.name = d.blob_key
        where d.tenant_id = $1`,
      [tenant],
    );
    expect(idx.rows).toHaveLength(3);
    for (const r of idx.rows) expect(r.object_key.startsWith(`${r.blob_key}@`)).toBe(true);
  });

  it('refuses an unknown --blob-writes with exit 2 and writes nothing; --blob-writes index logs indexed blob ops that verify accepts', async () => {
    const tenant = await newTenant('lg-cli-idx', 'shard-c');
    const logFile = logPath('cli-idx');
    const refused = await cli(['loadgen', '--tenants', tenant, '--rate', '50', '--duration', '2s', '--log', logFile, '--blob-writes', 'both']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--blob-writes must be direct or index, got "both"/);
    expect(fs.existsSync(logFile)).toBe(false);
    const run = await cli(['loadgen', '--tenants', tenant, '--rate', '80', '--duration', '3s', '--log', logFile, '--blob-writes', 'index', '--seed', '7']);
    expect(run.code).toBe(0);
    const blobOps = readLog(logFile).filter((r) => r.op === 'blob_put' || r.op === 'blob_delete');
    expect(blobOps.length).toBeGreaterThan(0);
    expect(blobOps.every((r) => r.indexed === true)).toBe(true);
    const ok = await cli(['loadgen', 'verify', '--log', logFile]);
    expect(ok.code).toBe(0);
  });
});
