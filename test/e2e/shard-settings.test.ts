// Issue 9, "shards whose server settings differ": a whole move (copy, change stream, validation,
// cutover, soak with reverse replication, retire) between two shards whose sessions default to
// other output settings than each other and than PostgreSQL's defaults — time zone, date style,
// interval style, float digits, bytea output — as `ALTER ROLE ... SET` (or the server's own
// configuration) gives them, with the target's columns in another physical order and a
// sequence-backed id, under live writes through the router. Every comparison must pin its own
// settings and name columns, or every cutover fails "contents differ" and the tenant is frozen
// again and again. The worker and the router of this file reach the shards as a role whose
// defaults are skewed; nothing else on the shared stack uses that role.
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import type { WorkflowHandle } from '@temporalio/client';
import { Pool } from 'pg';
import { closePools, shardPool, testConfig } from '../helpers/stack';
import * as H from '../helpers/move';
import { createSchemaWorld, SchemaWorld, asTenant, snapshotRows, snapshotDiff, RowSnapshot } from '../helpers/schema';
import * as M from '../../workflows/messages';
import { isTerminal, pastPointOfNoReturn } from '../../workflows/phases';
import { Router } from '../../lib/router/router';
import { shardByName } from '../../lib/config';

const ROLE = 'shardctl_skewed_settings';
/** Each shard's session defaults for ROLE: different from each other and from the defaults. */
const SKEW: Record<'shard-a' | 'shard-b', Record<string, string>> = {
  'shard-a': { TimeZone: 'America/St_Johns', DateStyle: 'Postgres, DMY', IntervalStyle: 'iso_8601', extra_float_digits: '1', bytea_output: 'escape' },
  'shard-b': { TimeZone: 'Asia/Kathmandu', DateStyle: 'SQL, DMY', IntervalStyle: 'sql_standard', extra_float_digits: '-3', bytea_output: 'hex' },
};
const op = { actor: 'shard-settings-test' };

let t: Awaited<ReturnType<typeof H.temporal>>;
let world: SchemaWorld | undefined;
let handle: WorkflowHandle | undefined;
let tenant = '';

/** The shard's DSN with ROLE as the user (same password as the dev stack's own role). */
function skewedDsn(shard: string, dsn: string): string {
  if (!(shard in SKEW)) return dsn;
  const u = new URL(dsn);
  u.username = ROLE;
  return u.toString();
}

beforeAll(async () => {
  await H.prepareStack();
  t = await H.temporal();
  for (const shard of Object.keys(SKEW) as (keyof typeof SKEW)[]) {
    const pool = shardPool(shard);
    const password = decodeURIComponent(new URL(shardByName(testConfig(), shard).dsn).password);
    await pool.query(`do $$ begin
        if not exists (select 1 from pg_roles where rolname = '${ROLE}') then create role ${ROLE} login superuser; end if;
      end $$`);
    await pool.query(`alter role ${ROLE} password '${password.replace(/'/g, "''")}'`);
    for (const [k, v] of Object.entries(SKEW[shard])) await pool.query(`alter role ${ROLE} set ${k} = '${v}'`);
  }
});

afterAll(async () => {
  if (handle) {
    const s = await handle.query(M.statusQuery).catch(() => undefined);
    if (s && !isTerminal(s.phase)) {
      if (s.phase === 'soak') await handle.executeUpdate(M.retireNowUpdate, { args: [op] }).catch(() => {});
      else if (!pastPointOfNoReturn(s.phase)) await handle.executeUpdate(M.cancelUpdate, { args: [op] }).catch(() => {});
      const ended = await H.waitFor(handle, (x) => isTerminal(x.phase), 60_000).then(
        () => true,
        () => false,
      );
      if (!ended) await handle.terminate('shard-settings test cleanup').catch(() => {});
    }
  }
  await world?.destroy(tenant ? [`${tenant}.e1`] : []);
  await t?.close();
  await closePools();
});

/** The target's columns in another physical order than the source's. */
const ddl = (S: string, shard: string) => {
  const cols = [
    'id bigserial',
    'tenant_id text not null',
    'at timestamptz not null',
    'local_at timestamp',
    'day date',
    'clock time',
    'clock_tz timetz',
    'span interval',
    'f4 real',
    'f8 double precision',
    'amount numeric(20,6)',
    'price money',
    'raw bytea',
    'doc jsonb',
    'tags text[]',
  ];
  const ordered = shard === 'shard-b' ? [...cols].reverse() : cols;
  return `create schema ${S}; create table ${S}.ledger (${ordered.join(', ')}, primary key (tenant_id, id));`;
};

/** Columns by name, so two physical orders compare. */
function byName(s: RowSnapshot): RowSnapshot {
  const order = s.columns.map((c, i) => [c, i] as const).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return { columns: order.map(([c]) => c), rows: new Map([...s.rows].map(([k, v]) => [k, order.map(([, i]) => v[i])])) };
}

