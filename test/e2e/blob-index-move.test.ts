// The blob index moves with the rows (issue 15): shardctl.blob_index is a tenant table, so the real
// move workflow copies, streams and validates it like any other, and the prefix copy brings the
// objects it names. A tenant written through putBlob / deleteBlob before and during its move ends,
// after the switch and retire, with exactly the acknowledged index rows on the target, each
// naming an object there whose bytes hash to the recorded sha256; the collector then runs on the
// new owner only and keeps every referenced object.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { createHash } from 'node:crypto';
import { testConfig, closePools, shardPool, directoryPool } from '../helpers/stack';
import * as H from '../helpers/move';
import { Router } from '../../lib/router';
import { createDeps } from '../../activities/deps';
import { hashObject, listBlobs, tenantBlobPrefix } from '../../lib/blobs';
import { collectTenantBlobs } from '../../lib/blobs/gc';
import { shardByName } from '../../lib/config';

let env: Awaited<ReturnType<typeof H.moveEnv>>;

beforeAll(async () => {
  env = await H.moveEnv('bim');
});
afterAll(async () => {
  await env?.close();
  await closePools();
});

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

async function indexOn(shard: string, tenant: string): Promise<Record<string, { key: string; sha256: string; size: number }>> {
  const r = await shardPool(shard).query(`select name, object_key, sha256, size::int as size from shardctl.blob_index where tenant_id = $1`, [tenant]);
  return Object.fromEntries(r.rows.map((x) => [x.name, { key: x.object_key, sha256: x.sha256, size: x.size }]));
}

describe('the blob index moves with the tenant', () => {
  it(
    'a tenant written through putBlob and deleteBlob before and during its move ends with its acknowledged index rows and their objects on the target',
    { timeout: 300_000 },
    async () => {
      const config = testConfig();
      const tenant = await H.newTenant('shard-a', 'bim');
      await H.seed(tenant, 50, 0);
      const grant = { tenants: [tenant] };
      const router = await Router.create(config);
      const deps = createDeps(config);
      // name -> content of its last acknowledged write (undefined: its last acknowledged write deleted it).
      const expected = new Map<string, string | undefined>();
      try {
        for (const name of ['docs/a', 'docs/b', 'docs/c']) {
          await router.putBlob(tenant, grant, name, `${name} v1`);
          expected.set(name, `${name} v1`);
        }
        await router.putBlob(tenant, grant, 'docs/a', 'docs/a v2');
        expected.set('docs/a', 'docs/a v2');
        await router.deleteBlob(tenant, grant, 'docs/c');
        expected.set('docs/c', undefined);

        const h = await H.startMove(env.t.client, env.tq, H.moveInput(tenant, 'shard-b', { soakSeconds: 5 }));
        // Writes through the move: copy, catch-up, the freeze (the router waits it out) and soak.
        let stop = false;
        let writes = 0;
        const writer = (async () => {
          for (let i = 0; !stop; i++, writes++) {
            const name = `live/${i % 5}`;
            if (i % 7 === 6) {
              await router.deleteBlob(tenant, grant, name, { deadlineMs: 20_000 });
              expected.set(name, undefined);
            } else {
              const body = `${name} #${i}`;
              await router.putBlob(tenant, grant, name, body, { deadlineMs: 20_000 });
              expected.set(name, body);
            }
            await new Promise((r) => setTimeout(r, 50));
          }
        })();
        const gcDeps = {
          tenantColumn: config.tenant.column,
          directoryPool,
          shardPool,
          bucketOf: (s: string) => ({ shard: s, s3: deps.s3For(s), bucket: shardByName(config, s).bucket }),
        };
        try {
          await H.waitPhase(h, 'soak', 200_000);
          // While the move can still roll back, the collector leaves the tenant alone (its reservation is open).
          await expect(collectTenantBlobs(gcDeps, { tenant, graceMs: 0, operator: { actor: 'test' } })).rejects.toMatchObject({
            type: 'PreconditionFailed',
            message: expect.stringMatching(/is in flight; run gc after it ends/),
          });
          await new Promise((r) => setTimeout(r, 500)); // some writes land on the target during soak
        } finally {
          stop = true;
          await writer;
        }
        const done = await H.waitPhase(h, 'done', 120_000);
        expect(done.phase).toBe('done');
        // Written only through the index: the window's blob delta was the changed index rows, not a listing.
        expect(done.cutoverBlobSync, JSON.stringify(done.cutoverSteps)).toMatchObject({ via: 'index' });
        expect(done.cutoverSteps).toHaveProperty('blobs via index');
        expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-b', epoch: 2, state: 'active' });

        expect(writes, 'blob writes through the move').toBeGreaterThan(10);
        const live = [...expected].filter((e): e is [string, string] => e[1] !== undefined);
        expect(live.length).toBeGreaterThan(3);
        const index = await indexOn('shard-b', tenant);
        expect(Object.keys(index).sort()).toEqual(live.map(([n]) => n).sort());
        const bucket = shardByName(config, 'shard-b').bucket;
        for (const [name, body] of live) {
          expect(index[name], name).toMatchObject({ sha256: sha(body), size: Buffer.byteLength(body) });
          // The object the row names is on the target, and its bytes are the recorded sha256.
          expect((await hashObject(deps.s3For('shard-b'), bucket, index[name].key)).sha256, name).toBe(sha(body));
          expect(await router.getBlob(tenant, grant, name), name).toEqual(Buffer.from(body));
        }
        // Retired: the old owner holds neither rows nor objects of the tenant.
        expect(await indexOn('shard-a', tenant)).toEqual({});
        expect(await listBlobs(deps.s3For('shard-a'), shardByName(config, 'shard-a').bucket, tenantBlobPrefix(tenant))).toEqual([]);

        // The collector runs on the new owner only, and keeps every referenced object.
        await expect(collectTenantBlobs(gcDeps, { tenant, graceMs: 0, shard: 'shard-a', operator: { actor: 'test' } })).rejects.toMatchObject({
          type: 'PreconditionFailed',
        });
        const r = await collectTenantBlobs(gcDeps, { tenant, graceMs: 0, operator: { actor: 'test' } });
        expect(r).toMatchObject({ shard: 'shard-b', referenced: live.length });
        expect(r.collected.length).toBeGreaterThan(0); // the superseded and deleted versions
        const left = (await listBlobs(deps.s3For('shard-b'), bucket, tenantBlobPrefix(tenant))).map((e) => e.key).sort();
        expect(left).toEqual(
          Object.values(index)
            .map((v) => v.key)
            .sort(),
        );
        for (const [name, body] of live) expect(await router.getBlob(tenant, grant, name), name).toEqual(Buffer.from(body));
      } finally {
        await router.close();
        await deps.close();
      }
    },
  );
});
