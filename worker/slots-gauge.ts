// Slot WAL retained, read at scrape time from every configured shard (pg_replication_slots), and
// the shard's max_slot_wal_keep_size beside it (what the retention alert compares against):
// a move's slot holds WAL from before its copy starts, through copy and validate when no
// catch-up round runs, so a reading taken only by catch-up would miss the growth the alert is
// for. Like moves by phase, it is the fleet's answer (every worker reports the same: aggregate
// with max); readings are reused for `cacheMs`, and a shard that does not answer within
// `timeoutMs` keeps its last readings (they expire with the other per-move series).
import type { Pool } from 'pg';
import type { Config } from '../lib/config';
import type { Metrics } from '../lib/obs/metrics';
import { shardctlSlotsRetainedBytes } from '../lib/cdc/publication';
import { walKeepLimitBytes } from '../lib/shard/replication-capacity';

export function slotRetentionRefresher(
  config: Pick<Config, 'shards'>,
  shardPool: (shard: string) => Pool,
  metrics: Metrics,
  opts: { cacheMs?: number; timeoutMs?: number } = {},
) {
  const cacheMs = opts.cacheMs ?? 5_000;
  const timeoutMs = opts.timeoutMs ?? 2_000;
  let last = 0;
  let inflight: Promise<void> | undefined;
  const readShard = async (shard: string) => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer from ${shard} within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      const [slots, limit] = await Promise.race([Promise.all([shardctlSlotsRetainedBytes(shardPool(shard)), walKeepLimitBytes(shardPool(shard))]), timeout]);
      // Replaced as a whole: a slot dropped since the last reading leaves the page with it.
      metrics.slotRetainedBytes.remove({ shard });
      for (const s of slots) metrics.slotRetainedBytes.set({ shard, slot: s.slot }, s.retainedBytes);
      if (limit === null) metrics.slotWalKeepLimitBytes.remove({ shard });
      else metrics.slotWalKeepLimitBytes.set({ shard }, limit);
    } catch {
      // Unreachable or slow: its last readings stay until they expire.
    } finally {
      clearTimeout(timer);
    }
  };
  const once = async () => {
    await Promise.all(config.shards.map((s) => readShard(s.name)));
    last = Date.now();
  };
  return {
    refresh(): Promise<void> {
      if (Date.now() - last < cacheMs) return Promise.resolve();
      return (inflight ??= once().finally(() => (inflight = undefined)));
    },
  };
}
