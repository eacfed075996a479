// `shardctl shards prepare|list`: put the fence on the shards' tenant tables, and show which
// shards are reachable and how many of their tenant tables are fenced. Pools are closed at the
// end so the process exits. `list` exits 5 when a shard is unreachable (cli/exit.ts).
import { Command } from 'commander';
import { Config, knownShard } from '../../lib/config';
import type { Pool } from 'pg';
import { fenceStatus, prepareAllShards } from '../../lib/shard/prepare';
import { EXIT, exitCodeFor } from '../exit';
import { examples } from '../help';
import { configOf, printResult, withConnections } from '../run';

export function register(program: Command) {
  const shards = program.command('shards').description('the shards: prepare them for moves, list them');
  const cfg = configOf(program);

  const prepare = shards
    .command('prepare')
    .description('install schema shardctl and the fence trigger on every tenant table (idempotent)')
    .option('--shard <name>', 'only this shard (default: every configured shard)')
    .option('--demo-schema', "also create the demo application's tables (before fencing them)")
    .action(async (o: { shard?: string; demoSchema?: boolean }) => {
      const config = cfg();
      if (o.shard) knownShard(config, o.shard); // unknown shard: one line, before any connection
      await withConnections(config, {}, async (pools) => {
        const results = await prepareAllShards(config, pools.shardPool, { shard: o.shard, demoSchema: !!o.demoSchema, s3For: pools.s3For });
        for (const r of results) {
          if (r.error) {
            console.log(`${r.shard}: FAILED: ${r.error}`);
            process.exitCode = EXIT.failure;
            continue;
          }
          const changed = r.changed.length ? `, ${r.changed.length} newly fenced` : '';
          console.log(`${r.shard}: ${r.tables.length} tenant table(s) fenced${changed}${r.tables.length ? `: ${r.tables.join(', ')}` : ''}`);
          console.log(`  bucket identity marker: ${r.bucketMarker === 'created' ? 'written' : 'present'}`);
          for (const p of r.problems) console.log(`  warning: ${p}`);
        }
      });
    });
  examples(prepare, 'shards prepare', 'shards prepare --shard shard-c --demo-schema');

  const list = shards
    .command('list')
    .description('configured shards: reachability and fenced tenant tables')
    .option('--json', 'as JSON: [{name, reachable, schemaInstalled, tenantTables, fencedTables, unfenced, error?}]')
    .action(async (o: { json?: boolean }) => {
      const config = cfg();
      const rows = await withConnections(config, {}, (pools) => Promise.all(config.shards.map((s) => describeShard(config, s.name, pools.shardPool(s.name)))));
      printResult(
        o.json,
        rows,
        () => {
          const w = Math.max(...rows.map((r) => r.name.length));
          for (const r of rows) {
            const state = !r.reachable
              ? `UNREACHABLE  ${r.error}`
              : !r.schemaInstalled
                ? 'reachable    not prepared (run `shardctl shards prepare`)'
                : `reachable    ${r.fencedTables}/${r.tenantTables} tenant tables fenced` +
                  (r.unfenced.length ? `; NOT fenced: ${r.unfenced.join(', ')}` : '') +
                  (r.error ? `; ${r.error}` : '');
            console.log(`${r.name.padEnd(w)}  ${state}`);
          }
        },
        { pretty: true },
      );
      if (rows.some((r) => !r.reachable)) process.exitCode = exitCodeFor('Unavailable');
    });
  examples(list, 'shards list', "shards list --json | jq -r '.[] | select(.unfenced | length > 0) | .name'");
}

interface ShardRow {
  name: string;
  reachable: boolean;
  schemaInstalled: boolean;
  tenantTables: number;
  fencedTables: number;
  unfenced: string[];
  error?: string;
}

async function describeShard(config: Config, name: string, pool: Pool): Promise<ShardRow> {
  const row: ShardRow = { name, reachable: false, schemaInstalled: false, tenantTables: 0, fencedTables: 0, unfenced: [] };
  try {
    await pool.query('select 1');
    row.reachable = true;
    const st = await fenceStatus(pool, config);
    row.schemaInstalled = st.schemaInstalled;
    row.tenantTables = st.tenantTables.length;
    row.fencedTables = st.fenced.length;
    row.unfenced = st.unfenced;
  } catch (e: any) {
    row.error = e?.message ?? String(e);
  }
  return row;
}
