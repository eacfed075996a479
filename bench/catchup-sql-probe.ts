// Probe (issue 10): could the catch-up read the move's slot through the SQL interface
// (pg_logical_slot_peek_binary_changes in an ordinary backend, its rows sent as one binary COPY)
// instead of the replication protocol (a walsender sending one CopyData message, and flushing its
// socket, per change)? Per round, pgbench writes a backlog to the source, and one side drains it:
//   stream      applyChangesUntil, as the catch-up does today (bench/catchup.ts applyBacklog);
//   sql-decode  the SQL interface, decoded by lib/cdc/pgoutput.ts and not applied (the source side alone);
//   sql-apply   the SQL interface feeding the same ChangeApplier, each chunk committed on the target
//               with its progress row, then the slot advanced to what the target committed.
// The CPU of each process (the walsender or the peeking backend, the target's backends, this
// process) is read from /proc, as catchup-profile.ts does. With --live the drain runs while pgbench
// writes (as a live catch-up does) and is given its stop position once the writes end: each SQL call
// then reads up to the source's flushed position at the time. Diagnostic: nothing is saved.
//   npx tsx bench/catchup-sql-probe.ts [--rows 30000] [--rounds 3] [--write-seconds 8] [--workload 100-row]
//     [--sides stream,sql-decode,sql-apply] [--chunk 50000] [--live]
import os from 'node:os';
import { Client, type Pool } from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { openPool } from '../lib/connections';
import { stackAt, stackConfig } from '../lib/dev/stack';
import { sessionSettings } from '../lib/pg';
import { ChangeApplier } from '../lib/cdc/applier';
import { PgoutputDecoder } from '../lib/cdc/pgoutput';
import { readAppliedLsn } from '../lib/cdc/progress';
import { compareLsn, normalizeLsn } from '../lib/cdc/lsn';
import { applyChangesUntil, currentWalLsn } from '../lib/cdc';
import { RoundDeadline, groupFull } from '../lib/cdc/apply';
import { copyProgress } from '../lib/copy/checkpoint';
import { replicationNames } from '../lib/ids';
import { SCHEMA, TABLES, createBenchData, dropBenchSchema } from './setup';
import { WORKLOADS, applyBacklog, pgbenchScript, runPgbench, setupCatchUp, teardownCatchUp } from './catchup';
import { log } from './measure';
import { sampleCpu as sampleProcCpu, TARGET_BACKENDS_SQL } from './proc-cpu';

require('../lib/quiet-warnings.js');

const arg = (n: string, d: string) => {
  const i = process.argv.indexOf(`--${n}`);
  return i >= 0 ? process.argv[i + 1] : d;
};

const MOVE_ID = 'bench-catchup'; // bench/catchup.ts's
/** CPU seconds of the source side (the walsender, or the backend named `sourceApp`) and the target's client backends, sampled every 100 ms. */
function sampleCpu(source: Pool, target: Pool, sourceApp: string): { stop: () => Promise<{ source: number; target: number }> } {
  return sampleProcCpu({
    source: { pool: source, sql: 'select pid from pg_stat_activity where application_name = $1', params: [sourceApp] },
    target: { pool: target, sql: TARGET_BACKENDS_SQL },
  });
}

const COPY_SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');

/**
 * Parses a binary COPY of one bytea column (pgoutput messages) chunk by chunk, handing each
 * message's bytes (a view, not a copy) to `each`.
 */
class BinaryCopyRows {
  private rest: Buffer | null = null;
  private headerDone = false;
  ended = false;
  constructor(private readonly each: (msg: Buffer) => void) {}
  push(chunk: Buffer): void {
    let buf = this.rest ? Buffer.concat([this.rest, chunk]) : chunk;
    this.rest = null;
    let off = 0;
    if (!this.headerDone) {
      if (buf.length < 19) {
        this.rest = buf;
        return;
      }
      if (!buf.subarray(0, 11).equals(COPY_SIGNATURE)) throw new Error('not a binary COPY');
      off = 19 + buf.readUInt32BE(15);
      this.headerDone = true;
    }
    const len = buf.length;
    while (off + 2 <= len) {
      const fields = buf.readInt16BE(off);
      if (fields === -1) {
        this.ended = true;
        off += 2;
        break;
      }
      if (fields !== 1) throw new Error(`binary COPY row of ${fields} fields`);
      if (off + 6 > len) break;
      const size = buf.readInt32BE(off + 2);
      if (size < 0) throw new Error('null pgoutput message');
      if (off + 6 + size > len) break;
      this.each(buf.subarray(off + 6, off + 6 + size));
      off += 6 + size;
    }
    if (off < len) this.rest = buf.subarray(off);
    buf = undefined as unknown as Buffer;
  }
}

