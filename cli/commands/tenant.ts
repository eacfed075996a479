// `shardctl tenant create|show|list`: create a tenant (fence first, then the directory row) and
// read placements. Input is validated before anything is touched; bad input changes nothing.
// `show` and `list` never write: read-only sessions, and an outdated directory schema is refused
// (naming the command that migrates it), never migrated.
import { Command } from 'commander';
import { loadConfig, Config } from '../../lib/config';
import { createConnections } from '../../lib/connections';
import { invalidInput, ShardctlError } from '../../lib/errors';
import { validateTenantId } from '../../lib/ids';
import { DEFAULT_CONNECT_TIMEOUT_MS } from '../../lib/directory/db';
import { ensureDirectory } from '../../lib/directory/ensure';
import { requireCurrentDirectorySchema } from '../../lib/directory/schema';
import { examples } from '../help';
import { createTenant, getTenant, listTenants, tenantView, validateCreateInput } from '../../lib/tenants';

export { ensureDirectory };

/** Connections for one CLI invocation; close() ends them all so the process can exit. */
function cliPools(config: Config, readOnly = false) {
  return createConnections(config, { max: 2, connectionTimeoutMillis: DEFAULT_CONNECT_TIMEOUT_MS, readOnly });
}

function parseLoad(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{1,15}$/.test(v.trim())) throw invalidInput(`--expected-load must be a non-negative integer, got ${JSON.stringify(v.slice(0, 40))}`);
  return Number(v.trim());
}

function printTenant(v: ReturnType<typeof tenantView>, json: boolean) {
  if (json) console.log(JSON.stringify(v));
  else
    console.log(
      `${v.tenant}  ${v.shard}  epoch ${v.epoch}  ${v.state}${v.moveId ? ` (move ${v.moveId})` : ''}  load ${v.expectedLoad}  updated ${v.updatedAt}`,
    );
}

export function register(program: Command) {
  const tenant = program.command('tenant').description('create and inspect tenants (placement directory)');
  const config = () => loadConfig({ file: program.opts().config });

  const create = tenant
    .command('create <id>')
    .description('create a tenant: fence on its shard (epoch 1), then the directory row')
    .option('--shard <name>', 'shard to create it on (default: the open shard with the most headroom)')
    .option('--expected-load <n>', 'expected load units (default 1)')
    .option('--actor <name>', 'who creates it (audit log)', process.env.USER || 'cli')
    .option('--reason <text>', 'why (audit log)')
    .option('--json', 'print the placement as JSON')
    .action(async (id: string, o: { shard?: string; expectedLoad?: string; actor: string; reason?: string; json?: boolean }) => {
      const cfg = config();
      const input = { tenant: id, shard: o.shard, expectedLoad: parseLoad(o.expectedLoad), actor: o.actor, reason: o.reason };
      validateCreateInput(input, cfg); // before any connection: bad input touches nothing
      const pools = cliPools(cfg);
      try {
        await ensureDirectory(pools.directoryPool(), cfg);
        const p = await createTenant({ directory: pools.directoryPool(), shardPool: pools.shardPool, config: cfg }, input);
        printTenant(tenantView(p), !!o.json);
      } finally {
        await pools.close();
      }
    });
  examples(create, 'tenant create acme --shard shard-a --expected-load 5 --reason "new customer"', 'tenant create acme --json');

  const show = tenant
    .command('show <id>')
    .description("a tenant's placement: shard, epoch, state, owning move")
    .option('--json', 'as JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const cfg = config();
      validateTenantId(id);
      const pools = cliPools(cfg, true);
      try {
        await requireCurrentDirectorySchema(pools.directoryPool());
        const p = await getTenant(pools.directoryPool(), id);
        if (!p) throw new ShardctlError('NotFound', `no tenant ${id}`);
        printTenant(tenantView(p), !!o.json);
      } finally {
        await pools.close();
      }
    });
  examples(show, 'tenant show acme', 'tenant show acme --json   # {"tenant","shard","epoch","state","moveId","expectedLoad","updatedAt"}');

  const list = tenant
    .command('list')
    .description('every tenant and its placement')
    .option('--shard <name>', 'only tenants on this shard')
    .option('--json', 'as JSON: {generation, tenants}')
    .action(async (o: { shard?: string; json?: boolean }) => {
      const cfg = config();
      const pools = cliPools(cfg, true);
      try {
        await requireCurrentDirectorySchema(pools.directoryPool());
        const { generation, tenants } = await listTenants(pools.directoryPool());
        const views = tenants.filter((t) => !o.shard || t.shard === o.shard).map(tenantView);
        if (o.json) {
          console.log(JSON.stringify({ generation, tenants: views }));
        } else {
          console.log(`generation ${generation}, ${views.length} tenant(s)`);
          for (const v of views) printTenant(v, false);
        }
      } finally {
        await pools.close();
      }
    });
  examples(list, 'tenant list', 'tenant list --shard shard-a --json   # {"generation", "tenants": [<tenant show --json>...]}');
}
