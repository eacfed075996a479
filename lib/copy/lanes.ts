// How many of a unit's tables the copy runs at once. Pure (the move workflow imports it).
// Two, as PostgreSQL's own initial sync (max_sync_workers_per_subscription = 2): one table's
// COPY leaves a core idle on the source (reading) or the target (index maintenance) at any
// moment, and a second fills it; more only contend. The target writes in the replica session
// role, so foreign keys do not order the tables. A throttled copy (rows per second) runs one
// lane: the limit is per table copy, and two lanes would double it.
export const COPY_TABLE_LANES = 2;

/** Runs `work` over `items`, at most `lanes` at a time, in order of start; waits for every started one, then throws the first failure. */
export async function inLanes<T>(items: T[], lanes: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const failures: unknown[] = [];
  const lane = async () => {
    while (next < items.length && failures.length === 0) {
      const item = items[next++];
      try {
        await work(item);
      } catch (e) {
        failures.push(e);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(lanes, items.length)) }, lane));
  if (failures.length) throw failures[0];
}
