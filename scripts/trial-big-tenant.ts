// Trial, not a test: a tenant of N rows (default 1M in events + 20k accounts) moved from shard-a to
// shard-b of the running dev stack with live writes through the router (~20/s), as a new user
// would. Prints phase timings, every cutover attempt, the write pause and where it went, and the
// outcome. `npx tsx scripts/trial-big-tenant.ts [rows] [timeoutSeconds]`.
import { loadConfig } from '../lib/config';
import { createConnections } from '../lib/connections';
import { ensureDirectory } from '../lib/directory/ensure';
import { createTenant } from '../lib/tenants';
import { startWorker } from '../worker';
import { temporalClient } from '../lib/temporal-client';
import { moveInputFor, startMove } from '../lib/moves/start';
import * as M from '../workflows/messages';
import { Router } from '../lib/router';
import { setTimeout as sleep } from 'node:timers/promises';

async function main() {
  const rows = Number(process.argv[2] ?? 1_000_000);
  const config = loadConfig();
  const c = createConnections(config);
  await ensureDirectory(c.directoryPool(), config);
  const tenant = `big-${Date.now().toString(36)}`;
  await createTenant({ directory: c.directoryPool(), shardPool: c.shardPool, config }, { tenant, shard: 'shard-a', actor: 'trial' });
  const src = c.shardPool('shard-a');
  const t0 = Date.now();
  for (let done = 0; done < rows; done += 200_000) {
    const n = Math.min(200_000, rows - done);
    const cl = await src.connect();
    await cl.query('begin');
    await cl.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`, [tenant]);
    await cl.query(
      `insert into public.events(tenant_id, kind, payload, at) select $1, 'k' || (g % 7), jsonb_build_object('g', g, 'f', g / 3.0), now() - (g || ' seconds')::interval from generate_series(1, $2::int) g`,
      [tenant, n],
    );
    await cl.query('commit');
    cl.release();
  }
  const cl = await src.connect();
  await cl.query('begin');
  await cl.query(`select set_config('shardctl.unit', $1, true), set_config('shardctl.epoch', '1', true)`, [tenant]);
  await cl.query(`insert into public.accounts(tenant_id, name) select $1, 'acct ' || g from generate_series(1, 20000) g`, [tenant]);
  await cl.query('commit');
  cl.release();
  console.log(`seeded ${rows} events + 20000 accounts in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  const tq = `trial-${tenant}`;
  const w = await startWorker(config, { taskQueue: tq });
  const router = await Router.create(config);
  let acked = 0,
    failed = 0,
    stop = false;
  const traffic = (async () => {
    while (!stop) {
      try {
        await router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) =>
          tx.query(`insert into public.events(tenant_id, kind) values ($1, 'live')`, [tenant]),
        );
        acked++;
      } catch {
        failed++;
      }
      await sleep(50);
    }
  })();
  const tc = await temporalClient(config);
  const h = await startMove(tc.client, tq, moveInputFor(config, { tenant, target: 'shard-b', requestedBy: 'trial', soakSeconds: 5 }));
  const tm = Date.now();
  let last = '';
  let s: M.MoveStatus | undefined;
  for (;;) {
    s = await h.query(M.statusQuery);
    const line = `${s.phase} attempts=${s.cutoverAttempts} blocked=${s.blockedReason.slice(0, 140)}`;
    if (line !== last) {
      console.log(`+${((Date.now() - tm) / 1000).toFixed(0)}s ${line}${s.lastError ? ` | last: ${s.lastError.slice(0, 160)}` : ''}`);
      last = line;
    }
    if (['done', 'failed', 'cancelled'].includes(s.phase) || s.awaitingApproval || Date.now() - tm > Number(process.argv[3] ?? 900) * 1000) break;
    await sleep(1000);
  }
  stop = true;
  await traffic;
  console.log(
    `result: phase ${s?.phase}, pause ${s?.cutoverPauseMs} ms, steps ${JSON.stringify(s?.cutoverSteps)}, attempts ${s?.cutoverAttempts}, phaseTimes ${JSON.stringify(s?.phaseTimes)}, live writes acked ${acked}, failed ${failed}`,
  );
  if (s?.phase === 'done') {
    const a = await c.shardPool('shard-b').query(`select count(*)::int n from public.events where tenant_id = $1`, [tenant]);
    console.log(`target events ${a.rows[0].n} (seeded ${rows} + live acked ${acked})`);
  } else if (s && !['failed', 'cancelled'].includes(s.phase)) {
    await h.executeUpdate(M.cancelUpdate, { args: [{ actor: 'trial' }] }).catch((e) => console.log('cancel:', e.message));
    await sleep(15000);
    console.log('after cancel:', (await h.query(M.statusQuery)).phase);
  }
  await router.close();
  await tc.close();
  await w.shutdown();
  await c.close();
}
main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
