// CPU time of processes on this machine, from /proc: what the catch-up probes use to say where a
// row's CPU goes (bench/catchup-profile.ts, bench/catchup-sql-probe.ts, bench/catchup-native.ts).
import fs from 'node:fs';
import type { Pool } from 'pg';

const TICK = 100; // USER_HZ

/** CPU seconds (user + system) a process has used so far; null when it is gone or unreadable. */
export function cpuOf(pid: number | null | undefined): number | null {
  if (!pid) return null;
  try {
    const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) / TICK;
  } catch {
    return null;
  }
}

/** Which backends make up one side: the pids `sql` returns on `pool`. */
export interface CpuSide {
  pool: Pool;
  sql: string;
  params?: unknown[];
}

/**
 * CPU seconds used by each side's processes while the sampler runs, sampled every 100 ms (a
 * process is counted from the first sample that sees it to the last).
 */
export function sampleCpu<K extends string>(sides: Record<K, CpuSide>): { stop: () => Promise<Record<K, number>> } {
  const names = Object.keys(sides) as K[];
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  const role = new Map<number, K>();
  let running = true;
  const loop = (async () => {
    while (running) {
      const found = await Promise.all(names.map((k) => sides[k].pool.query<{ pid: number }>(sides[k].sql, sides[k].params)));
      names.forEach((k, i) => {
        for (const { pid } of found[i].rows) {
          const c = cpuOf(pid);
          if (c === null) continue;
          if (!first.has(pid)) first.set(pid, c);
          last.set(pid, c);
          role.set(pid, k);
        }
      });
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      const sum = Object.fromEntries(names.map((k) => [k, 0])) as Record<K, number>;
      for (const [pid, c] of last) sum[role.get(pid)!] += c - first.get(pid)!;
      return sum;
    },
  };
}

/** The target's client backends other than the sampler's own. */
export const TARGET_BACKENDS_SQL = `select pid from pg_stat_activity where datname = current_database() and backend_type = 'client backend' and pid <> pg_backend_pid()`;
