// Validation under repeated connection cuts (issue 14): toxiproxy closes each source connection
// after a few KiB, so no session lives through a whole comparison. A range cut by a connection
// error is redone on new sessions (a bounded number of times), other errors end the comparison at
// once, and the ranges found equal are recorded so the next attempt compares only the rest. The
// activity records them in its heartbeat with its delta token and resumes only under that token:
// a difference that appears in a range after it was recorded equal is still found before the
// switch, by the cutover's delta check.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import path from 'node:path';
import type { Pool } from 'pg';
import { closePools, shardPool, uniq } from '../helpers/stack';
import { NetLab, Link } from '../helpers/proxy';
import { runAsAttempt } from '../helpers/activity-context';
import * as H from '../helpers/move';
import { shardByName } from '../../lib/config';
import { openPool } from '../../lib/connections';
import { listTenantTables, quoteIdent, TenantTable } from '../../lib/shard/tables';
import { compareTenantRows, type CompareInput, type EqualRanges, type RangeEvent } from '../../lib/validate';
import { DEFAULT_RANGE_RECONNECTS } from '../../lib/validate/compare';
import { recordedValidation, rowsIn } from '../../lib/validate/progress';
import { readValidated, startDelta } from '../../lib/cdc/delta';
import { isConnectionError } from '../../lib/directory/db';
import { createDeps, type Deps } from '../../activities/deps';
import { createActivities, type Activities } from '../../activities';

const SCHEMA = uniq('valres').replace(/-/g, '_');
const S = quoteIdent(SCHEMA);
/** 60 ranges of CHUNK rows and one of 250. */
const ROWS = 30_250;
const CHUNK = 500;
/** Bytes from the server after which toxiproxy closes a source connection: a few ranges' worth. */
const LIMIT = 4096;

let lab: NetLab;
let link: Link;
let viaLink: Pool;
let table: TenantTable;
const source = shardPool('shard-a');
const target = shardPool('shard-b');

let env: H.InProcess | undefined;
let act: Activities;
/** Activities whose every source connection goes through `workerLink`. */
let cutDeps: Deps;
let cutAct: Activities;
let workerLink: Link;
const refs: { moveId: string; unit: string; source: string; target: string }[] = [];

beforeAll(async () => {
  lab = await NetLab.start(path.join(__dirname, '..', '..', 'test-results', 'network', 'validate-resume'));
  const s = await lab.configFor(`valres-${process.pid}`, ['shard-a']);
  link = s.links['shard-a'];
  viaLink = openPool(shardByName(s.config, 'shard-a').dsn, { max: 4 });
  const ddl = `create schema ${S}; create table ${S}.t (tenant_id text not null, id bigint not null, v text, primary key (tenant_id, id));`;
  await source.query(ddl);
  await target.query(ddl);
  table = (await listTenantTables(source, { column: 'tenant_id', schemas: [SCHEMA] })).find((t) => t.name === 't')!;
  env = await H.inProcessActivities({ router: true, refs });
  act = env.act;
  const w = await lab.configFor(`valres-worker-${process.pid}`, ['shard-a']);
  workerLink = w.links['shard-a'];
  cutDeps = createDeps(w.config);
  cutAct = createActivities(cutDeps);
}, 600_000);

afterAll(async () => {
  await lab?.healAll().catch(() => {});
  await source.query(`drop schema if exists ${S} cascade`).catch(() => {});
  await target.query(`drop schema if exists ${S} cascade`).catch(() => {});
  await viaLink?.end().catch(() => {});
  await cutDeps?.close().catch(() => {});
  await env?.close();
  await closePools();
  await lab?.close({ stopServer: true });
});

/** A unit of ROWS rows, equal on both sides. */
async function unitOnBoth(prefix: string): Promise<string> {
  const unit = uniq(prefix);
  const fill = `insert into ${S}.t select $1::text, g, md5(g::text) from generate_series(1, $2::int) g`;
  await source.query(fill, [unit, ROWS]);
  await target.query(fill, [unit, ROWS]);
  return unit;
}

/** The unit's rows of `table` compared with its source read through the link, in ranges of CHUNK rows. */
const compareViaLink = (unit: string, o: Partial<CompareInput> = {}) =>
  compareTenantRows({ source: viaLink, target, table, tenantColumn: 'tenant_id', unit, chunkRows: CHUNK, ...o });

