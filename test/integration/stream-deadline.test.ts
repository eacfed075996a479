// A catch-up round on a half-open link (issue 14, F2): toxiproxy blackholes the worker's path to
// the source (or to the target) mid-apply, so bytes vanish and no RST ever comes. The round must
// give up while the cut lasts (receive deadline, bounded connect, bounded apply statements) with
// a retryable error naming the shard, never its DSN; the next round resumes from the target's
// progress row and every change reaches the target exactly once (an ALWAYS trigger counts them).
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import path from 'node:path';
import type { Pool } from 'pg';
import { testConfig, uniq, shardPool, closePools } from '../helpers/stack';
import { NetLab, Link } from '../helpers/proxy';
import { shardByName } from '../../lib/config';
import { openPool } from '../../lib/connections';
import { sleep } from '../../lib/dev/proc';
import { applyChangesUntil, currentWalLsn, dropPublicationAndSlot, ensurePublicationAndSlot, ApplyChangesOptions, ApplyResult } from '../../lib/cdc';

const source = shardPool('shard-a');
const target = shardPool('shard-b');
const sourceDsn = shardByName(testConfig(), 'shard-a').dsn;

const P = uniq('sdl').replace(/-/g, '_');
const S = P;
const Q = `${S}.events`;
const tenant = uniq('ten');
const moveIds: string[] = [];
const slots: { publication: string; slot: string }[] = [];

/** How long each cut lasts: the round must fail inside it, not at the heal that closes the connection. */
const CUT_MS = 20_000;
/** The receive deadline and apply statement bound these rounds run with (production defaults are longer). */
const DEADLINE_MS = 3000;

let lab: NetLab;
let viaSource: { dsn: string; link: Link };
let viaTarget: { pool: Pool; link: Link };

beforeAll(async () => {
  lab = await NetLab.start(path.join(__dirname, '..', '..', 'test-results', 'network', 'stream-deadline'));
  const s = await lab.configFor(`sdl-src-${process.pid}`, ['shard-a']);
  viaSource = { dsn: shardByName(s.config, 'shard-a').dsn, link: s.links['shard-a'] };
  const t = await lab.configFor(`sdl-tgt-${process.pid}`, ['shard-b']);
  viaTarget = { pool: openPool(shardByName(t.config, 'shard-b').dsn, { max: 4 }), link: t.links['shard-b'] };
  const ddl = `create schema ${S}; create table ${Q} (tenant_id text not null, seq int not null, payload text, primary key (tenant_id, seq));`;
  await source.query(ddl);
  // On the target only: every row the apply writes is logged, so a change applied twice shows.
  await target.query(`${ddl}
    create table ${S}.applylog (seq int not null, op text not null);
    create function ${S}.log() returns trigger language plpgsql as $$
      begin insert into ${S}.applylog values (new.seq, tg_op); return new; end $$;
    create trigger applylog after insert or update on ${Q} for each row execute function ${S}.log();
    alter table ${Q} enable always trigger applylog;`);
}, 600_000);

afterAll(async () => {
  await lab?.healAll().catch(() => {});
  for (const s of slots) await dropPublicationAndSlot(source, s).catch(() => {});
  await source.query(`drop schema if exists ${S} cascade`).catch(() => {});
  await target.query(`drop schema if exists ${S} cascade`).catch(() => {});
  await target.query('delete from shardctl.move_progress where move_id = any($1)', [moveIds]).catch(() => {});
  await viaTarget?.pool.end().catch(() => {});
  await closePools();
  await lab?.close({ stopServer: true });
});

/** A move of its own: publication and slot on the tenant, one per test (a failed round leaves its walsender to the server). */
async function newMove(): Promise<Pick<ApplyChangesOptions, 'moveId' | 'slot' | 'publication' | 'stream'>> {
  const moveId = uniq('move-sdl');
  const n = slots.length;
  const names = { publication: `${P}_pub${n}`, slot: `${P}_slot${n}` };
  moveIds.push(moveId);
  slots.push(names);
  await ensurePublicationAndSlot(source, { ...names, tables: [{ schema: S, name: 'events' }], tenantColumn: 'tenant_id', unit: tenant });
  return { moveId, ...names, stream: 'forward' };
}

