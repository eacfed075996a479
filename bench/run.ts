// `npm run bench`: the data path's figures (issue 10) and the fence's (issue 11), each ours against
// a baseline measured in the same run, interleaved round by round, printed as one table and saved
// to bench/results.json and BENCHMARKS.md. Brings the dev stack up (on the ports in the
// environment) when it is not running. Method: BENCHMARKS.md.
//
//   npm run bench -- --only planner [--shards 1000] [--units 100000] [--runs 5]   (the planner alone, bench/planner.ts: no stack, nothing saved)
//   npm run bench -- [--rows 300000] [--rounds 2] [--write-seconds 8] [--apply-seconds 30] [--only copy,validate,catchup,fence,router] [--workloads 1-row,mixed,100-row]
//                    [--native-synchronous-commit off (the catch-up's native subscription: its default off, or on, local, remote_write, remote_apply)]
//                    [--paired-rounds N (fence and router: default 15 / 11 / 7 by scenario, 15 for the router)]
//                    [--cutover [--cutover-sizes 10000,100000,1000000] [--cutover-moves 5] [--cutover-blobs index,direct]
//                               [--cutover-long-writes MS]] [--no-save]
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openPool } from '../lib/connections';
import type { Config } from '../lib/config';
import { stackAt, stackConfig, status, up } from '../lib/dev/stack';
import { Figure, Verdict, formatTable, judge } from './figures';
import { interleave, interleavePaired, log } from './measure';
import { createBenchData, dropBenchSchema } from './setup';
import { CopyContext, CopySample, createNativeTarget, dropNativeTarget, nativeInitialSync, ourCopy, rawCopyPipe, rawPipeIntoPrepared } from './copy';
import { ourValidation, scanBothSides } from './validate';
import { RateSample, WORKLOADS, applyBacklog, pgbenchScript, runPgbench, setupCatchUp, teardownCatchUp } from './catchup';
import { NativeApplyContext, NativeApplySample, markEndOfWrites, nativeApply, setupNativeApply, teardownNativeApply } from './catchup-native';
import { currentWalLsn } from '../lib/cdc';
import {
  FenceContext,
  ROUTER_ROUNDS,
  ROUTER_TRANSACTIONS,
  RouterContext,
  directRun,
  fenceScenarios,
  routerRun,
  setupFenceBench,
  setupRouterBench,
  teardownFence,
  setupPlpgsqlFenceBench,
  writeRun,
} from './fence';
import { measureCutoverPauses, pauseFigures } from './cutover-pause';
import type { BlobWrites } from '../lib/loadgen';
import { runPlannerBench } from './planner';

require('../lib/quiet-warnings.js');

const SECTIONS = ['copy', 'validate', 'catchup', 'fence', 'router'] as const;

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
const flag = (name: string) => process.argv.includes(`--${name}`);
const intArg = (name: string, dflt: number) => {
  const v = Number(arg(name) ?? dflt);
  if (!Number.isInteger(v) || v < 1) throw new Error(`--${name} must be a positive integer`);
  return v;
};

async function ensureStack(): Promise<Config> {
  const s = stackAt(process.cwd());
  const down = (await status(s)).filter((p) => !p.healthy && p.part !== 'temporal-ui');
  if (down.length) {
    log(`dev stack not healthy (${down.map((p) => p.part).join(', ')}): dev up`);
    await up(s, log);
  }
  return stackConfig(s);
}

