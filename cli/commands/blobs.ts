// `shardctl blobs gc [--tenant T | --unit U] [--grace 1h] [--dry-run] [--json]`: deletes, on each
// unit's owner, the version objects no committed blob-index row names (lib/blobs/gc.ts says what it
// checks first). Without --tenant or --unit, every tenant the directory places and every bucket
// unit of a configured dataset; a unit that may not be collected now (a move in flight) is listed
// as skipped with its reason. Each unit collected (not in a dry run) is a `blobs.gc` audit entry
// under the operator (--actor, --reason).
import { Command } from 'commander';
import { collectTenantBlobs, type GcDeps, type GcReport } from '../../lib/blobs/gc';
import { listPlacements } from '../../lib/directory/placements';
import { shardByName } from '../../lib/config';
import { parseDurationMs } from '../../lib/duration';
import { ShardctlError, invalidInput } from '../../lib/errors';
import { unitRows } from '../../lib/unit-rows';
import { collectableUnits } from '../../lib/blobs/gc-loop';
import { validateShardName, validateTenantId } from '../../lib/ids';
import { examples } from '../help';
import { operatorOf } from '../actor';
import { configOf, printResult, withConnections } from '../run';

export function register(program: Command) {
  const cfg = configOf(program);
  const blobs = program.command('blobs').description("tenants' blobs: the blob index's garbage collector");
  const gc = blobs
    .command('gc')
    .description(
      "delete, on each tenant's owner, the version objects no committed blob-index row names and older than the grace period (audited: one blobs.gc entry per tenant collected)",
    )
    .option('--tenant <id>', 'only this tenant (default: every tenant the directory places, and every bucket unit of a configured dataset)')
    .option('--unit <unit>', 'only this unit: a tenant, or a bucket unit bucket:<dataset>:<n>')
    .option('--shard <name>', "refuse unless this shard is the tenant's owner")
    .option('--grace <duration>', "keep unreferenced objects younger than this (longer than the routers' deadline)", '1h')
    .option('--dry-run', 'list what would be deleted; delete nothing (and record nothing)')
    .option('--reason <text>', 'why, for the audit log')
    .option('--actor <name>', 'operator identity for the audit log')
    .option(
      '--json',
      'as JSON: {dryRun, graceMs, tenants: [{tenant, shard, epoch, bucket, scanned, referenced, young, notVersions, collected}], skipped: [{tenant, reason}]}',
    )
    .action(async (o: { tenant?: string; unit?: string; shard?: string; grace: string; dryRun?: boolean; json?: boolean; reason?: string; actor?: string }) => {
      const config = cfg();
      const operator = operatorOf(o);
      const graceMs = parseDurationMs(o.grace, '--grace');
      if (o.tenant !== undefined && o.unit !== undefined) throw invalidInput('give --tenant or --unit, not both');
      // A unit of a configured kind, spelled canonically (a bucket of a configured dataset, zero-padded).
      const tenant = o.tenant !== undefined ? validateTenantId(o.tenant) : o.unit !== undefined ? unitRows(config, o.unit).unit : undefined;
      const shard = o.shard === undefined ? undefined : validateShardName(o.shard);
      const out = await withConnections(config, { requireCurrentSchema: true }, async (conns) => {
        const deps: GcDeps = {
          tenantColumn: config.tenant.column,
          datasets: config.datasets,
          directoryPool: () => conns.directoryPool(),
          shardPool: (s) => conns.shardPool(s),
          bucketOf: (s) => ({ shard: s, s3: conns.s3For(s), bucket: shardByName(config, s).bucket }),
        };
        const run = (t: string) => collectTenantBlobs(deps, { tenant: t, graceMs, dryRun: o.dryRun, shard, operator });
        if (tenant) return { tenants: [await run(tenant)], skipped: [] };
        const tenants: GcReport[] = [];
        const skipped: { tenant: string; reason: string }[] = [];
        const placed = new Map((await listPlacements(conns.directoryPool())).placements.map((p) => [p.unit, p.shard]));
        const all = (await collectableUnits(deps)).filter((u) => !shard || placed.get(u) === shard);
        for (const unit of all) {
          try {
            tenants.push(await run(unit));
          } catch (e) {
            if (!(e instanceof ShardctlError) || e.type !== 'PreconditionFailed') throw e;
            skipped.push({ tenant: unit, reason: e.message });
          }
        }
        return { tenants, skipped };
      });
      printResult(o.json, { dryRun: o.dryRun === true, graceMs, ...out }, (v) => {
        const verb = v.dryRun ? 'would delete' : 'deleted';
        for (const r of v.tenants) {
          console.log(
            `${r.tenant} on ${r.shard}: ${verb} ${r.collected.length} unreferenced version object(s); kept ${r.referenced} referenced, ${r.young} within the grace period, ${r.notVersions} not index-managed`,
          );
          for (const k of r.collected) console.log(`  ${k}`);
        }
        for (const s of v.skipped) console.log(`${s.tenant}: skipped (${s.reason})`);
        if (!v.tenants.length && !v.skipped.length) console.log('no tenant to collect');
      });
    });
  examples(
    gc,
    'blobs gc --tenant acme --dry-run',
    'blobs gc --unit bucket:events:0042 --dry-run',
    'blobs gc --tenant acme --actor alice --reason "OPS-9 bucket over quota"',
    'blobs gc --grace 6h --json',
    'audit --tenant acme --json | jq \'.entries[] | select(.action == "blobs.gc") | .detail.deleted\'',
  );
}
