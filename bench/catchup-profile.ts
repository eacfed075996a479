// Where a catch-up's wall time goes (issue 10): per round, pgbench writes a workload to the source
// for --write-seconds, then applyChangesUntil applies it, while this script samples the CPU of
// the three processes of the pipeline (this one, the walsender, the target backends) from /proc
// and times the applier's awaits (waiting for the stream, for a COPY in flight, for a group
// commit). Variants (--variants, interleaved round by round) change one thing on the target:
//   as-is        the prepared tables as prepare leaves them;
//   no-audit     the write-audit trigger dropped from the target's tables (diagnostic only: what
//                the audit costs the apply; re-created afterwards by the real prepare);
//   serial       every group committed waiting for the target (commitPipelined as commitPending:
//                the applier before pipelined group commit).
// Diagnostic, not a figure: nothing is saved. Usage (the dev stack up, on the env's ports):
//   npx tsx bench/catchup-profile.ts [--rows 30000] [--rounds 3] [--write-seconds 8] [--workload 100-row] [--variants as-is,no-audit]
import fs from 'node:fs';
import os from 'node:os';
import type { Pool } from 'pg';
import { openPool } from '../lib/connections';
import { stackAt, stackConfig } from '../lib/dev/stack';
import { prepareShard } from '../lib/shard/prepare';
import { ChangeApplier } from '../lib/cdc/applier';
import { ReplicationStream } from '../lib/cdc/stream';
import { WRITE_AUDIT_TRIGGER } from '../lib/shard/write-audit';
import { SCHEMA, TABLES, createBenchData, dropBenchSchema } from './setup';
import { WORKLOADS, applyBacklog, pgbenchScript, runPgbench, setupCatchUp, teardownCatchUp } from './catchup';
import { log } from './measure';
import { cpuOf, sampleCpu as sampleProcCpu, TARGET_BACKENDS_SQL } from './proc-cpu';

require('../lib/quiet-warnings.js');

const arg = (n: string, d: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};

/** Milliseconds spent awaiting, per kind, while a round applies (a commit's own wait for its last COPY counts in both). */
const waits = { stream: 0, copy: 0, commit: 0 };
function timeAwaits(): void {
  const wrap = (proto: any, name: string, kind: keyof typeof waits) => {
    const orig = proto[name];
    proto[name] = async function (this: unknown, ...args: unknown[]) {
      const t0 = performance.now();
      try {
        return await orig.apply(this, args);
      } finally {
        waits[kind] += performance.now() - t0;
      }
    };
  };
  wrap(ReplicationStream.prototype, 'next', 'stream');
  wrap(ChangeApplier.prototype, 'settle', 'copy');
  wrap(ChangeApplier.prototype, 'commitPending', 'commit');
  wrap(ChangeApplier.prototype, 'commitPipelined', 'commit');
}

/** CPU seconds of the walsender (source) and the target's backends other than the sampler's, sampled every 100 ms. */
function sampleCpu(source: Pool, target: Pool): { stop: () => Promise<{ walsender: number; target: number }> } {
  return sampleProcCpu({
    walsender: { pool: source, sql: `select pid from pg_stat_replication where application_name = 'shardctl-apply'` },
    target: { pool: target, sql: TARGET_BACKENDS_SQL },
  });
}

/**
 * CPU seconds of the source's side while pgbench writes: its backends (application_name
 * bench-pgbench), the pgbench process itself, and the source server's WAL writer, checkpointer and
 * background writer (what the writes cost the machine, to set against the apply's CPU per row).
 */