async function main() {
  const rows = intArg('rows', 300_000);
  const rounds = intArg('rounds', 2);
  const writeSeconds = intArg('write-seconds', 8);
  const applySeconds = intArg('apply-seconds', 30);
  const pairedRounds = arg('paired-rounds') === undefined ? undefined : intArg('paired-rounds', 1);
  const only = new Set((arg('only') ?? SECTIONS.join(',')).split(','));
  // The planner's figures are pure CPU (no stack, no baseline to interleave): its own report.
  if (only.has('planner')) {
    await runPlannerBench();
    only.delete('planner');
    if (!only.size) return;
  }
  // Catch-up workloads by name prefix, e.g. `--workloads 100-row` (default: all).
  const workloadPrefixes = arg('workloads')?.split(',');
  const workloads = WORKLOADS.filter((w) => !workloadPrefixes || workloadPrefixes.some((p) => w.startsWith(p)));
  if (workloads.length === 0) throw new Error(`--workloads ${arg('workloads')} names none of: ${WORKLOADS.join(', ')}`);
  const startedAt = new Date();
  const config = await ensureStack();
  const tenantColumn = config.tenant.column;
  const [a, b, c] = config.shards;
  const source = openPool(a.dsn, { applicationName: 'shardctl-bench', max: 6 });
  const target = openPool(b.dsn, { applicationName: 'shardctl-bench', max: 6 });
  const fencePool = openPool(c.dsn, { applicationName: 'shardctl-bench', max: 2 });
  const directory = openPool(config.directory.dsn, { applicationName: 'shardctl-bench', max: 2 });
  const figures: Figure[] = [];
  const notes: Record<string, unknown> = {};
  const tenant = 'bench-t';
  let fence: FenceContext | undefined;
  /** With the native fence configured: the plpgsql fence beside it, measured in the same rounds. */
  let plpgsqlFence: FenceContext | undefined;
  let router: RouterContext | undefined;
  try {
    const machine = {
      nproc: os.availableParallelism?.() ?? os.cpus().length,
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      cpu: os.cpus()[0]?.model ?? 'unknown',
      postgres: (await source.query('show server_version')).rows[0].server_version as string,
      loadAverageAtStart: os.loadavg().map((x) => Math.round(x * 100) / 100),
    };
    log(`machine: ${JSON.stringify(machine)}`);

    if (only.has('copy') || only.has('validate') || only.has('catchup')) {
      log(`setting up tenant ${tenant}: ${rows} rows on ${a.name} (plus a neighbour of ${Math.round(rows / 10)})`);
      const data = await createBenchData({ source, target }, config, { tenant, neighbour: 'bench-neighbour', rows });
      notes.rows = data.counts;
      notes.sourceTableBytes = data.tenantBytes;
      const ctx: CopyContext = { source, target, sourceDsn: a.dsn, targetDsn: b.dsn, tables: data.tables, tenant, tenantColumn };

      // Copy: always run (validation and catch-up need the target filled by ours).
      await createNativeTarget(ctx);
      try {
        log('copy: raw pipe / raw pipe into the prepared tables / ours / native initial sync, interleaved');
        const s = await interleave<'raw' | 'prepared' | 'ours' | 'native', CopySample>(rounds, [
          ['raw', () => rawCopyPipe(ctx)],
          ['prepared', () => rawPipeIntoPrepared(ctx)],
          ['ours', () => ourCopy(ctx)],
          ['native', () => nativeInitialSync(ctx)],
        ]);
        const bytes = s.raw[0].bytes;
        for (const k of ['raw', 'prepared', 'ours', 'native'] as const) {
          for (const x of s[k]) if (x.rows !== rows) throw new Error(`copy ${k} moved ${x.rows} rows, expected ${rows}`);
        }
        const rps = (xs: CopySample[]) => xs.map((x) => x.rows / x.seconds);
        const mbps = (xs: CopySample[]) => xs.map((x) => bytes / 1e6 / x.seconds);
        figures.push(
          {
            name: 'copy rows/s',
            unit: 'rows/s',
            ours: rps(s.ours),
            baseline: rps(s.raw),
            better: 'higher',
            goal: { op: '>=', value: 0.9 },
            baselineLabel: 'raw binary COPY pipe',
          },
          {
            name: 'copy MB/s',
            unit: 'MB/s',
            ours: mbps(s.ours),
            baseline: mbps(s.raw),
            better: 'higher',
            goal: { op: '>=', value: 0.9 },
            baselineLabel: 'raw binary COPY pipe',
          },
          {
            name: 'copy vs native initial sync',
            unit: 'rows/s',
            ours: rps(s.ours),
            baseline: rps(s.native),
            better: 'higher',
            goal: { op: '>=', value: 1.0 },
            baselineLabel: 'CREATE SUBSCRIPTION, row filter',
          },
          {
            name: 'raw pipe into prepared tables',
            unit: 'rows/s',
            ours: rps(s.prepared),
            baseline: rps(s.raw),
            better: 'higher',
            baselineLabel: 'raw binary COPY pipe',
            note: 'the same pipe into the fenced, audited tables as a replica session: what our triggers cost any COPY',
          },
        );
        notes.copyBytes = bytes;
      } finally {
        await dropNativeTarget(ctx);
      }

      if (only.has('validate')) {
        log('validate: COPY TO scan of both sides / ours, interleaved');
        const v = await interleave(rounds, [
          ['scan', () => scanBothSides(ctx)],
          ['ours', () => ourValidation(ctx)],
        ]);
        const rate = (xs: { rows: number; seconds: number }[]) => xs.map((x) => x.rows / x.seconds);
        figures.push({
          name: 'validation rows/s',
          unit: 'rows/s',
          ours: rate(v.ours),
          baseline: rate(v.scan),
          better: 'higher',
          goal: { op: '>=', value: 0.5 },
          baselineLabel: 'COPY (SELECT … WHERE tenant) TO STDOUT, both sides',
        });
      }

      if (only.has('catchup')) {
        const cu = { source, target, sourceDsn: a.dsn, tables: data.tables, tenant, tenantColumn, counts: data.counts, clients: 8, writeSeconds };
        const nlr: NativeApplyContext = {
          source,
          target,
          sourceDsn: a.dsn,
          targetDsn: b.dsn,
          tables: data.tables,
          tenant,
          tenantColumn,
          synchronousCommit: arg('native-synchronous-commit') ?? 'off',
        };
        try {
          await setupCatchUp(cu);
          await setupNativeApply(nlr);
          let marker = 0;
          for (const w of workloads) {
            log(`catch-up ${w}: pgbench ${writeSeconds} s on the source / apply it by ours and by native logical replication, alternately first`);
            const script = pgbenchScript(w, tenant, data.counts);
            const written: RateSample[] = [];
            const applied: RateSample[] = [];
            const native: NativeApplySample[] = [];
            for (let r = 0; r < rounds; r++) {
              const wr = await runPgbench(a.dsn, script, cu.clients, writeSeconds);
              written.push(wr);
              // Both apply the same backlog, each from its own slot, to where the writes ended.
              const untilLsn = await currentWalLsn(source);
              const m = ++marker;
              await markEndOfWrites(nlr, m);
              let ours: RateSample | undefined;
              let nat: NativeApplySample | undefined;
              const sides = [
                async () => void (ours = await applyBacklog(cu, wr.transactions, applySeconds, untilLsn)),
                async () => void (nat = await nativeApply(nlr, m, wr.transactions, Math.max(120, applySeconds * 10))),
              ];
              for (const run of r % 2 ? sides.reverse() : sides) await run();
              applied.push(ours!);
              native.push(nat!);
              const rate = (x: RateSample) => Math.round(x.transactions / x.seconds);
              const perTx = (cpu: number | null) => (cpu === null ? 'n/a' : ((cpu / nat!.transactions) * 1e6).toFixed(1));
              log(
                `  round ${r + 1} (${r % 2 ? 'native' : 'ours'} first): pgbench ${rate(wr)} tx/s, ours ${rate(ours!)} tx/s, native ${rate(nat!)} tx/s (its worker started after ${nat!.startSeconds.toFixed(2)} s; CPU per transaction: walsender ${perTx(nat!.cpu.walsender)} µs, apply worker ${perTx(nat!.cpu.worker)} µs)`,
              );
            }
            notes[`catch-up native apply, ${w}`] = native;
            const rate = (xs: RateSample[]) => xs.map((x) => x.transactions / x.seconds);
            figures.push(
              {
                name: `catch-up, ${w}`,
                unit: 'tx/s',
                ours: rate(applied),
                baseline: rate(written),
                better: 'higher',
                goal: { op: '>=', value: w === '100-row statements' ? 1 : 3 },
                baselineLabel: `pgbench write rate, ${cu.clients} clients`,
              },
              {
                name: `catch-up vs native logical replication apply, ${w}`,
                unit: 'tx/s',
                ours: rate(applied),
                baseline: rate(native),
                better: 'higher',
                paired: true,
                baselineLabel: `native subscription applying the same backlog${nlr.synchronousCommit === 'off' ? '' : `, synchronous_commit ${nlr.synchronousCommit}`}`,
                note: 'where our applier stands against the limit PostgreSQL itself reaches on this machine',
              },
              {
                name: `native apply / pgbench write, ${w}`,
                unit: 'tx/s',
                ours: rate(native),
                baseline: rate(written),
                better: 'higher',
                paired: true,
                baselineLabel: `pgbench write rate, ${cu.clients} clients`,
                note: "the 'ours' column is native logical replication's apply: whether PostgreSQL's own apply reaches the goal here",
              },
            );
          }
        } finally {
          await teardownNativeApply(nlr);
          await teardownCatchUp(cu);
        }
      }
      await dropBenchSchema([source, target]);
    }

    if (only.has('fence') || only.has('router')) {
      fence = await setupFenceBench(fencePool, c.dsn, c.name, config, 8);
      if (only.has('fence')) {
        const native = config.fence.library !== undefined;
        if (native) plpgsqlFence = await setupPlpgsqlFenceBench(c.dsn, c.name, config, 8);
        for (const sc of fenceScenarios(1, pairedRounds)) {
          log(`fence ${sc.name}: plain / fenced (${native ? 'native fence; the plpgsql fence beside it' : 'plpgsql fence'}), ${sc.rounds} paired rounds`);
          const p = plpgsqlFence;
          const r = await interleavePaired(sc.rounds, [
            ['plain', () => writeRun(fence!, sc, 'plain')],
            ['fenced', () => writeRun(fence!, sc, 'fenced')],
            ...(p
              ? ([
                  ['plainP', () => writeRun(p, sc, 'plain')],
                  ['fencedP', () => writeRun(p, sc, 'fenced')],
                ] as const)
              : []),
          ] as [string, () => Promise<number>][]);
          figures.push({
            name: `fenced / unfenced, ${sc.name}`,
            unit: 'rows/s',
            ours: r.fenced,
            baseline: r.plain,
            better: 'higher',
            goal: { op: '>=', value: 0.9 },
            baselineLabel: `same writes, table without the fence${native ? ' (native fence)' : ''}`,
            paired: true,
          });
          if (p) {
            figures.push({
              name: `plpgsql fence / unfenced, ${sc.name}`,
              unit: 'rows/s',
              ours: r.fencedP,
              baseline: r.plainP,
              better: 'higher',
              baselineLabel: 'same writes, table without the fence, same rounds',
              note: 'the fence a shard has without fence.library (managed servers): measured in the same rounds, in a database of its own',
              paired: true,
            });
          }
        }
      }
      if (only.has('router')) {
        router = await setupRouterBench(fence, directory, ROUTER_TRANSACTIONS);
        const n = pairedRounds ?? ROUTER_ROUNDS;
        log(`router: direct / direct opened as the router opens / router transactions, ${n} paired rounds`);
        await routerRun({ ...router, transactions: 50 }); // warm the cache and the pools
        await directRun(router, 'as-router');
        const r = await interleavePaired(n, [
          ['direct', () => directRun(router!)],
          ['asRouter', () => directRun(router!, 'as-router')],
          ['router', () => routerRun(router!)],
        ]);
        const routerFigure = {
          unit: 'ms/tx',
          better: 'lower' as const,
          paired: true,
        };
        figures.push(
          {
            ...routerFigure,
            name: 'router tx vs direct connection',
            ours: r.router,
            baseline: r.direct,
            goal: { op: '<=', value: 1.1 },
            baselineLabel: 'BEGIN; INSERT; 0.5 ms work; COMMIT, unfenced',
          },
          {
            ...routerFigure,
            name: 'direct, opened as the router opens',
            ours: r.asRouter,
            baseline: r.direct,
            baselineLabel: 'the same, unfenced',
            note: "the router's opening batch (statement timeout, fence check) and the fenced table on a plain client: the shard's share",
          },
          {
            ...routerFigure,
            name: 'router tx vs direct opened as the router',
            ours: r.router,
            baseline: r.asRouter,
            baselineLabel: 'direct, opened as the router opens',
            note: "the same statements: the router's client-side share (pool, retry loop, revocable client)",
          },
        );
      }
    }

    if (flag('cutover')) {
      const sizes = (arg('cutover-sizes') ?? '10000,100000,1000000').split(',').map(Number);
      const moves = intArg('cutover-moves', 5);
      // How the tenant's objects are written: through the blob index (the bounded final delta) by default, and/or directly (the whole-prefix sync).
      const blobModes = (arg('cutover-blobs') ?? 'index').split(',');
      for (const m of blobModes) if (m !== 'index' && m !== 'direct') throw new Error(`--cutover-blobs takes index and/or direct (got ${m})`);
      for (const blobWrites of blobModes as BlobWrites[]) {
        for (const size of sizes) {
          const r = await measureCutoverPauses(config, { rows: size, moves, blobWrites });
          notes[`cutover ${size}${blobWrites === 'index' ? '' : ' direct'}`] = r;
          figures.push(...pauseFigures(r));
        }
      }
      // A writer holding each transaction open this long, on every move: with the cutover's guard
      // for long writes (the config's defaults) and without it (fenceLockWaitMs 0, longWriteMs 0), in the same run.
      const longMs = intArg('cutover-long-writes', 0);
      if (longMs > 0) {
        const size = Math.min(...sizes);
        for (const guarded of [true, false]) {
          const c = guarded ? config : { ...config, limits: { ...config.limits, fenceLockWaitMs: 0, longWriteMs: 0 } };
          const r = await measureCutoverPauses(c, { rows: size, moves, blobWrites: 'index', longWriteMs: longMs });
          notes[`cutover ${size} long writes ${longMs} ms${guarded ? '' : ' unguarded'}`] = r;
          figures.push(...pauseFigures(r));
        }
      }
    }

    const verdicts = figures.map(judge);
    const table = formatTable(verdicts);
    const finishedAt = new Date();
    const durationSec = Math.round((finishedAt.getTime() - startedAt.getTime()) / 1000);
    const machineLine =
      `${machine.nproc} CPUs (${machine.cpu}), ${machine.memoryGiB} GiB, PostgreSQL ${machine.postgres}; ` +
      `load average ${machine.loadAverageAtStart.join(' ')} at start, ${os
        .loadavg()
        .map((x) => x.toFixed(2))
        .join(' ')} at end (shared machine)`;
    const args = process.argv.slice(2).join(' ');
    const command = args ? `npm run bench -- ${args}` : 'npm run bench';
    console.log(
      `\n${table}\n\n${notes.rows ? `${rows} rows, ` : ''}${rounds} interleaved rounds per figure (best round each side), fence, router and the catch-up's native-apply figures paired (median of per-round ratios [interquartile range, rounds]), ${durationSec} s; ${machineLine}`,
    );
    if (!flag('no-save')) saveResults({ startedAt, durationSec, command, machine, machineLine, rows, rounds, verdicts, notes, table });
  } finally {
    if (fence || router) await teardownFence(fence, router);
    if (plpgsqlFence) {
      await teardownFence(plpgsqlFence);
      await plpgsqlFence.pool.end();
    }
    await dropBenchSchema([source, target]).catch(() => {});
    await Promise.all([source.end(), target.end(), fencePool.end(), directory.end()]);
  }
}

