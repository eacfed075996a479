// `shardctl dev up|down|status|env|reset`: the local stack (see lib/dev/stack.ts).
import { Command } from 'commander';
import * as stack from '../../lib/dev/stack';
import { projectRoot } from '../../lib/config';

export function registerDev(program: Command) {
  const dev = program.command('dev').description('the local dev stack: postgres ×4, temporal dev server + UI, S3 (moto)');
  const s = () => stack.stackAt(projectRoot());
  const log = (m: string) => process.stderr.write(`dev: ${m}\n`);

  dev.command('up').description('start every part (idempotent)').action(async () => {
    const t0 = Date.now();
    const st = s();
    await stack.up(st, log);
    const parts = await stack.status(st);
    printStatus(parts);
    const env = stack.stackEnv(st);
    console.log(`\nready in ${((Date.now() - t0) / 1000).toFixed(1)}s — Temporal Web UI: ${env.temporal.uiUrl}`);
    if (parts.some((x) => !x.healthy)) process.exitCode = 1;
  });
  dev.command('status').description('health of each part').option('--json').action(async (o) => {
    const parts = await stack.status(s());
    if (o.json) console.log(JSON.stringify(parts, null, 2));
    else printStatus(parts);
    if (parts.some((x) => !x.healthy)) process.exitCode = 1;
  });
  dev.command('down').description('stop every part').action(async () => {
    await stack.down(s(), log);
  });
  dev.command('reset').description('stop everything and wipe .dev/ (keeps downloaded tools)').action(async () => {
    await stack.reset(s(), log);
  });
  dev.command('env').description('print the endpoints').option('--json', 'as JSON (the default)').action(() => {
    console.log(JSON.stringify(stack.stackEnv(s()), null, 2));
  });
}

function printStatus(parts: stack.PartStatus[]) {
  const w = Math.max(...parts.map((x) => x.part.length));
  for (const x of parts) console.log(`${x.part.padEnd(w)}  ${x.healthy ? 'healthy' : 'DOWN   '}  ${x.detail}`);
}
