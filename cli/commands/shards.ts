// `shardctl shards prepare|list|set-status|undedicate|add`: put the fence on the shards' tenant tables, and show which
// shards are reachable, how many of their tenant tables are fenced, and the directory's status
// (open, draining, closed) and units of each. Pools are closed at the
// end so the process exits. `list` exits 5 when a shard is unreachable (cli/exit.ts). `set-status`
// changes the directory's status of a shard (audited); `closed` only when nothing is placed there
// and no move onto or off it is unfinished (exit 4 with each reason otherwise). `undedicate` makes
// a shard dedicated by `tenant isolate` shared again (audited). `add` joins a new
// shard to the config's allowlist and the directory (lib/directory/add-shard.ts). `adopt` makes an
// existing database (in the config) that already holds every tenant the fleet's first shard:
// prepared, and every tenant found placed on it in one directory generation (lib/adopt.ts).
import { Command } from 'commander';
import { Config, configPath, knownShard } from '../../lib/config';
import { addShard, checkAddShardRequest, SHARD_CLASSES, type AddShardRequest, type ShardClass } from '../../lib/directory/add-shard';
import type { Pool } from 'pg';
import { fenceStatus, prepareAllShards } from '../../lib/shard/prepare';
import {
  closeDrainedShard,
  DEFAULT_SHARD_CAPACITY,
  getShard,
  listShards,
  setShardDedication,
  setShardStatus,
  SHARD_STATUSES,
  type ShardInfo,
  type ShardStatus,
} from '../../lib/directory/shards';
import { ShardctlError, invalidInput } from '../../lib/errors';
import { actorDefault, operatorOf } from '../actor';
import { recordPrepare } from '../../lib/shard/prepare-audit';
import { EXIT, exitCodeFor } from '../exit';
import { examples } from '../help';
import { configOf, printResult, withConnections } from '../run';
import { parseDurationMs } from '../../lib/duration';
import { isTerminalStream, renderTable } from '../../lib/text-table';
import { adoptShard, validateAdoptInput, type AdoptResult } from '../../lib/adopt';
import { ensureDirectory } from '../../lib/directory/ensure';