function saveResults(r: {
  startedAt: Date;
  durationSec: number;
  command: string;
  machine: object;
  machineLine: string;
  rows: number;
  rounds: number;
  verdicts: Verdict[];
  notes: Record<string, unknown>;
  table: string;
}) {
  const root = path.join(__dirname, '..');
  const { table, machineLine, ...json } = r;
  fs.writeFileSync(path.join(root, 'bench', 'results.json'), JSON.stringify(json, null, 2) + '\n');
  const md = path.join(root, 'BENCHMARKS.md');
  const start = '<!-- bench:latest:start -->';
  const end = '<!-- bench:latest:end -->';
  const text = fs.readFileSync(md, 'utf8');
  const i = text.indexOf(start);
  const j = text.indexOf(end);
  if (i < 0 || j < i) throw new Error(`BENCHMARKS.md lacks the ${start} … ${end} markers`);
  const block = [
    start,
    `Run ${r.startedAt.toISOString().slice(0, 16).replace('T', ' ')} UTC, \`${r.command}\`, ${r.durationSec} s: ${r.rows} rows, ${r.rounds} rounds.`,
    `Machine: ${machineLine}.`,
    '',
    table,
    end,
  ].join('\n');
  fs.writeFileSync(md, text.slice(0, i) + block + text.slice(j + end.length));
  log('saved bench/results.json and the table in BENCHMARKS.md');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
