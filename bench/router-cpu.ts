// The router's own cost per transaction as CPU, not wall clock (issue 11): on a loaded machine the
// wall-clock figure moves by ±0.1 from run to run, CPU per transaction much less. Paired rounds, in
// one process, warm: N transactions through Router.withTenant against N on a direct connection
// opened as the router opens (the same statements), the sides' order swapped every other round;
// node's CPU from process.cpuUsage(), the shard backends' from /proc/<pid>/schedstat (the shard
// runs on this machine: the dev stack). Medians per transaction. With --profile FILE, a V8 CPU
// profile of the router side alone (started after warm-up) is written to FILE.
//
//   env $PORTS npx tsx bench/router-cpu.ts [--rounds 11] [--transactions 400] [--profile /tmp/router.cpuprofile]
import fs from 'node:fs';
import inspector from 'node:inspector';
import { openPool } from '../lib/connections';
import { stackAt, stackConfig } from '../lib/dev/stack';
import { RouterContext, directRun, routerRun, setupFenceBench, setupRouterBench, teardownFence } from './fence';

require('../lib/quiet-warnings.js');

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

/** Total CPU time (ns) the shard's backends of these application names have used so far. */
async function backendCpuNs(ctx: RouterContext, pids: number[]): Promise<number> {
  let total = 0;
  for (const pid of pids) total += Number(fs.readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
  void ctx;
  return total;
}

async function side(ctx: RouterContext, which: 'router' | 'direct', pids: number[]): Promise<{ nodeUs: number; shardUs: number; wallMs: number }> {
  const shard0 = await backendCpuNs(ctx, pids);
  const cpu0 = process.cpuUsage();
  const wallMs = which === 'router' ? await routerRun(ctx) : await directRun(ctx, 'as-router');
  const cpu = process.cpuUsage(cpu0);
  const shard1 = await backendCpuNs(ctx, pids);
  return { nodeUs: (cpu.user + cpu.system) / ctx.transactions, shardUs: (shard1 - shard0) / 1000 / ctx.transactions, wallMs };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function profile(ctx: RouterContext, file: string): Promise<void> {
  const session = new inspector.Session();
  session.connect();
  const post = (method: string, params?: object) =>
    new Promise<any>((resolve, reject) => session.post(method, params ?? {}, (err, res) => (err ? reject(err) : resolve(res))));
  await post('Profiler.enable');
  await post('Profiler.setSamplingInterval', { interval: 50 });
  await post('Profiler.start');
  await routerRun(ctx);
  const { profile: p } = await post('Profiler.stop');
  fs.writeFileSync(file, JSON.stringify(p));
  session.disconnect();
}

async function main() {
  const rounds = Number(arg('rounds') ?? 11);
  const transactions = Number(arg('transactions') ?? 400);
  const config = stackConfig(stackAt(process.cwd()));
  const shard = config.shards[2];
  const pool = openPool(shard.dsn, { applicationName: 'shardctl-bench', max: 2 });
  const directory = openPool(config.directory.dsn, { applicationName: 'shardctl-bench', max: 2 });
  const fence = await setupFenceBench(pool, shard.dsn, shard.name, config, 1);
  const ctx = await setupRouterBench(fence, directory, transactions);
  try {
    await routerRun({ ...ctx, transactions: 300 }); // warm the cache, the pools and the JIT
    await directRun({ ...ctx, transactions: 300 }, 'as-router');
    const { rows } = await pool.query<{ pid: number }>(`select pid from pg_stat_activity where application_name in ('shardctl-router', 'bench-direct')`);
    const pids = rows.map((r) => r.pid);
    const profileFile = arg('profile');
    if (profileFile) {
      await profile({ ...ctx, transactions: Number(arg('profile-transactions') ?? 3000) }, profileFile);
      console.log(`profile written to ${profileFile}`);
      return;
    }
    const r: Record<'router' | 'direct', { nodeUs: number[]; shardUs: number[]; wallMs: number[] }> = {
      router: { nodeUs: [], shardUs: [], wallMs: [] },
      direct: { nodeUs: [], shardUs: [], wallMs: [] },
    };
    const diffNode: number[] = [];
    const diffShard: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const order: ('router' | 'direct')[] = i % 2 ? ['router', 'direct'] : ['direct', 'router'];
      const got: Partial<Record<'router' | 'direct', { nodeUs: number; shardUs: number; wallMs: number }>> = {};
      for (const w of order) got[w] = await side(ctx, w, pids);
      for (const w of order) {
        r[w].nodeUs.push(got[w]!.nodeUs);
        r[w].shardUs.push(got[w]!.shardUs);
        r[w].wallMs.push(got[w]!.wallMs);
      }
      diffNode.push(got.router!.nodeUs - got.direct!.nodeUs);
      diffShard.push(got.router!.shardUs - got.direct!.shardUs);
    }
    const f = (x: number) => x.toFixed(1);
    console.log(`${rounds} paired rounds of ${transactions} transactions, load ${(await import('node:os')).loadavg()[0].toFixed(1)}`);
    for (const w of ['direct', 'router'] as const) {
      console.log(`${w.padEnd(7)} node ${f(median(r[w].nodeUs))} µs  shard ${f(median(r[w].shardUs))} µs  wall ${median(r[w].wallMs).toFixed(3)} ms`);
    }
    console.log(`router - direct (paired medians): node ${f(median(diffNode))} µs  shard ${f(median(diffShard))} µs`);
  } finally {
    await teardownFence(fence, ctx);
    await pool.end();
    await directory.end();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