/** Range comparisons per range (by where it starts), from the events. */
function attemptsPerRange(events: RangeEvent[]): Map<string, number> {
  const n = new Map<string, number>();
  for (const e of events) {
    if (e.outcome === 'differs') continue;
    const k = JSON.stringify(e.range.after);
    n.set(k, (n.get(k) ?? 0) + 1);
  }
  return n;
}

describe('validation under repeated source cuts', () => {
  it('completes with every source connection closed after 4 KiB, each range compared a bounded number of times, and still reports a planted difference exactly', async () => {
    const unit = await unitOnBoth('cuts');
    await target.query(`update ${S}.t set v = 'changed' where tenant_id = $1 and id = 12345`, [unit]);
    await link.limitData(LIMIT);
    const events: RangeEvent[] = [];
    try {
      const r = await compareViaLink(unit, { onRange: (e) => events.push(e) });
      const cuts = events.filter((e) => e.outcome === 'cut').length;
      console.log(`validate-resume: ${r.ranges?.hashed} ranges, ${cuts} cut and redone, ${r.ranges?.retried ?? 0} retried`);
      expect(r).toMatchObject({ sourceRows: ROWS, targetRows: ROWS, missingCount: 0, extraCount: 0, differentCount: 1 });
      expect(r.different).toEqual([{ key: [unit, '12345'], column: 'v', source: expect.any(String), target: 'changed' }]);
      // The differing range's rows (~22 KiB) never fit one connection: it was halved until they did.
      expect(r.ranges?.read).toBe(1);
      expect(r.ranges!.hashed).toBeGreaterThanOrEqual(Math.ceil(ROWS / CHUNK));
      // The link did cut, many times; no range was compared more than the bound, and only those
      // holding the differing key (whose row reads the link cuts) more than twice.
      expect(cuts).toBeGreaterThan(5);
      expect(r.ranges?.retried).toBe(cuts);
      const perRange = attemptsPerRange(events);
      expect(Math.max(...perRange.values())).toBeLessThanOrEqual(1 + DEFAULT_RANGE_RECONNECTS);
      const oftener = [...perRange].filter(([, n]) => n > 2).map(([k]) => Number((JSON.parse(k) as string[] | null)?.[0] ?? 0));
      expect(
        oftener.every((after) => after < 12345 && after >= 12345 - CHUNK),
        JSON.stringify(oftener),
      ).toBe(true);
      console.log(
        `validate-resume: ${perRange.size} range starts, compared at most ${Math.max(...perRange.values())} times; more than twice: ${oftener.join(', ')}`,
      );
    } finally {
      await link.heal();
    }
  });

  it('an error that is not a lost connection (a table missing on the target) ends the comparison at once, never retried', async () => {
    const unit = await unitOnBoth('noretry');
    await source.query(`create table ${S}.only_here (tenant_id text not null, id bigint not null, primary key (tenant_id, id))`);
    const only = (await listTenantTables(source, { column: 'tenant_id', schemas: [SCHEMA] })).find((t) => t.name === 'only_here')!;
    await link.limitData(LIMIT);
    const events: RangeEvent[] = [];
    try {
      await expect(compareViaLink(unit, { table: only, onRange: (e) => events.push(e) })).rejects.toThrow(/does not exist/);
      expect(events).toEqual([]);
    } finally {
      await link.heal();
    }
  });

  it('a comparison that gives up on a cut resumes from the ranges it recorded equal: none compared again, the rest once', async () => {
    const unit = await unitOnBoth('resume');
    await link.limitData(LIMIT);
    const first: RangeEvent[] = [];
    let recorded: EqualRanges | undefined;
    try {
      await expect(
        compareViaLink(unit, {
          reconnects: 0,
          onRange: (e) => first.push(e),
          onEqual: (p) => (recorded = p),
        }),
      ).rejects.toThrow(/Connection terminated|ECONNRESET/);
    } finally {
      await link.heal();
    }
    const equalFirst = first.filter((e) => e.outcome === 'equal');
    expect(equalFirst.length).toBeGreaterThan(0);
    expect(recorded?.rows).toBe(equalFirst.length * CHUNK);
    // Compared in key order: what was found equal is one range from the start.
    expect(recorded?.equal).toEqual([{ after: null, upTo: equalFirst.at(-1)!.range.upTo }]);
    const second: RangeEvent[] = [];
    const r = await compareViaLink(unit, { resume: recorded, onRange: (e) => second.push(e) });
    expect(r).toMatchObject({ sourceRows: ROWS, targetRows: ROWS, missingCount: 0, extraCount: 0, differentCount: 0 });
    expect(r.ranges).toMatchObject({ hashed: Math.ceil((ROWS - recorded!.rows) / CHUNK), read: 0, resumedRows: recorded!.rows });
    const again = second.filter((e) => equalFirst.some((f) => JSON.stringify(f.range) === JSON.stringify(e.range)));
    expect(again).toEqual([]);
    expect(second.every((e) => e.outcome === 'equal')).toBe(true);
  });
});