let nextSeq = 0;
/** `n` one-row source transactions of the tenant; returns their seqs. */
async function write(n: number): Promise<number[]> {
  const seqs: number[] = [];
  for (let i = 0; i < n; i++) {
    const seq = nextSeq++;
    await source.query(`insert into ${Q} values ($1, $2, $3)`, [tenant, seq, `event ${seq}`]);
    seqs.push(seq);
  }
  return seqs;
}

async function applications(seqs: number[]): Promise<Map<number, number>> {
  const r = await target.query(`select seq, count(*)::int as n from ${S}.applylog where seq = any($1::int[]) group by seq`, [seqs]);
  return new Map(r.rows.map((x: { seq: number; n: number }) => [x.seq, x.n]));
}

async function waitApplied(seqs: number[], atLeast: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  while ((await applications(seqs)).size < atLeast) {
    if (Date.now() > deadline) throw new Error(`fewer than ${atLeast} rows applied within 60 s`);
    await sleep(50);
  }
}

type Settled = { ok: true; value: ApplyResult } | { ok: false; error: any };
const settle = (p: Promise<ApplyResult>): Promise<Settled> =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (error) => ({ ok: false as const, error }),
  );

/**
 * Cuts `link` for CUT_MS while `round` runs (blackhole: connections hang open), then heals it.
 * Returns how the round ended and, if it ended during the cut, how long after the cut.
 */
async function cutDuring(link: Link, running: Promise<Settled> | (() => Promise<Settled>)): Promise<{ outcome: Settled; endedInCutAfterMs: number | null }> {
  let endedAt: number | null = null;
  await link.blackhole();
  const cutAt = Date.now();
  const round = typeof running === 'function' ? running() : running; // a function: the round starts inside the cut
  void round.then(() => (endedAt = Date.now()));
  while (endedAt === null && Date.now() - cutAt < CUT_MS) await sleep(100);
  const endedInCutAfterMs = endedAt === null ? null : endedAt - cutAt;
  await link.heal();
  // Healing closes the cut connections: a round that noticed nothing fails now, at the latest.
  const outcome = await Promise.race([
    round,
    sleep(60_000).then((): Settled => ({ ok: false, error: new Error('the round did not end within 60 s of the heal') })),
  ]);
  return { outcome, endedInCutAfterMs };
}

