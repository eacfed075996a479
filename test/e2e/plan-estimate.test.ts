// `move plan` estimates a move from what earlier moves measured, on the real stack: each table's
// bytes (rows × the mean size of a sample), and the copy's duration from the `move.copied` audit
// entries real moves wrote (rows, the COPY bytes their table copies committed, wall time); a
// throttled copy's entry is left out (it measures its throttle). Before any measured copy it says
// there is no estimate. Isolation: a fleet of its own (test/helpers/fleet.ts: its own directory,
// so only this file's moves are in its audit log); the CLI runs on the fleet's config.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import { ownFleet, type Fleet } from '../helpers/fleet';
import { closePools } from '../helpers/stack';
import { runCli, configFile } from '../helpers/cli';
import * as H from '../helpers/move';
import { readAudit } from '../../lib/directory/audit';
import { completedActivityResults } from '../helpers/backlog';
import { estimateCopy } from '../../lib/move-progress';

let fleet: Fleet;
let cfg: { file: string; remove: () => void };
beforeAll(async () => {
  fleet = await ownFleet('plest');
  cfg = configFile({ ...fleet.config, temporal: { ...fleet.config.temporal, taskQueue: fleet.tq } });
}, 120_000);
afterAll(async () => {
  cfg?.remove();
  await fleet?.close();
  await closePools();
});

const plan = async (tenant: string) => {
  const r = await runCli(['--config', cfg.file, 'move', 'plan', '--tenant', tenant, '--to', 'shard-b', '--json']);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
};

/** Runs a whole move of `tenant` to shard-b on the fleet's worker; returns its `move.copied` audit detail. */
async function moveAndMeasure(tenant: string, rowsPerSecond: number) {
  const h = await H.startMove(fleet.t.client, fleet.tq, H.moveInput(tenant, 'shard-b', { rowsPerSecond, soakSeconds: 1 }));
  const done = await H.waitPhase(h, 'done', 180_000);
  const entries = (await readAudit(fleet.directory, { sinceMs: 3_600_000, unit: tenant, limit: 100 })).entries.filter((e) => e.action === 'move.copied');
  expect(entries).toHaveLength(1);
  return { done, detail: entries[0].detail as Record<string, any>, copies: await completedActivityResults(h, 'copyTable') };
}

describe('move plan estimates from measured copies', () => {
  it(
    "estimates each table's bytes, and the copy's duration from an earlier move's measured copy only once one ran unthrottled",
    { timeout: 420_000 },
    async () => {
      const next = await fleet.tenant('shard-a', { rows: 300, blobs: 2, prefix: 'plest' });
      const before = await plan(next);
      expect(before.ok).toBe(true);
      expect(before.copyEstimate).toEqual({ seconds: null, rowsPerSecond: null, bytesPerSecond: null, fromMoves: 0 });
      // documents carry bodies of kilobytes: their estimate is far above the narrow accounts'.
      const bytesOf = (p: any, t: string) => p.tables.find((x: any) => x.table === t).bytesEstimated;
      expect(bytesOf(before, 'public.documents')).toBeGreaterThan(10 * bytesOf(before, 'public.accounts'));

      // A throttled move: its copy is recorded, marked with its throttle, and not used.
      const slow = await fleet.tenant('shard-a', { rows: 100, prefix: 'plest' });
      const throttled = await moveAndMeasure(slow, 500);
      expect(throttled.detail.rowsPerSecond).toBe(500);
      expect((await plan(next)).copyEstimate.fromMoves).toBe(0);

      // An unthrottled move: its entry holds the rows and the COPY bytes its checkpoints committed.
      const first = await fleet.tenant('shard-a', { rows: 400, blobs: 2, prefix: 'plest' });
      const planned = await plan(first);
      const measured = await moveAndMeasure(first, 0);
      const m = measured.detail;
      expect(m.rowsPerSecond).toBe(0);
      expect(m.seconds).toBeGreaterThan(0);
      expect(m.rows).toBe(measured.done.tables.reduce((n, t) => n + t.rowsCopied, 0));
      expect(m.rows).toBe(planned.tables.reduce((n: number, t: any) => n + t.rowsEstimated, 0));
      // Each table's copy reported its committed COPY bytes (its checkpoint's): their sum is recorded.
      expect(measured.copies.map((c) => c.table).sort()).toEqual(planned.tables.map((t: any) => t.table).sort());
      expect(m.bytes).toBe(measured.copies.reduce((n, c) => n + Number(c.bytesCopied), 0));
      expect(m.bytes).toBeGreaterThan(0);
      // The sampled estimate is of the same order as what the copy streamed.
      const estimated = planned.tables.reduce((n: number, t: any) => n + t.bytesEstimated, 0);
      expect(estimated).toBeGreaterThan(m.bytes / 4);
      expect(estimated).toBeLessThan(m.bytes * 4);

      // The next plan's duration comes from that one measured copy, at its rates.
      const after = await plan(next);
      const total = {
        rows: after.tables.reduce((n: number, t: any) => n + t.rowsEstimated, 0),
        bytes: after.tables.reduce((n: number, t: any) => n + t.bytesEstimated, 0),
      };
      expect(after.copyEstimate).toEqual(
        estimateCopy(total, { moves: 1, rows: m.rows, bytes: m.bytes, seconds: m.seconds }, fleet.config.limits.rowsPerSecond),
      );
      expect(after.copyEstimate.fromMoves).toBe(1);
      expect(after.copyEstimate.seconds).toBeGreaterThan(0);
      const text = await runCli(['--config', cfg.file, 'move', 'plan', '--tenant', next, '--to', 'shard-b']);
      expect(text.stdout).toContain(`copy ≈ `);
      expect(text.stdout).toContain(`(measured by 1 earlier move(s): ${after.copyEstimate.rowsPerSecond} rows/s, `);
      expect(text.stdout).toMatch(/copy public\.documents +\d+ rows, ≈ [\d.]+ (k|M)B/);
    },
  );
});