const PEEK_APP = 'shardctl-sql-peek';

/**
 * One chunk of the slot's changes from its confirmed position, at most `chunk` changes (whole
 * transactions) up to `untilLsn`, through the SQL interface as a binary COPY: each arriving piece's
 * messages are decoded and handed to `each` in order (awaited: the COPY is read no faster than they
 * are applied). Returns the messages read.
 */
async function peekChunk(
  c: Client,
  slot: string,
  publication: string,
  untilLsn: string,
  chunk: number,
  decoder: PgoutputDecoder,
  each: (ms: ReturnType<PgoutputDecoder['decode']>[]) => Promise<void> | void,
  silence?: { maxMs: number },
): Promise<number> {
  let n = 0;
  const t0 = performance.now();
  let first = true;
  let batch: ReturnType<PgoutputDecoder['decode']>[] = [];
  const parser = new BinaryCopyRows((b) => {
    n++;
    batch.push(decoder.decode(b));
  });
  const sql =
    `COPY (SELECT data FROM pg_logical_slot_peek_binary_changes('${slot}', '${untilLsn}'::pg_lsn, ${chunk}, ` +
    `'proto_version', '1', 'publication_names', '${publication}', 'messages', 'true')) TO STDOUT (FORMAT binary)`;
  const out = c.query(copyTo(sql));
  for await (const ch of out) {
    if (first && silence) silence.maxMs = Math.max(silence.maxMs, performance.now() - t0);
    first = false;
    parser.push(ch as Buffer);
    if (batch.length) {
      const ms = batch;
      batch = [];
      await each(ms);
    }
  }
  if (!parser.ended) throw new Error('binary COPY ended without its trailer');
  return n;
}

async function sqlSession(dsn: string): Promise<Client> {
  const c = new Client({
    ...sessionSettings(dsn, { applicationName: PEEK_APP }),
    options: '-c datestyle=ISO -c intervalstyle=postgres -c extra_float_digits=3',
  } as any);
  await c.connect();
  return c;
}

/** Decodes the slot to untilLsn through the SQL interface, not applying; advances the slot chunk by chunk. */
async function sqlDecode(dsn: string, slot: string, publication: string, untilLsn: string, chunk: number) {
  const c = await sqlSession(dsn);
  const stats = { transactions: 0, changes: 0, calls: 0, redecodeMb: 0, silence: { maxMs: 0 } };
  try {
    for (;;) {
      const decoder = new PgoutputDecoder();
      let lastEnd: string | null = null;
      const r = await c.query(`select pg_wal_lsn_diff(confirmed_flush_lsn, restart_lsn) as d from pg_replication_slots where slot_name = $1`, [slot]);
      stats.redecodeMb += Number(r.rows[0].d) / 1e6;
      const n = await peekChunk(
        c,
        slot,
        publication,
        untilLsn,
        chunk,
        decoder,
        (ms) => {
          for (const m of ms) {
            if (m.tag === 'commit') {
              lastEnd = m.endLsn;
              stats.transactions++;
            } else if (m.tag === 'insert') {
              stats.changes++;
              m.raw!.lacksAny([0]); // touch the tuple as the applier's key check does
            }
          }
        },
        stats.silence,
      );
      stats.calls++;
      if (n === 0 || lastEnd === null) break;
      await c.query(`select pg_replication_slot_advance($1, $2::pg_lsn)`, [slot, lastEnd]);
      if (compareLsn(lastEnd, untilLsn) >= 0) break;
    }
  } finally {
    await c.end();
  }
  return stats;
}

/**
 * Applies the slot through the SQL interface with the catch-up's ChangeApplier, to `until` (or,
 * live, to the position `until()` gives once the writes end): source transactions are grouped and
 * committed on the target with their progress row as applyChangesUntil does (a full group
 * pipelined), a call's last group committed when the call ends, and only then is the slot
 * advanced, to that commit's end. A probe: no apply lock, no receive deadline, no crash handling.
 */