export function register(program: Command) {
  const shards = program.command('shards').description('the shards: prepare them for moves, list them, open or close them');
  const cfg = configOf(program);

  const prepare = shards
    .command('prepare')
    .description('install schema shardctl and the fence trigger on every tenant table (idempotent; audited: one shard.prepare entry per shard)')
    .option('--shard <name>', 'only this shard (default: every configured shard)')
    .option('--demo-schema', "also create the demo application's tables (before fencing them)")
    .option('--reason <text>', 'why, for the audit log')
    .option('--actor <name>', 'operator identity for the audit log')
    .action(async (o: { shard?: string; demoSchema?: boolean; reason?: string; actor?: string }) => {
      const config = cfg();
      if (o.shard) knownShard(config, o.shard); // unknown shard: one line, before any connection
      const operator = operatorOf(o);
      await withConnections(config, {}, async (pools) => {
        // The directory first, brought up to date as every verb that writes it does: a prepare it
        // could not record changes no shard.
        await ensureDirectory(pools.directoryPool(), config, operator);
        const demoSchema = !!o.demoSchema;
        const results = await prepareAllShards(config, pools.shardPool, { shard: o.shard, demoSchema, s3For: pools.s3For });
        await recordPrepare(pools.directoryPool(), operator, results, { demoSchema });
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
  examples(
    prepare,
    'shards prepare --reason "new tables in release 42"',
    'shards prepare --shard shard-c --demo-schema --actor alice',
    'audit --since 1h --json | jq \'.entries[] | select(.action == "shard.prepare") | .detail.changed\'',
  );

  const list = shards
    .command('list')
    .description('configured shards: reachability and fenced tenant tables')
    .option(
      '--json',
      'as JSON: [{name, status, units, class, dedicatedTo, region, capacity, capacityBytes, reachable, schemaInstalled, fence, tenantTables, fencedTables, unfenced, tenantBytes, tenantRows, writesPerSecond, slotRetainedBytes, error?, directoryError?}]',
    )
    .option('--rate-window <duration>', "how long to sample the tenant tables' write counters for writesPerSecond (0: skip)", '1s')
    .action(async (o: { json?: boolean; rateWindow?: string }) => {
      const config = cfg();
      const rows = await withConnections(config, {}, async (pools) => {
        // The directory's view is optional here: an unreachable directory still lists the shards.
        const inventory = await listShards(pools.directoryPool()).then(
          (l) => new Map(l.map((x) => [x.name, x])),
          (e: any) => e as Error,
        );
        // The inventory is an allowlist: a shard the directory has but the config does not is never
        // connected to (the config holds the only way to reach it), so it is named, not listed.
        if (!(inventory instanceof Error)) for (const x of outsideConfig(config, inventory)) process.stderr.write(`shards list: ${x}\n`);
        const window = o.rateWindow === undefined ? 1000 : parseDurationMs(o.rateWindow, '--rate-window');
        return Promise.all(config.shards.map((s) => describeShard(config, s.name, pools.shardPool(s.name), inventory, window)));
      });
      printResult(o.json, rows, () => console.log(formatShardList(rows, isTerminalStream(process.stdout)).join('\n')), { pretty: true });
      if (rows.some((r) => !r.reachable)) process.exitCode = exitCodeFor('Unavailable');
    });
  examples(list, 'shards list', "shards list --json | jq -r '.[] | select(.unfenced | length > 0) | .name'");

  const setStatus = shards
    .command('set-status')
    .description(`set a shard's directory status (${SHARD_STATUSES.join(' | ')}): draining and closed take no new units; closed only once it is empty`)
    .argument('<shard>', 'a shard of the config')
    .argument('<status>', SHARD_STATUSES.join(' | '))
    .option('--reason <text>', 'why, for the audit log')
    .option('--actor <name>', 'operator identity for the audit log')
    .option('--json', 'as JSON: {name, from, status}')
    .action(async (name: string, status: string, o: { reason?: string; actor?: string; json?: boolean }) => {
      const config = cfg();
      knownShard(config, name); // unknown shard: one line, before any connection
      if (!SHARD_STATUSES.includes(status as ShardStatus))
        throw invalidInput(`status must be one of ${SHARD_STATUSES.join(', ')}, got ${JSON.stringify(status)}`);
      const audit = { actor: o.actor || actorDefault(), reason: o.reason };
      const result = await withConnections(config, {}, async (pools) => {
        const db = pools.directoryPool();
        const before = await getShard(db, name);
        if (!before) throw new ShardctlError('NotFound', `shard "${name}" is not in the directory (run \`shardctl directory migrate\`)`);
        if (status === 'closed') {
          const c = await closeDrainedShard(db, name, audit, { fromOpen: true });
          if (!c.closed)
            throw new ShardctlError(
              'PreconditionFailed',
              `refusing to close ${name}: ${c.reasons.join('; ')} (drain it first: \`shardctl shards drain --shard ${name}\`)`,
            );
        } else {
          await setShardStatus(db, name, status as ShardStatus, audit);
        }
        return { name, from: before.status, status };
      });
      printResult(o.json, result, () => console.log(`${name}: ${result.from} -> ${result.status}`));
    });
  examples(setStatus, 'shards set-status shard-d draining --reason "hardware refresh"', 'shards set-status shard-d open', 'shards set-status shard-d closed');

  const undedicate = shards
    .command('undedicate')
    .description('make a shard dedicated to a tenant (tenant isolate) shared again: the rebalancer and placement may put other units there')
    .argument('<shard>', 'a shard of the config')
    .option('--reason <text>', 'why, for the audit log')
    .option('--actor <name>', 'operator identity for the audit log')
    .option('--json', 'as JSON: {name, from, dedicatedTo}')
    .action(async (name: string, o: { reason?: string; actor?: string; json?: boolean }) => {
      const config = cfg();
      knownShard(config, name); // unknown shard: one line, before any connection
      const audit = { actor: o.actor || actorDefault(), reason: o.reason };
      const result = await withConnections(config, {}, async (pools) => {
        const db = pools.directoryPool();
        const before = await getShard(db, name);
        if (!before) throw new ShardctlError('NotFound', `shard "${name}" is not in the directory (run \`shardctl directory migrate\`)`);
        if (!before.dedicatedTo) throw new ShardctlError('PreconditionFailed', `${name} is not dedicated to a tenant: nothing to undo`);
        const after = await setShardDedication(db, name, null, audit);
        return { name, from: before.dedicatedTo, dedicatedTo: after.dedicatedTo, class: after.class };
      });
      printResult(o.json, result, () =>
        console.log(
          `${name}: dedicated to ${result.from} -> shared${result.class === 'dedicated' ? ' (its class stays dedicated: it takes only a tenant isolated onto it)' : ''}`,
        ),
      );
    });
  examples(undedicate, 'shards undedicate shard-d --reason "isolate of acme cancelled"');

  const add = shards
    .command('add')
    .description(
      'add a shard to the config (by the variable that holds its DSN) and to the directory, after checking its server, that it is no shard already, and its bucket; prepares it',
    )
    .argument('<name>', 'the new shard (a-z, 0-9, -)')
    .requiredOption('--dsn-env <var>', 'environment variable holding its DSN; the config records the name, never the DSN (workers need it set too)')
    .requiredOption('--bucket <bucket>', 'its S3 bucket (its own: no other shard may use it)')
    .option('--capacity-ops <n>', `its load capacity, in the unit of tenants' expected load (default ${DEFAULT_SHARD_CAPACITY})`, wholeNumber('--capacity-ops'))
    .option('--capacity-bytes <n>', 'its disk budget in bytes (recorded, shown by `shards list`)', wholeNumber('--capacity-bytes'))
    .option('--region <r>', 'its region (recorded for residency policy)')
    .option('--class <class>', `${SHARD_CLASSES.join(' | ')}: a dedicated shard takes only a tenant isolated onto it (tenant isolate --to)`, 'shared')
    .option('--reason <text>', 'why, for the audit log')
    .option('--actor <name>', 'operator identity for the audit log')
    .option('--json', 'as JSON: {name, dsnEnv, bucket, class, region, capacity, capacityBytes, server, tenantTables, warnings, configFile}')
    .action(async (name: string, o: AddOpts) => {
      const config = cfg();
      const file = configPath(program.opts().config);
      const req: AddShardRequest = {
        name,
        dsnEnv: o.dsnEnv,
        bucket: o.bucket,
        capacityOps: o.capacityOps,
        capacityBytes: o.capacityBytes,
        region: o.region,
        class: o.class as ShardClass,
        actor: o.actor || actorDefault(),
        reason: o.reason,
      };
      checkAddShardRequest(config, req, process.env); // bad input: one line, before any connection
      const r = await withConnections(config, {}, (pools) => addShard(config, file, pools.directoryPool(), req));
      printResult(
        o.json,
        r,
        () => {
          console.log(
            `${r.name}: added (${r.class}${r.region ? `, region ${r.region}` : ''}, capacity ${r.capacity}${r.capacityBytes ? `, ${r.capacityBytes} bytes` : ''}), open`,
          );
          console.log(`  server: PostgreSQL ${r.server.version}, database ${r.server.database}, system ${r.server.systemIdentifier}`);
          console.log(
            `  config: ${r.configFile} names $${r.dsnEnv} for its DSN: running workers with $${r.dsnEnv} in their environment learn the shard from the file; restart routers`,
          );
          console.log(`  prepared: ${r.tenantTables.length} tenant table(s) fenced${r.tenantTables.length ? `: ${r.tenantTables.join(', ')}` : ''}`);
          for (const w of r.warnings) console.log(`  warning: ${w}`);
        },
        { pretty: true },
      );
    });
  const adopt = shards
    .command('adopt')
    .description(
      'onboard an existing database (a shard of the config) whose tenant tables already hold every tenant: prepare it and place every tenant found on it, in one directory generation (idempotent)',
    )
    .argument('<name>', 'a shard of the config: the database to adopt')
    .option('--dry-run', 'print what it would record and every reason it would refuse; change nothing (exit 4 if refused)')
    .option('--expected-load <n>', 'expected load recorded for each tenant placed (default 1, as tenant create)')
    .option('--reason <text>', 'why, for the audit log')
    .option('--actor <name>', 'operator identity for the audit log')
    .option(
      '--json',
      'as JSON: {shard, ok, dryRun, reasons, warnings, tables, datasetTables, place, present, movedAway, expectedLoad, load, created, generation, fencesInstalled}',
    )
    .action(async (name: string, o: { dryRun?: boolean; expectedLoad?: string; reason?: string; actor?: string; json?: boolean }) => {
      const config = cfg();
      if (o.expectedLoad !== undefined && !/^\d{1,15}$/.test(o.expectedLoad.trim()))
        throw invalidInput(`--expected-load must be a non-negative integer, got ${JSON.stringify(o.expectedLoad.slice(0, 40))}`);
      const input = {
        shard: name,
        actor: o.actor || actorDefault(),
        reason: o.reason,
        expectedLoad: o.expectedLoad === undefined ? undefined : Number(o.expectedLoad),
      };
      validateAdoptInput(input, config); // unknown shard, bad input: one line, before any connection
      const r = await withConnections(config, {}, async (pools) => {
        // A dry run reads only; a real one first brings the directory up to date and registers the config's shards.
        if (!o.dryRun) await ensureDirectory(pools.directoryPool(), config, { actor: input.actor, reason: input.reason });
        return adoptShard({ directory: pools.directoryPool(), shardPool: pools.shardPool, s3For: pools.s3For, config }, input, { dryRun: !!o.dryRun });
      });
      printResult(o.json, r, printAdoption, { pretty: true });
      if (!r.ok) process.exitCode = exitCodeFor('PreconditionFailed');
    });
  examples(
    adopt,
    'shards adopt legacy --dry-run          # what it would record, what refuses it; changes nothing',
    'shards adopt legacy --reason "onboarding the monolith"',
    "shards adopt legacy --dry-run --json | jq '.place | length'",
  );

  examples(
    add,
    'SHARD_E_DSN=postgres://shardctl@db-e:5432/app shards add shard-e --dsn-env SHARD_E_DSN --bucket tenants-e',
    'shards add shard-f --dsn-env SHARD_F_DSN --bucket tenants-f --class dedicated --region eu-west-1 --capacity-ops 4000',
  );
}

function printAdoption(r: AdoptResult): void {
  const what = r.dryRun ? (r.ok ? 'would place' : 'refused; would place') : 'placed';
  const placed = r.dryRun ? r.place : r.created;
  console.log(
    `${r.shard}: ${r.tables.length} tenant table(s); ${r.place.length + r.present.length + r.movedAway.length} tenant(s) found; ${what} ${placed.length} (epoch 1, active, expected load ${r.expectedLoad} each), ${r.present.length} already placed here` +
      (r.generation !== null ? `; directory generation ${r.generation}` : ''),
  );
  if (r.tables.length) console.log(`  tables: ${r.tables.join(', ')}`);
  for (const t of placed) console.log(`  ${r.dryRun ? 'place' : 'placed'} ${t} -> ${r.shard}`);
  if (r.load) console.log(`  load: ${r.load.before} -> ${r.load.after} of usable ${r.load.usable} (capacity ${r.load.capacity})`);
  for (const w of r.warnings) console.log(`  warning: ${w}`);
  for (const x of r.reasons) console.log(`  refused: ${x}`);
  if (!r.dryRun && !placed.length && r.ok) console.log('  nothing to do: every tenant found is already placed here');
}

function bytesText(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

/** One row per shard, no head (each row starts with the shard's name): placement, then reachability and fencing. */
export function formatShardList(rows: readonly ShardRow[], tty: boolean): string[] {
  return renderTable(
    {
      rows: rows.map((r) => {
        const detail = !r.reachable
          ? (r.error ?? '')
          : !r.schemaInstalled
            ? 'not prepared (run `shardctl shards prepare`)'
            : `${r.fencedTables}/${r.tenantTables} tenant tables fenced${r.fence ? ` (${r.fence} fence)` : ''}, ${volumeText(r)}` +
              (r.unfenced.length ? `; NOT fenced: ${r.unfenced.join(', ')}` : '') +
              (r.error ? `; ${r.error}` : '');
        const kind = [r.dedicatedTo ? `dedicated to ${r.dedicatedTo}` : r.class === 'dedicated' ? 'dedicated' : '', r.region ?? ''].filter(Boolean).join(' ');
        const placement = r.status ? [r.status, `${r.units} unit(s)`, kind] : [`status unknown (${r.directoryError})`, '', ''];
        return [r.name, ...placement, r.reachable ? 'reachable' : 'UNREACHABLE', detail];
      }),
      align: ['left', 'left', 'right'],
    },
    tty,
  );
}

function volumeText(r: ShardRow): string {
  const rate = r.writesPerSecond === null ? '' : `, ${r.writesPerSecond} writes/s`;
  return `${bytesText(r.tenantBytes ?? 0)} in ~${r.tenantRows ?? 0} rows${rate}, slots retain ${bytesText(r.slotRetainedBytes ?? 0)}`;
}

interface AddOpts {
  dsnEnv: string;
  bucket: string;
  capacityOps?: number;
  capacityBytes?: number;
  region?: string;
  class: string;
  reason?: string;
  actor?: string;
  json?: boolean;
}

const wholeNumber = (flag: string) => (v: string) => {
  if (!/^\d{1,18}$/.test(v.trim()) || Number(v) <= 0 || !Number.isSafeInteger(Number(v)))
    throw invalidInput(`${flag} wants a positive whole number, got ${JSON.stringify(v)}`);
  return Number(v);
};

export interface ShardRow {
  name: string;
  /** From the directory: open, draining or closed; null when the directory could not be read. */
  status: ShardInfo['status'] | null;
  units: number | null;
  class: ShardInfo['class'] | null;
  /** The tenant this shard is dedicated to (`tenant isolate`): nothing else is placed there; null when shared or unknown. */
  dedicatedTo: string | null;
  region: string | null;
  capacity: number | null;
  capacityBytes: number | null;
  reachable: boolean;
  schemaInstalled: boolean;
  tenantTables: number;
  fencedTables: number;
  /** The fence's implementation on the shard (lib/shard/prepare.ts fenceStatus); null when unknown. */
  fence: 'native' | 'plpgsql' | null;
  unfenced: string[];
  /** On-disk size of its tenant tables (with indexes and TOAST), bytes; null when unreachable. */
  tenantBytes: number | null;
  /** Rows of its tenant tables, from the statistics (n_live_tup: an estimate, never a scan). */
  tenantRows: number | null;
  /** Inserts, updates and deletes per second on its tenant tables over the sampling window. */
  writesPerSecond: number | null;
  /** WAL its replication slots hold back (every slot's, shardctl's or not), bytes. */
  slotRetainedBytes: number | null;
  error?: string;
  directoryError?: string;
}

/** Directory shards the config does not name, each as a line an operator can act on. */
function outsideConfig(config: Config, inventory: Map<string, ShardInfo>): string[] {
  const known = new Set(config.shards.map((s) => s.name));
  return [...inventory.values()]
    .filter((s) => !known.has(s.name))
    .map(
      (s) => `${s.name} is in the directory (${s.units} unit(s)) but not in the config: not listed, never connected to (add it with \`shardctl shards add\`)`,
    );
}

/** Tenant tables' bytes, rows and write counter, and the WAL every slot retains, in one statement. */
async function shardVolume(pool: Pool, tables: string[]): Promise<{ bytes: number; rows: number; writes: number; retained: number }> {
  const r = await pool.query(
    `select coalesce(sum(pg_total_relation_size(c.oid)), 0)::text as bytes,
            coalesce(sum(st.n_live_tup), 0)::text as rows,
            coalesce(sum(st.n_tup_ins + st.n_tup_upd + st.n_tup_del), 0)::text as writes,
            (select coalesce(sum(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)), 0)::text
               from pg_replication_slots where restart_lsn is not null) as retained
       from unnest($1::text[]) as t(name)
       join pg_class c on c.oid = to_regclass(t.name)
       left join pg_stat_user_tables st on st.relid = c.oid`,
    [tables],
  );
  const x = r.rows[0];
  return { bytes: Number(x.bytes), rows: Number(x.rows), writes: Number(x.writes), retained: Number(x.retained) };
}

async function describeShard(config: Config, name: string, pool: Pool, inventory: Map<string, ShardInfo> | Error, rateWindowMs: number): Promise<ShardRow> {
  const known = inventory instanceof Error ? undefined : inventory.get(name);
  const row: ShardRow = {
    name,
    status: known?.status ?? null,
    units: known?.units ?? null,
    class: known?.class ?? null,
    dedicatedTo: known?.dedicatedTo ?? null,
    region: known?.region ?? null,
    capacity: known?.capacity ?? null,
    capacityBytes: known?.capacityBytes ?? null,
    reachable: false,
    schemaInstalled: false,
    tenantTables: 0,
    fencedTables: 0,
    fence: null,
    unfenced: [],
    tenantBytes: null,
    tenantRows: null,
    writesPerSecond: null,
    slotRetainedBytes: null,
  };
  if (inventory instanceof Error) row.directoryError = inventory.message;
  else if (!known) row.directoryError = 'not in the directory (run `shardctl directory migrate`)';
  try {
    await pool.query('select 1');
    row.reachable = true;
    const st = await fenceStatus(pool, config);
    row.schemaInstalled = st.schemaInstalled;
    row.tenantTables = st.tenantTables.length;
    row.fencedTables = st.fenced.length;
    row.fence = st.implementation;
    row.unfenced = st.unfenced;
    // Two samples of the write counters, `rateWindowMs` apart (statistics lag by up to
    // stats_fetch_consistency's snapshot; each sample is its own transaction).
    const first = await shardVolume(pool, st.tenantTables);
    if (rateWindowMs > 0) await new Promise((r) => setTimeout(r, rateWindowMs));
    const second = rateWindowMs > 0 ? await shardVolume(pool, st.tenantTables) : first;
    row.tenantBytes = second.bytes;
    row.tenantRows = second.rows;
    row.writesPerSecond = rateWindowMs > 0 ? Math.max(0, Math.round(((second.writes - first.writes) * 1000) / rateWindowMs)) : null;
    row.slotRetainedBytes = second.retained;
  } catch (e: any) {
    row.error = e?.message ?? String(e);
  }
  return row;
}
