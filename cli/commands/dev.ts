// `shardctl dev up|down|status|env|reset`: the local stack (see lib/dev/stack.ts) and the
// workers running against it (lib/dev/workers.ts).
import { Command } from 'commander';
import * as stack from '../../lib/dev/stack';
import { projectRoot } from '../../lib/config';
import type { RunningWorker } from '../../lib/dev/workers';
import { exitCodeFor } from '../exit';
import { examples } from '../help';
import { tableFor } from '../../lib/text-table';

export function registerDev(program: Command) {
  const dev = program.command('dev').description('the local dev stack: postgres ×4, temporal dev server + UI, S3 (moto)');
  const s = () => stack.stackAt(projectRoot());
  const log = (m: string) => process.stderr.write(`dev: ${m}\n`);

  const up = dev
    .command('up')
    .description('start every part (idempotent)')
    .option(
      '--with-proxies',
      'also start toxiproxy with a proxy in front of each server, and write .dev/config.proxied.json (installs toxiproxy with go install)',
    )
    .option('--shards <n>', 'Postgres shards (shard-a, shard-b, ...; default 3, or as many as the stack has); ports and buckets derived as for the first three')
    .action(async (o: { withProxies?: boolean; shards?: string }) => {
      const t0 = Date.now();
      if (o.shards !== undefined && !/^\d{1,2}$/.test(o.shards))
        throw new stack.StackError(`--shards must be a whole number, got ${JSON.stringify(o.shards.slice(0, 20))}`);
      const st = stack.stackAt(projectRoot(), process.env, { shards: o.shards === undefined ? undefined : Number(o.shards) });
      await stack.up(st, log, { withProxies: o.withProxies });
      const parts = await stack.status(st);
      printStatus(parts);
      const env = stack.stackEnv(st);
      console.log(`\nready in ${((Date.now() - t0) / 1000).toFixed(1)}s — Temporal Web UI: ${env.temporal.uiUrl}`);
      if (parts.some((x) => !x.healthy)) process.exitCode = exitCodeFor('Unavailable');
    });
  examples(
    up,
    'dev up',
    'dev up --shards 5   # shard-d and shard-e too',
    'SHARDCTL_DEV_PG_PORT=25432 SHARDCTL_DEV_TEMPORAL_PORT=27233 dev up   # a second stack on other ports',
  );
  const status = dev
    .command('status')
    .description('health of each part, and the workers running against the stack')
    .option('--json', 'as JSON: [{part, healthy, detail}, ...workers with pid, taskQueues, source, cwd]')
    .action(async (o) => {
      const st = s();
      const parts = await stack.status(st);
      // Workers are listed, not judged: a running one is no failure of the stack.
      const workers = (await stack.workers(st)).map(workerLine);
      if (o.json) console.log(JSON.stringify([...parts, ...workers], null, 2));
      else printStatus([...parts, ...workers]);
      if (parts.some((x) => !x.healthy)) process.exitCode = exitCodeFor('Unavailable');
    });
  examples(status, 'dev status', 'dev status --json');
  const down = dev
    .command('down')
    .description("stop every part, and this checkout's workers")
    .action(async () => {
      await stack.down(s(), log);
    });
  examples(down, 'dev down');
  const reset = dev
    .command('reset')
    .description('stop everything and wipe .dev/ (keeps downloaded tools)')
    .action(async () => {
      await stack.reset(s(), log);
    });
  examples(reset, 'dev reset');
  const env = dev
    .command('env')
    .description('print the endpoints')
    .option('--json', 'as JSON (the default)')
    .action(() => {
      console.log(JSON.stringify(stack.stackEnv(s()), null, 2));
    });
  examples(env, 'dev env', "dev env --json | jq -r '.temporal.uiUrl'");
}

/** A worker as a line of `dev status` (in --json: the same entry, plus pid, taskQueues, source, cwd). */
function workerLine(w: RunningWorker): stack.PartStatus & RunningWorker {
  const where = w.source === 'checkout' ? 'this checkout; `dev down` stops it' : `not this checkout's${w.cwd ? `: runs in ${w.cwd}` : ''}; stop it there`;
  return { part: `worker ${w.pid ?? w.identity}`, healthy: true, detail: `polling ${w.taskQueues.join(', ')} (${w.identity}, ${where})`, ...w };
}

function printStatus(parts: stack.PartStatus[]) {
  const state = (x: stack.PartStatus) => (x.part.startsWith('worker ') ? 'running' : x.healthy ? 'healthy' : 'DOWN');
  console.log(tableFor(process.stdout)({ rows: parts.map((x) => [x.part, state(x), x.detail]) }).join('\n'));
}