async function sqlApply(dsn: string, target: Pool, slot: string, publication: string, until: string | (() => string | null), chunk: number) {
  const c = await sqlSession(dsn);
  const t = await target.connect();
  const stats = { transactions: 0, calls: 0, redecodeMb: 0, silence: { maxMs: 0 } };
  try {
    const stored = await readAppliedLsn(t, MOVE_ID, 'forward');
    const safeAfter = new Map<string, string>();
    for (const p of await copyProgress(t, MOVE_ID)) if (p.done && p.doneAtLsn) safeAfter.set(p.table, p.doneAtLsn);
    const a = new ChangeApplier(t, MOVE_ID, 'forward', stored ? normalizeLsn(stored) : null, 30_000, {
      safeAfter,
      client: t,
      timeoutMs: 30_000,
      refuse: () => {},
    });
    for (;;) {
      // Live (--live): while the writes go on, each call reads up to the source's flushed position then.
      const final = typeof until === 'string' ? until : until();
      const untilLsn = final ?? (await c.query<{ l: string }>('select pg_current_wal_flush_lsn()::text as l')).rows[0].l;
      const decoder = new PgoutputDecoder();
      const before = a.stats.transactionsApplied;
      const r = await c.query(`select pg_wal_lsn_diff(confirmed_flush_lsn, restart_lsn) as d from pg_replication_slots where slot_name = $1`, [slot]);
      stats.redecodeMb += Number(r.rows[0].d) / 1e6;
      let lastCommitMs = 0;
      const n = await peekChunk(
        c,
        slot,
        publication,
        untilLsn,
        chunk,
        decoder,
        async (ms) => {
          let i = 0;
          for (const m of ms) {
            if (++i % 256 === 0) await new Promise((res) => setImmediate(res));
            switch (m.tag) {
              case 'begin':
                await a.begin(m.finalLsn);
                break;
              case 'commit': {
                await a.commit(m.endLsn);
                // Group commit as applyChangesUntil does: a full group is pipelined.
                if (groupFull(a, lastCommitMs)) {
                  const t0 = Date.now();
                  if (await a.commitPipelined()) lastCommitMs = Date.now() - t0;
                }
                break;
              }
              case 'relation':
                await a.relationChanged(m.relation);
                break;
              case 'insert':
                if (!a.applyInsertNow(m)) await a.apply(m);
                break;
              case 'update':
              case 'delete':
              case 'truncate':
                await a.apply(m);
                break;
              default:
                break;
            }
          }
        },
        stats.silence,
      );
      stats.calls++;
      if (n === 0) {
        if (final !== null) break;
        await new Promise((res) => setTimeout(res, 200));
        continue;
      }
      await a.commitPending();
      stats.transactions += a.stats.transactionsApplied - before;
      if (a.applied === null) break;
      await c.query(`select pg_replication_slot_advance($1, $2::pg_lsn)`, [slot, a.applied]);
      if (final !== null && compareLsn(a.applied, final) >= 0) break;
    }
  } finally {
    t.release();
    await c.end();
  }
  return stats;
}