describe('validateMove resumed on a new attempt', () => {
  const write = (tenant: string, sql: string, params: unknown[]) =>
    env!.router.withTenant(tenant, { tenants: [tenant] }, 'write', (tx) => tx.query(sql, [tenant, ...params]));

  /** A tenant copied and caught up (not validated) on shard-a → shard-b. */
  async function caughtUp(prefix: string) {
    const tenant = await H.newTenant('shard-a', prefix);
    await H.seed(tenant, 60, 0);
    const plan = await act.planMove({ unit: tenant, target: 'shard-b' });
    expect(plan.ok, plan.reasons.join('; ')).toBe(true);
    const ref = { moveId: plan.moveId, unit: tenant, source: plan.source, target: 'shard-b' };
    refs.push(ref);
    await act.setupReplication({ ...ref, direction: 'forward' });
    for (const t of plan.tables) await act.copyTable({ ...ref, table: t.table, batchRows: 5000, rowsPerSecond: 0 });
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    return { tenant, ref };
  }

  /**
   * Attempt 1 of validateMove through the worker's source link, which goes down once a heartbeat
   * records public.events equal: the attempt fails; returns its last heartbeat.
   */
  async function cutAttempt(ref: (typeof refs)[number], validation?: string): Promise<unknown> {
    let last: unknown;
    let cut: Promise<unknown> | undefined;
    await workerLink.latency(30);
    try {
      const failed = await runAsAttempt(() => cutAct.validateMove({ ...ref, direction: 'forward', validation }), {
        onBeat: (d) => {
          last = d;
          if (!cut && recordedValidation(d)?.tables['public.events']) cut = workerLink.down();
        },
      }).then(
        (v) => `completed: ${JSON.stringify(v)}`,
        (e: Error) => e,
      );
      expect(failed, String(failed)).toBeInstanceOf(Error);
      expect(isConnectionError(failed), String(failed)).toBe(true);
      expect(cut).toBeDefined();
    } finally {
      await cut;
      await workerLink.heal();
    }
    return last;
  }

  it('a difference that appears in a range after it was recorded equal is found by the cutover: the resumed attempt keeps the delta it was compared under', async () => {
    const { tenant, ref } = await caughtUp('vrd');
    const beat1 = await cutAttempt(ref);
    const rec = recordedValidation(beat1)!;
    expect(rec.tables['public.events'].rows).toBeGreaterThan(0);
    // Changed after its range was found equal: the stream writes it (the delta records the key),
    // then the target's copy goes wrong behind the stream (as an applier bug would leave it).
    const id = (await write(tenant, `select id::text from public.events where tenant_id = $1 order by id limit 1`, [])).rows[0].id;
    await write(tenant, `update public.events set payload = '{"after":"recorded"}' where tenant_id = $1 and id = $2`, [id]);
    await act.catchUp({ ...ref, direction: 'forward', maxDurationMs: 20_000, mode: 'now' });
    const c = await target.connect();
    try {
      await c.query('begin');
      await c.query(`set local session_replication_role = replica; set local application_name = 'shardctl-corrupt'; select shardctl.enter_data_plane()`);
      expect((await c.query(`update public.events set payload = '{"corrupted":true}' where tenant_id = $1 and id = $2`, [tenant, id])).rowCount).toBe(1);
      await c.query('commit');
    } finally {
      c.release();
    }
    // Attempt 2 resumes: public.events is not compared again, so the validation itself passes.
    const v = await runAsAttempt(() => act.validateMove({ ...ref, direction: 'forward' }), { heartbeatDetails: beat1 });
    expect(v).toMatchObject({ ok: true, deltaToken: rec.token });
    expect(v.resumedRows).toBeGreaterThanOrEqual(rec.tables['public.events'].rows);
    // The cutover compares the keys the stream wrote since the first attempt's start: it finds it.
    await act.setupReplication({ ...ref, direction: 'reverse' });
    const r = await act.cutover({ ...ref, direction: 'forward', epoch: 1, fenceBudgetMs: 10_000, actor: 'validate-resume-test', deltaToken: v.deltaToken });
    expect(r.ok).toBe(false);
    expect(!r.ok && r.reason).toMatch(/public\.events: .*contents differ \(among \d+ changed keys?\)/);
    expect(await H.placement(tenant)).toMatchObject({ shard: 'shard-a', epoch: 1, state: 'active' });
    await act.cancelMove({ ...ref, epoch: 1, actor: 'validate-resume-test' });
  });

  it('an attempt whose delta was restarted since the last one (a superseded delivery) does not resume: it compares the whole unit under a new token', async () => {
    const { ref } = await caughtUp('vrs');
    const beat1 = await cutAttempt(ref, 'v1');
    const rec = recordedValidation(beat1)!;
    expect(Object.keys(rec.tables).length).toBeGreaterThan(0);
    await startDelta(target, ref.moveId, 'forward', 'a-superseded-validation');
    // Neither the heartbeat nor the row beside the tracking (the restart cleared it) is resumed.
    const v = await runAsAttempt(() => act.validateMove({ ...ref, direction: 'forward', validation: 'v1' }), { heartbeatDetails: beat1 });
    expect(v).toMatchObject({ ok: true, resumedRows: 0 });
    expect(v.deltaToken).not.toBe(rec.token);
    expect(v.deltaToken).not.toBe('a-superseded-validation');
    await act.cancelMove({ ...ref, epoch: 1, actor: 'validate-resume-test' });
  });

  it('a new scheduling of the same validation (no heartbeat: the workflow retried the step) resumes from the ranges recorded on the target, under the same tracking', async () => {
    const { ref } = await caughtUp('vrr');
    const beat1 = await cutAttempt(ref, 'v1');
    const rec = recordedValidation(beat1)!;
    expect(rec.tables['public.events'].rows).toBeGreaterThan(0);
    // The row beside the tracking holds at least what the last heartbeat did (it is written at every range).
    const saved = await readValidated(target, ref.moveId, 'forward', 'v1');
    expect(saved?.token).toBe(rec.token);
    const savedRows = rowsIn(recordedValidation({ validated: saved })!.tables);
    expect(savedRows).toBeGreaterThanOrEqual(rowsIn(rec.tables));
    const v = await runAsAttempt(() => act.validateMove({ ...ref, direction: 'forward', validation: 'v1' }));
    expect(v).toMatchObject({ ok: true, deltaToken: rec.token, resumedRows: savedRows });
    await act.cancelMove({ ...ref, epoch: 1, actor: 'validate-resume-test' });
  });

  it("another validation of the move (v2: after a fixed mismatch or a wait for approval) never resumes v1's ranges: it compares everything under a new tracking", async () => {
    const { ref } = await caughtUp('vrn');
    const beat1 = await cutAttempt(ref, 'v1');
    const rec = recordedValidation(beat1)!;
    expect(Object.keys(rec.tables).length).toBeGreaterThan(0);
    expect(await readValidated(target, ref.moveId, 'forward', 'v1')).toBeDefined();
    const v = await runAsAttempt(() => act.validateMove({ ...ref, direction: 'forward', validation: 'v2' }));
    expect(v).toMatchObject({ ok: true, resumedRows: 0 });
    expect(v.deltaToken).not.toBe(rec.token);
    // v2's start cleared v1's ranges: nothing of v1's is left to resume.
    expect(await readValidated(target, ref.moveId, 'forward', 'v1')).toBeUndefined();
    await act.cancelMove({ ...ref, epoch: 1, actor: 'validate-resume-test' });
  });
});