function sampleSourceCpu(source: Pool): { stop: () => Promise<{ backends: number; pgbench: number; background: number }> } {
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  const role = new Map<number, 'backends' | 'pgbench' | 'background'>();
  const note = (pid: number, r: 'backends' | 'pgbench' | 'background') => {
    const c = cpuOf(pid);
    if (c === null) return;
    if (!first.has(pid)) first.set(pid, c);
    last.set(pid, c);
    role.set(pid, r);
  };
  let running = true;
  const loop = (async () => {
    while (running) {
      const r = await source.query<{ pid: number; bg: boolean }>(
        `select pid, backend_type <> 'client backend' as bg from pg_stat_activity
          where application_name = 'bench-pgbench' or backend_type in ('walwriter', 'checkpointer', 'background writer')`,
      );
      for (const { pid, bg } of r.rows) note(pid, bg ? 'background' : 'backends');
      for (const d of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(d)) continue;
        try {
          const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
          if (stat.includes('(pgbench)') && Number(stat.split(') ')[1].split(' ')[1]) === process.pid) note(Number(d), 'pgbench');
        } catch {
          // gone
        }
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      const sum = { backends: 0, pgbench: 0, background: 0 };
      for (const [pid, c] of last) sum[role.get(pid)!] += c - first.get(pid)!;
      return sum;
    },
  };
}

async function main() {
  const rows = Number(arg('rows', '30000'));
  const rounds = Number(arg('rounds', '3'));
  const writeSeconds = Number(arg('write-seconds', '8'));
  const workload = WORKLOADS.find((w) => w.startsWith(arg('workload', '100-row')))!;
  const variants = arg('variants', 'as-is,no-audit').split(',');
  timeAwaits();
  const pipelined = (ChangeApplier.prototype as any).commitPipelined;
  const config = stackConfig(stackAt(process.cwd()));
  const [a, b] = config.shards;
  const source = openPool(a.dsn, { applicationName: 'shardctl-bench', max: 6 });
  const target = openPool(b.dsn, { applicationName: 'shardctl-bench', max: 6 });
  const sampler = {
    source: openPool(a.dsn, { applicationName: 'bench-sampler', max: 1 }),
    target: openPool(b.dsn, { applicationName: 'bench-sampler', max: 1 }),
  };
  const tenant = 'bench-t';
  try {
    const data = await createBenchData({ source, target }, config, { tenant, neighbour: 'bench-neighbour', rows });
    const cu = {
      source,
      target,
      sourceDsn: a.dsn,
      tables: data.tables,
      tenant,
      tenantColumn: config.tenant.column,
      counts: data.counts,
      clients: 8,
      writeSeconds,
    };
    await setupCatchUp(cu);
    const benchConfig = { ...config, tenant: { ...config.tenant, schemas: [SCHEMA], tables: undefined } };
    const script = pgbenchScript(workload, tenant, data.counts);
    log(
      `${workload}, ${rows} rows, variants ${variants.join(' / ')}, ${rounds} rounds, load ${os
        .loadavg()
        .map((x) => x.toFixed(1))
        .join(' ')}`,
    );
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? variants : [...variants].reverse();
      for (const v of order) {
        const proto = ChangeApplier.prototype as any;
        proto.commitPipelined = v === 'serial' ? proto.commitPending : pipelined;
        if (v === 'no-audit') for (const t of TABLES) await target.query(`drop trigger if exists ${WRITE_AUDIT_TRIGGER} on ${SCHEMA}.${t}`);
        else await prepareShard(target, benchConfig);
        const src = sampleSourceCpu(sampler.source);
        const wr = await runPgbench(a.dsn, script, cu.clients, writeSeconds);
        const srcCpu = await src.stop();
        const rowsWritten = wr.transactions * (workload === '100-row statements' ? 100 : 1);
        const usw = (sec: number) => ((sec * 1e6) / rowsWritten).toFixed(1);
        for (const k of Object.keys(waits) as (keyof typeof waits)[]) waits[k] = 0;
        const cpu0 = process.cpuUsage();
        const s = sampleCpu(sampler.source, sampler.target);
        const ap = await applyBacklog(cu, wr.transactions, 60);
        const cpu = await s.stop();
        const self = process.cpuUsage(cpu0);
        const rowsApplied = ap.transactions * (workload === '100-row statements' ? 100 : 1);
        const us = (sec: number) => ((sec * 1e6) / rowsApplied).toFixed(1);
        log(
          `round ${r + 1} ${v.padEnd(9)} pgbench ${(wr.transactions / wr.seconds).toFixed(0)} tx/s, applied ${(ap.transactions / ap.seconds).toFixed(0)} tx/s: ` +
            `${((ap.transactions / ap.seconds / (wr.transactions / wr.seconds)) as number).toFixed(2)}x in ${ap.seconds.toFixed(1)} s; ` +
            `waits stream ${(waits.stream / 1000).toFixed(1)} s, copy ${(waits.copy / 1000).toFixed(1)} s, commit ${(waits.commit / 1000).toFixed(1)} s; ` +
            `CPU us/row: this ${us((self.user + self.system) / 1e6)}, walsender ${us(cpu.walsender)}, target ${us(cpu.target)} ` +
            `(sum ${us((self.user + self.system) / 1e6 + cpu.walsender + cpu.target)}); ` +
            `writing it: backends ${usw(srcCpu.backends)}, pgbench ${usw(srcCpu.pgbench)}, WAL/bg writers ${usw(srcCpu.background)} ` +
            `(sum ${usw(srcCpu.backends + srcCpu.pgbench + srcCpu.background)}); load ${os.loadavg()[0].toFixed(1)}`,
        );
      }
    }
    await prepareShard(target, benchConfig);
    await teardownCatchUp(cu);
  } finally {
    await dropBenchSchema([source, target]).catch(() => {});
    for (const p of [source, target, sampler.source, sampler.target]) await p.end();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
