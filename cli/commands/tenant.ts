// `shardctl tenant create|show|list`: create a tenant (fence first, then the directory row) and
// read placements. Input is validated before anything is touched; bad input changes nothing.
// `show` and `list` never write: read-only sessions, and an outdated directory schema is refused
// (naming the command that migrates it), never migrated.
import { Command } from 'commander';
import { invalidInput, ShardctlError } from '../../lib/errors';
import { validateTenantId } from '../../lib/ids';
import { ensureDirectory } from '../../lib/directory/ensure';
import { examples } from '../help';
import { configOf, printResult, withConnections } from '../run';
import { createTenant, getTenant, listTenants, tenantView, validateCreateInput } from '../../lib/tenants';

export { ensureDirectory };

function parseLoad(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!/^\d{1,15}$/.test(v.trim())) throw invalidInput(`--expected-load must be a non-negative integer, got ${JSON.stringify(v.slice(0, 40))}`);
  return Number(v.trim());
}

function tenantLine(v: ReturnType<typeof tenantView>): string {
  return `${v.tenant}  ${v.shard}  epoch ${v.epoch}  ${v.state}${v.moveId ? ` (move ${v.moveId})` : ''}  load ${v.expectedLoad}  updated ${v.updatedAt}`;
}

export function register(program: Command) {
  const tenant = program.command('tenant').description('create and inspect tenants (placement directory)');
  const config = configOf(program);

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
      const p = await withConnections(cfg, {}, async (pools) => {
        await ensureDirectory(pools.directoryPool(), cfg);
        return createTenant({ directory: pools.directoryPool(), shardPool: pools.shardPool, config: cfg }, input);
      });
      printResult(o.json, tenantView(p), (v) => console.log(tenantLine(v)));
    });
  examples(create, 'tenant create acme --shard shard-a --expected-load 5 --reason "new customer"', 'tenant create acme --json');

  const show = tenant
    .command('show <id>')
    .description("a tenant's placement: shard, epoch, state, owning move")
    .option('--json', 'as JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const cfg = config();
      validateTenantId(id);
      const p = await withConnections(cfg, { readOnly: true, requireCurrentSchema: true }, (pools) => getTenant(pools.directoryPool(), id));
      if (!p) throw new ShardctlError('NotFound', `no tenant ${id}`);
      printResult(o.json, tenantView(p), (v) => console.log(tenantLine(v)));
    });
  examples(show, 'tenant show acme', 'tenant show acme --json   # {"tenant","shard","epoch","state","moveId","expectedLoad","updatedAt"}');

  const list = tenant
    .command('list')
    .description('every tenant and its placement')
    .option('--shard <name>', 'only tenants on this shard')
    .option('--json', 'as JSON: {generation, tenants}')
    .action(async (o: { shard?: string; json?: boolean }) => {
      const { generation, tenants } = await withConnections(config(), { readOnly: true, requireCurrentSchema: true }, (pools) =>
        listTenants(pools.directoryPool()),
      );
      const views = tenants.filter((t) => !o.shard || t.shard === o.shard).map(tenantView);
      printResult(o.json, { generation, tenants: views }, () => {
        console.log(`generation ${generation}, ${views.length} tenant(s)`);
        for (const v of views) console.log(tenantLine(v));
      });
    });
  examples(list, 'tenant list', 'tenant list --shard shard-a --json   # {"generation", "tenants": [<tenant show --json>...]}');
}