function expectShardUnavailable(outcome: Settled, shard: string, dsn: string) {
  expect(outcome.ok, 'the round failed').toBe(false);
  const e = (outcome as { error: any }).error;
  console.log(`stream-deadline: the round's error: ${String(e?.message)}`);
  expect(e?.type, String(e?.message)).toBe('Unavailable');
  expect(e.retriable).toBe(true);
  expect(e.message).toContain(shard);
  expect(e.message).not.toContain(dsn);
  expect(e.message).not.toMatch(/postgres(ql)?:\/\//);
}

/** Applies everything the source has written, directly (no proxy), and checks each row reached the target exactly once. */
async function expectResumedOnce(move: Awaited<ReturnType<typeof newMove>>, seqs: number[]) {
  const r = await applyChangesUntil({ sourceDsn, target, ...move, untilLsn: await currentWalLsn(source), maxDurationMs: 60_000 });
  expect(r.stopReason).toBe('until');
  const apps = await applications(seqs);
  expect(apps.size, 'rows on the target').toBe(seqs.length);
  expect(
    [...apps].filter(([, n]) => n !== 1),
    'rows applied more than once',
  ).toEqual([]);
  const q = `select seq, payload from ${Q} where tenant_id = $1 and seq = any($2::int[]) order by seq`;
  expect((await target.query(q, [tenant, seqs])).rows).toEqual((await source.query(q, [tenant, seqs])).rows);
}

describe('catch-up on a half-open link', () => {
  it(
    'a blackholed replication stream fails the round within the receive deadline, naming the shard; the next round applies every change once',
    { timeout: 180_000 },
    async () => {
      const move = await newMove();
      const seqs = await write(300);
      // Throttled: the backlog sits in the stream's queue, so the loop is busy and sends no pings of its own.
      const round = settle(
        applyChangesUntil({
          sourceDsn: viaSource.dsn,
          sourceName: 'shard-a',
          target,
          ...move,
          maxDurationMs: 120_000,
          rowsPerSecond: 40,
          receiveTimeoutMs: DEADLINE_MS,
        }),
      );
      await waitApplied(seqs, 40);
      const during = write(20); // acked on the source while the worker cannot see it
      const { outcome, endedInCutAfterMs } = await cutDuring(viaSource.link, round);
      seqs.push(...(await during));
      console.log(`stream-deadline: the round ended ${endedInCutAfterMs ?? 'only after the heal, not'} ms into the ${CUT_MS / 1000} s cut`);
      expect(endedInCutAfterMs, 'ms into the cut when the round gave up (null: not before the heal)').not.toBeNull();
      expectShardUnavailable(outcome, 'shard-a', viaSource.dsn);
      // The stream's own deadline, not a control statement's bound after the queued backlog was applied.
      expect((outcome as { error: Error }).error.message).toMatch(/replication stream from shard-a received nothing/);
      expect((await applications(seqs)).size, 'the cut landed mid-apply').toBeLessThan(seqs.length);
      seqs.push(...(await write(10)));
      await expectResumedOnce(move, seqs);
    },
  );

  it('a round that starts on a blackholed source link fails within the connect bound', { timeout: 180_000 }, async () => {
    const move = await newMove();
    const seqs = await write(20);
    const { outcome, endedInCutAfterMs } = await cutDuring(viaSource.link, () =>
      settle(applyChangesUntil({ sourceDsn: viaSource.dsn, sourceName: 'shard-a', target, ...move, maxDurationMs: 60_000, receiveTimeoutMs: DEADLINE_MS })),
    );
    console.log(`stream-deadline: the connecting round ended ${endedInCutAfterMs ?? 'only after the heal, not'} ms into the cut`);
    expect(endedInCutAfterMs, 'ms into the cut when the round gave up (null: not before the heal)').not.toBeNull();
    expectShardUnavailable(outcome, 'shard-a', viaSource.dsn);
    await expectResumedOnce(move, seqs);
  });

  it('a blackholed target fails the round within the apply statement bound, naming the shard; nothing is applied twice', { timeout: 180_000 }, async () => {
    const move = await newMove();
    const seqs = await write(300);
    const round = settle(
      applyChangesUntil({
        sourceDsn,
        target: viaTarget.pool,
        targetName: 'shard-b',
        ...move,
        maxDurationMs: 120_000,
        rowsPerSecond: 40,
        applyQueryTimeoutMs: DEADLINE_MS,
      }),
    );
    await waitApplied(seqs, 40);
    const { outcome, endedInCutAfterMs } = await cutDuring(viaTarget.link, round);
    console.log(`stream-deadline: the blocked apply ended ${endedInCutAfterMs ?? 'only after the heal, not'} ms into the ${CUT_MS / 1000} s cut`);
    expect(endedInCutAfterMs, 'ms into the cut when the round gave up (null: not before the heal)').not.toBeNull();
    expectShardUnavailable(outcome, 'shard-b', shardByName(testConfig(), 'shard-b').dsn);
    await expectResumedOnce(move, seqs);
  });

  it('a healthy stream with nothing to send for longer than the deadline is kept, not given up', { timeout: 120_000 }, async () => {
    const move = await newMove();
    const seqs = await write(120);
    // 120 rows at 30 rows/s: ~4 s with the whole backlog queued and the walsender silent, longer than the deadline.
    const r = await applyChangesUntil({
      sourceDsn: viaSource.dsn,
      sourceName: 'shard-a',
      target,
      ...move,
      untilLsn: await currentWalLsn(source),
      maxDurationMs: 60_000,
      rowsPerSecond: 30,
      receiveTimeoutMs: 1500,
    });
    expect(r.stopReason).toBe('until');
    expect((await applications(seqs)).size).toBe(seqs.length);
  });
});
