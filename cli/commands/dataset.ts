// `shardctl dataset init NAME --shard S`: place every bucket of a bucketed dataset (config.datasets)
// on one shard, each a routing unit `bucket:<name>:<n>` at epoch 1 (lib/datasets.ts); from there
// buckets move one by one with `move start --unit bucket:<name>:<n> --to <shard>`. Bad input is
// refused before anything is touched; a re-run completes an interrupted one and changes nothing else.
import { Command } from 'commander';
import { invalidInput } from '../../lib/errors';
import { ensureDirectory } from '../../lib/directory/ensure';
import { initDataset, validateInitDatasetInput } from '../../lib/datasets';
import { examples } from '../help';
import { configOf, printResult, withConnections } from '../run';
import { actorDefault } from '../actor';

export function register(program: Command) {
  const dataset = program.command('dataset').description('bucketed datasets: place their buckets in the directory');
  const config = configOf(program);
  const init = dataset
    .command('init <name>')
    .description('place all B buckets of a dataset on one shard (fence on the shard first, then the directory row, per bucket)')
    .requiredOption('--shard <name>', 'the shard that holds the dataset now (prepared with the dataset in config)')
    .option('--expected-load <n>', 'expected load of each bucket (default 0)')
    .option('--actor <name>', 'who initialises it (audit log)', actorDefault())
    .option('--reason <text>', 'why (audit log)')
    .option('--json', 'print the result as JSON')
    .action(async (name: string, o: { shard: string; expectedLoad?: string; actor: string; reason?: string; json?: boolean }) => {
      const cfg = config();
      if (o.expectedLoad !== undefined && !/^\d{1,15}$/.test(o.expectedLoad.trim()))
        throw invalidInput(`--expected-load must be a non-negative integer, got ${JSON.stringify(o.expectedLoad.slice(0, 40))}`);
      const input = {
        dataset: name,
        shard: o.shard,
        actor: o.actor,
        reason: o.reason,
        expectedLoad: o.expectedLoad === undefined ? undefined : Number(o.expectedLoad),
      };
      validateInitDatasetInput(input, cfg); // before any connection
      const r = await withConnections(cfg, {}, async (pools) => {
        await ensureDirectory(pools.directoryPool(), cfg, { actor: o.actor, reason: o.reason });
        return initDataset({ directory: pools.directoryPool(), shardPool: pools.shardPool, config: cfg }, input);
      });
      printResult(o.json, r, (v) => {
        console.log(`dataset ${v.dataset}: ${v.buckets} buckets, ${v.created} placed on ${v.shard} now, ${v.present} already there`);
        for (const e of v.elsewhere) console.log(`  left alone (placed elsewhere): ${e}`);
      });
    });
  examples(
    init,
    'dataset init events --shard shard-a',
    'dataset init events --shard shard-a --json   # {dataset, shard, buckets, created, present, elsewhere}',
  );
}