async function main() {
  const rows = Number(arg('rows', '30000'));
  const rounds = Number(arg('rounds', '3'));
  const writeSeconds = Number(arg('write-seconds', '8'));
  const chunk = Number(arg('chunk', '50000'));
  const workload = WORKLOADS.find((w) => w.startsWith(arg('workload', '100-row')))!;
  const sides = arg('sides', 'stream,sql-decode,sql-apply').split(',');
  const live = process.argv.includes('--live');
  if (live && sides.includes('sql-decode')) throw new Error('--live: stream and sql-apply only');
  const config = stackConfig(stackAt(process.cwd()));
  const [a, b] = config.shards;
  const source = openPool(a.dsn, { applicationName: 'shardctl-bench', max: 6 });
  const target = openPool(b.dsn, { applicationName: 'shardctl-bench', max: 6 });
  const sampler = {
    source: openPool(a.dsn, { applicationName: 'bench-sampler', max: 1 }),
    target: openPool(b.dsn, { applicationName: 'bench-sampler', max: 1 }),
  };
  const tenant = 'bench-t';
  const { slot, publication } = replicationNames(MOVE_ID, 'forward');
  const perTx = workload === '100-row statements' ? 100 : 1;
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
    const script = pgbenchScript(workload, tenant, data.counts);
    log(
      `${workload}, ${rows} rows, sides ${sides.join(' / ')}, chunk ${chunk}, ${rounds} rounds, load ${os
        .loadavg()
        .map((x) => x.toFixed(1))
        .join(' ')}`,
    );
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? sides : [...sides].reverse();
      for (const side of order) {
        const lag = await source.query(`select pg_wal_lsn_diff(confirmed_flush_lsn, restart_lsn) as d from pg_replication_slots where slot_name = $1`, [slot]);
        let at = `restart_lsn ${(Number(lag.rows[0].d) / 1e6).toFixed(0)} MB behind`;
        let final: string | null = null;
        let drainStart = 0;
        let txs = 0;
        let extra = '';
        let wr: { transactions: number; seconds: number };
        const cpu0 = process.cpuUsage();
        let s = live ? sampleCpu(sampler.source, sampler.target, side === 'stream' ? 'shardctl-apply' : PEEK_APP) : null;
        const sqlStats = (st: Awaited<ReturnType<typeof sqlDecode>> | Awaited<ReturnType<typeof sqlApply>>) =>
          `, ${st.calls} calls re-reading ${st.redecodeMb.toFixed(0)} MB from restart_lsn, longest wait for a call's first row ${st.silence.maxMs.toFixed(0)} ms`;
        if (live) {
          // The apply runs while pgbench writes, as a live catch-up does; its stop position is given once the writes end.
          drainStart = performance.now();
          const deadline = new RoundDeadline(300_000);
          const drain: Promise<number> =
            side === 'stream'
              ? applyChangesUntil({ sourceDsn: a.dsn, target, slot, publication, moveId: MOVE_ID, stream: 'forward', maxDurationMs: 300_000, deadline }).then(
                  (v) => v.transactionsApplied,
                )
              : sqlApply(a.dsn, target, slot, publication, () => final, chunk).then((st) => {
                  extra = sqlStats(st);
                  return st.transactions;
                });
          drain.catch(() => {});
          wr = await runPgbench(a.dsn, script, cu.clients, writeSeconds);
          final = await currentWalLsn(source);
          deadline.untilLsn = final;
          const wroteAt = performance.now();
          txs = await drain;
          extra += `, finished ${((performance.now() - wroteAt) / 1000).toFixed(1)} s after the writes`;
        } else {
          wr = await runPgbench(a.dsn, script, cu.clients, writeSeconds);
          const untilLsn = await currentWalLsn(source);
          const b = await source.query(`select pg_wal_lsn_diff($2::pg_lsn, confirmed_flush_lsn) as b from pg_replication_slots where slot_name = $1`, [
            slot,
            untilLsn,
          ]);
          at += `, backlog ${(Number(b.rows[0].b) / 1e6).toFixed(0)} MB`;
          s = sampleCpu(sampler.source, sampler.target, side === 'stream' ? 'shardctl-apply' : PEEK_APP);
          Object.assign(cpu0, process.cpuUsage());
          drainStart = performance.now();
          if (side === 'stream') {
            txs = (await applyBacklog(cu, wr.transactions, 60)).transactions;
          } else if (side === 'sql-decode') {
            const st = await sqlDecode(a.dsn, slot, publication, untilLsn, chunk);
            txs = st.transactions;
            extra = sqlStats(st);
          } else {
            const st = await sqlApply(a.dsn, target, slot, publication, untilLsn, chunk);
            txs = st.transactions;
            extra = sqlStats(st);
          }
        }
        const rowsWritten = wr.transactions * perTx;
        const t0 = drainStart;
        const seconds = (performance.now() - t0) / 1000;
        const cpu = await s!.stop();
        const self = process.cpuUsage(cpu0);
        const rowsDone = txs * perTx;
        const us = (sec: number) => ((sec * 1e6) / rowsDone).toFixed(1);
        const selfSec = (self.user + self.system) / 1e6;
        log(
          `round ${r + 1} ${side.padEnd(10)} pgbench ${(wr.transactions / wr.seconds).toFixed(0)} tx/s (${rowsWritten} rows), ` +
            `drained ${txs} tx at ${(txs / seconds).toFixed(0)} tx/s: ${(txs / seconds / (wr.transactions / wr.seconds)).toFixed(2)}x in ${seconds.toFixed(1)} s; ` +
            `CPU us/row: this ${us(selfSec)}, source ${us(cpu.source)}, target ${us(cpu.target)} (sum ${us(selfSec + cpu.source + cpu.target)}); ${at}${extra}; load ${os.loadavg()[0].toFixed(1)}`,
        );
      }
    }
    if (!sides.includes('sql-decode')) {
      // Every side applied its backlog: the target's copy of the tenant must be the source's, row for row.
      for (const t of TABLES) {
        const q = `select count(*)::bigint as n, coalesce(sum(hashtext(x::text)::bigint), 0)::text as h from ${SCHEMA}.${t} x where tenant_id = $1`;
        const [sr, tr] = await Promise.all([source.query(q, [tenant]), target.query(q, [tenant])]);
        const same = sr.rows[0].n === tr.rows[0].n && sr.rows[0].h === tr.rows[0].h;
        log(`${t}: source ${sr.rows[0].n} rows, target ${tr.rows[0].n} rows, ${same ? 'the same' : 'DIFFERENT'}`);
        if (!same) process.exitCode = 1;
      }
    }
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