describe('shards whose sessions default to other output settings', () => {
  it(
    'a tenant moves between them under live writes: no cutover sees "contents differ", every acknowledged write arrives, rows compare exact by name, then retire',
    { timeout: 300_000 },
    async () => {
      world = await createSchemaWorld('Xset', ddl, { shardDsn: skewedDsn });
      const w = world;
      const S = w.S;
      // The skew is real: the world's own connections see it.
      for (const shard of Object.keys(SKEW) as (keyof typeof SKEW)[]) {
        const p = new Pool({ connectionString: shardByName(w.config, shard).dsn, max: 1 });
        try {
          const r = await p.query(`select current_setting('TimeZone') as tz, current_setting('DateStyle') as ds, current_setting('bytea_output') as bo`);
          expect(r.rows[0]).toEqual({ tz: SKEW[shard].TimeZone, ds: SKEW[shard].DateStyle, bo: SKEW[shard].bytea_output });
        } finally {
          await p.end();
        }
      }
      tenant = await H.newTenant('shard-a', 'xset');
      await asTenant(w.pool('shard-a'), tenant, 1, (c) =>
        c.query(
          `insert into ${S}.ledger (tenant_id, at, local_at, day, clock, clock_tz, span, f4, f8, amount, price, raw, doc, tags)
           select $1, timestamptz '2026-03-29 01:30:00.123456+00' + g * interval '7 minutes 3.5 seconds',
                  timestamp '2024-02-29 23:59:59.999999' + g * interval '1 hour', date '2000-01-01' + g,
                  time '00:00:00.000001' + g * interval '1 second', timetz '12:34:56.789+05:30',
                  g * interval '1 mon 2 days 03:04:05.678', g / 3.0, pi() * g / 7, g * 1.000001, (g * 0.01)::numeric::money,
                  decode(md5(g::text), 'hex'), jsonb_build_object('g', g, 'f', g / 3.0), array['a' || g, null]
             from generate_series(1, 2000) g`,
          [tenant],
        ),
      );
      // Live writes through a router that reaches the shards as the skewed role: inserts that
      // take the sequence's next id (on the target after the switch), and updates of seeded rows.
      const router = await Router.create(w.config);
      const acked: string[] = [];
      let refused = 0;
      let stop = false;
      const writer = (async () => {
        for (let i = 1; !stop; i++) {
          try {
            const id = await router.withTenant(tenant, { tenants: [tenant] }, 'write', async (tx) => {
              const r = await tx.query(
                `insert into ${S}.ledger (tenant_id, at, local_at, day, clock, clock_tz, span, f4, f8, amount, price, raw, doc, tags)
                 values ($1, now(), localtimestamp, current_date, localtime, current_time, $2::interval, $3, $4, $5, $6::numeric::money, $7, $8, $9)
                 returning id::text`,
                [tenant, `${i} days 00:00:0${i % 10}.25`, i / 7, Math.PI * i, `${i}.000001`, `${i}.99`, Buffer.from([0, i % 256, 255]), { live: i }, [`l${i}`]],
              );
              await tx.query(`update ${S}.ledger set f8 = f8 + 1, span = span + interval '1 day 00:00:00.5' where tenant_id = $1 and id = $2`, [
                tenant,
                (i % 2000) + 1,
              ]);
              return r.rows[0].id as string;
            });
            acked.push(id);
          } catch {
            refused++;
          }
          await new Promise((r) => setTimeout(r, 25));
        }
      })();
      let soak: M.MoveStatus;
      try {
        handle = await H.startMove(t.client, w.taskQueue, H.moveInput(tenant, 'shard-b', { soakSeconds: 3600 }));
        soak = await H.waitFor(
          handle,
          (s) => {
            if (isTerminal(s.phase)) throw new Error(`move ended in ${s.phase}: ${s.lastError}`);
            if (/^(copy|validate)/.test(s.blockedReason)) throw new Error(`move blocked: ${s.blockedReason}`);
            return s.phase === 'soak';
          },
          240_000,
        );
        // Writes keep landing on the new owner during soak (the sequence followed the tenant).
        const atSwitch = acked.length;
        await H.waitFor(handle, () => acked.length >= atSwitch + 5, 30_000);
      } finally {
        stop = true;
        await writer;
        await router.close();
      }
      // A cutover that compared under the sessions' own settings would have failed "contents differ".
      expect(soak.lastError ?? '').not.toMatch(/differ|mismatch/i);
      expect(acked.length).toBeGreaterThan(10);
      const [a, b] = [w.pool('shard-a'), w.pool('shard-b')];
      const present = await b.query(`select count(*)::int as n from ${S}.ledger where tenant_id = $1 and id = any($2::bigint[])`, [tenant, acked]);
      expect(present.rows[0].n).toBe(acked.length);
      // Soak's reverse stream keeps the old owner exact: both copies compare row for row, column by name.
      let diff: string[] = [];
      for (let i = 0; i < 60; i++) {
        diff = snapshotDiff(byName(await snapshotRows(a, w.schema, 'ledger', tenant)), byName(await snapshotRows(b, w.schema, 'ledger', tenant)));
        if (diff.length === 0) break;
        await new Promise((r) => setTimeout(r, 500));
      }
      expect(diff).toEqual([]);
      const total = await b.query(`select count(*)::int as n from ${S}.ledger where tenant_id = $1`, [tenant]);
      expect(total.rows[0].n).toBe(2000 + acked.length);
      await handle.executeUpdate(M.retireNowUpdate, { args: [op] });
      const done = await H.waitPhase(handle, 'done', 120_000);
      const left = await a.query(`select count(*)::int as n from ${S}.ledger where tenant_id = $1`, [tenant]);
      expect(left.rows[0].n).toBe(0);
      expect(await H.replicationLeftovers(`${tenant}.e1`)).toEqual([]);
      console.log(
        `skewed settings move: ${acked.length} live transactions (an insert and an update each) acknowledged, ${refused} refused and retried, ` +
          `${done.cutoverAttempts} cutover attempt(s), pause ${done.cutoverPauseMs} ms`,
      );
    },
  );
});
