// `shardctl tenant create|show|list|residency|split`: create a tenant (fence first, then the directory
// row), read placements, and show or set the regions it may live in (lib/directory/policy.ts). Input is validated before anything is touched; bad input changes nothing.
// `show` and `list` never write: read-only sessions, and an outdated directory schema is refused
// (naming the command that migrates it), never migrated.
import { tableFor } from '../../lib/text-table';
import { Command } from 'commander';
import { invalidInput, ShardctlError } from '../../lib/errors';
import { validateTenantId } from '../../lib/ids';
import { ensureDirectory } from '../../lib/directory/ensure';
import { examples } from '../help';
import { configOf, printResult, withConnections } from '../run';
import { createTenant, getTenant, listTenants, tenantView, validateCreateInput } from '../../lib/tenants';
import { getResidency, setResidency } from '../../lib/directory/policy';
import { parseRegions } from '../../lib/directory/residency';
import { actorDefault } from '../actor';
import { splitTenant, validateSplitInput } from '../../lib/tenant-split';
import { getSplit } from '../../lib/directory/splits';

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
    .option('--regions <a,b>', 'residency: the only regions it may live in (shards carry a region: `shards add --region`)')
    .option('--actor <name>', 'who creates it (audit log)', actorDefault())
    .option('--reason <text>', 'why (audit log)')
    .option('--json', 'print the placement as JSON')
    .action(async (id: string, o: { shard?: string; expectedLoad?: string; regions?: string; actor: string; reason?: string; json?: boolean }) => {
      const cfg = config();
      const regions = o.regions === undefined ? undefined : parseRegions(o.regions);
      const input = { tenant: id, shard: o.shard, expectedLoad: parseLoad(o.expectedLoad), regions, actor: o.actor, reason: o.reason };
      validateCreateInput(input, cfg); // before any connection: bad input touches nothing
      const p = await withConnections(cfg, {}, async (pools) => {
        await ensureDirectory(pools.directoryPool(), cfg, { actor: o.actor, reason: o.reason });
        return createTenant({ directory: pools.directoryPool(), shardPool: pools.shardPool, config: cfg }, input);
      });
      printResult(o.json, tenantView(p), (v) => console.log(tenantLine(v)));
    });
  examples(
    create,
    'tenant create acme --shard shard-a --expected-load 5 --reason "new customer"',
    'tenant create acme --regions eu-west,eu-central   # only on shards of those regions',
    'tenant create acme --json',
  );

  const residency = tenant
    .command('residency <id>')
    .description('show or set the regions a tenant may live in: moves, rebalance, drain and isolate never place it elsewhere')
    .option('--regions <a,b>', 'set: the only regions it may live in')
    .option('--any', 'clear: it may live in any region')
    .option('--actor <name>', 'who changes it (audit log)', actorDefault())
    .option('--reason <text>', 'why (audit log)')
    .option('--json', 'as JSON')
    .action(async (id: string, o: { regions?: string; any?: boolean; actor: string; reason?: string; json?: boolean }) => {
      const cfg = config();
      validateTenantId(id);
      if (o.regions !== undefined && o.any) throw invalidInput('give --regions or --any, not both');
      const regions = o.regions === undefined ? undefined : parseRegions(o.regions);
      if (regions === undefined && !o.any) {
        const shown = await withConnections(cfg, { readOnly: true, requireCurrentSchema: true }, async (pools) => {
          const p = await getTenant(pools.directoryPool(), id);
          if (!p) throw new ShardctlError('NotFound', `no tenant ${id}`);
          return { tenant: id, shard: p.shard, regions: await getResidency(pools.directoryPool(), id) };
        });
        printResult(o.json, shown, (v) =>
          console.log(`${v.tenant}: ${v.regions ? `may reside only in ${v.regions.join(', ')}` : 'any region'} (now on ${v.shard})`),
        );
        return;
      }
      if (!o.actor?.trim()) throw invalidInput('--actor is required (who changes the residency)');
      const change = await withConnections(cfg, { requireCurrentSchema: true }, (pools) =>
        setResidency(pools.directoryPool(), id, regions ?? null, { actor: o.actor.trim(), reason: o.reason }),
      );
      printResult(o.json, change, (v) => {
        console.log(`${v.unit}: ${v.after ? `may reside only in ${v.after.join(', ')}` : 'any region'} (was ${v.before ? v.before.join(', ') : 'any region'})`);
        if (!v.compliant)
          console.log(
            `note: ${v.unit} is on ${v.shard} (${v.region ? `region ${v.region}` : 'no region recorded'}), outside it: \`shardctl rebalance plan\` proposes the move; nothing moved`,
          );
      });
    });
  examples(
    residency,
    'tenant residency acme                       # show',
    'tenant residency acme --regions eu-west --reason "GDPR"',
    'tenant residency acme --any',
    'tenant residency acme --json   # {"tenant","shard","regions"} or, when set, {"unit","before","after","shard","region","compliant"}',
  );

  const split = tenant
    .command('split <id>')
    .description("split a tenant into K sub-units <id>:0 .. <id>:K-1 by its tables' split columns (config.tenant.splitColumns); no row moves")
    .requiredOption('--ways <k>', 'how many sub-units (2 to 1024)')
    .option('--actor <name>', 'who splits it (audit log)', actorDefault())
    .option('--reason <text>', 'why (audit log)')
    .option('--json', 'print the result as JSON')
    .action(async (id: string, o: { ways: string; actor: string; reason?: string; json?: boolean }) => {
      const cfg = config();
      if (!/^\d{1,4}$/.test(o.ways.trim())) throw invalidInput(`--ways must be an integer, got ${JSON.stringify(o.ways.slice(0, 40))}`);
      const input = { tenant: id, ways: Number(o.ways.trim()), actor: o.actor, reason: o.reason };
      validateSplitInput(input); // before any connection: bad input touches nothing
      const r = await withConnections(cfg, { requireCurrentSchema: true }, (pools) =>
        splitTenant({ directory: pools.directoryPool(), shardPool: pools.shardPool, config: cfg }, input),
      );
      printResult(o.json, r, (v) =>
        console.log(
          `${v.tenant} split ${v.ways} ways on ${v.shard}: ${v.units.join(', ')} at epoch ${v.epoch}${v.resumed ? ' (completed an earlier run)' : ''}`,
        ),
      );
    });
  examples(
    split,
    'tenant split acme --ways 4 --reason "hot tenant"',
    'tenant split acme --ways 4 --json   # {"tenant","ways","shard","epoch","units","resumed"}',
  );

  const show = tenant
    .command('show <id>')
    .description("a tenant's placement: shard, epoch, state, owning move")
    .option('--json', 'as JSON')
    .action(async (id: string, o: { json?: boolean }) => {
      const cfg = config();
      validateTenantId(id);
      const found = await withConnections(cfg, { readOnly: true, requireCurrentSchema: true }, async (pools) => {
        const p = await getTenant(pools.directoryPool(), id);
        if (p) return { p };
        // A split tenant lives on as its sub-units: show them.
        const split = await getSplit(pools.directoryPool(), id);
        if (!split) return {};
        const units = (await listTenants(pools.directoryPool())).tenants.filter((t) => t.unit.startsWith(`${id}:`)).map(tenantView);
        return {
          split: {
            tenant: id,
            split: { ways: split.ways, shard: split.shard, parentEpoch: split.parentEpoch, splitAt: split.splitAt, splitBy: split.splitBy },
            units,
          },
        };
      });
      if (found.split) {
        printResult(o.json, found.split, (v) => {
          console.log(`${v.tenant} is split ${v.split.ways} ways (on ${v.split.shard} at ${v.split.splitAt}, by ${v.split.splitBy}):`);
          for (const u of v.units) console.log(`  ${tenantLine(u)}`);
        });
        return;
      }
      if (!found.p) throw new ShardctlError('NotFound', `no tenant ${id}`);
      printResult(o.json, tenantView(found.p), (v) => console.log(tenantLine(v)));
    });
  examples(
    show,
    'tenant show acme',
    'tenant show acme --json   # {"tenant","shard","epoch","state","moveId","expectedLoad","updatedAt"}; split: {"tenant","split":{"ways","shard","parentEpoch","splitAt","splitBy"},"units":[...]}',
  );

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
        const rows = views.map((v) => [v.tenant, v.shard, v.epoch, `${v.state}${v.moveId ? ` (move ${v.moveId})` : ''}`, v.expectedLoad, v.updatedAt]);
        if (rows.length)
          for (const line of tableFor(process.stdout)({
            head: ['tenant', 'shard', 'epoch', 'state', 'load', 'updated'],
            rows,
            align: ['left', 'left', 'right', 'left', 'right', 'left'],
          }))
            console.log(line);
      });
    });
  examples(list, 'tenant list', 'tenant list --shard shard-a --json   # {"generation", "tenants": [<tenant show --json>...]}');
}
