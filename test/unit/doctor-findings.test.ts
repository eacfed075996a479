// doctor's judgement of headroom reservations and foreign blobs (lib/doctor/findings.ts), pure.
import { describe, it, expect } from 'vitest';
import { REQUIRED_SEARCH_ATTRIBUTES, judge, type Facts, type RunningMove, type ForeignBlobFact, type ReservationFact } from '../../lib/doctor/findings';

const reservation = (moveId: string, unit: string): ReservationFact => ({
  moveId,
  unit,
  source: 'a',
  target: 'b',
  load: 5,
  workflowId: `move-${unit}`,
  takenAt: '2026-01-01T00:00:00.000Z',
});
const blobs = (unit: string, tracked: boolean): ForeignBlobFact => ({
  shard: 'a',
  bucket: 'bucket-a',
  unit,
  owner: 'b',
  tracked,
  total: 1,
  objects: [{ key: `tenants/${unit}/k`, change: 'written' }],
});
function facts(o: {
  reservations?: ReservationFact[];
  running?: Facts['temporal']['running'];
  foreign?: ForeignBlobFact[];
  temporal?: boolean;
  moving?: string;
}): Facts {
  return {
    directory: {
      reachable: true,
      placements: o.moving ? [{ unit: o.moving, shard: 'a', epoch: 1, state: 'moving', moveId: `${o.moving}.e1.x` }] : [],
      moveTargets: {},
      reservations: o.reservations ?? [],
    },
    temporal: { reachable: o.temporal ?? true, running: o.running ?? [] },
    shards: [
      { shard: 'a', host: 'h', reachable: true, slots: [], publications: [], schemaInstalled: true, fences: [], unfenced: [], foreignBlobs: o.foreign ?? [] },
    ],
    walThresholdBytes: 1e9,
  };
}
const ids = (f: Facts) => judge(f, { fenceLockClass: 1 }).map((x) => x.id);
const running = (unit: string, moveId: string | null, o: Partial<RunningMove> = {}): RunningMove => ({
  unit,
  workflowId: `move-${unit}`,
  moveId,
  phase: 'copy',
  blockedReason: null,
  phaseSince: null,
  soakEndsAt: null,
  ...o,
});

describe('doctor: headroom reservations', () => {
  it('reports a reservation no running move holds, with its fix', () => {
    const f = judge(facts({ reservations: [reservation('u.e1.x', 'u')] }), { fenceLockClass: 1 });
    expect(f).toMatchObject([
      { id: 'stale-reservation:u.e1.x', kind: 'stale-reservation', autoFix: true, fix: 'shardctl doctor --fix stale-reservation:u.e1.x' },
    ]);
  });
  it('a running move of the unit holds it unless its id is known and differs', () => {
    expect(ids(facts({ reservations: [reservation('u.e1.x', 'u')], running: [running('u', 'u.e1.x')] }))).toEqual([]);
    expect(ids(facts({ reservations: [reservation('u.e1.x', 'u')], running: [running('u', null)] }))).toEqual([]);
    expect(ids(facts({ reservations: [reservation('u.e1.x', 'u')], running: [running('u', 'u.e2.y')] }))).toContain('stale-reservation:u.e1.x');
  });
  it('without Temporal nothing is called stale', () => {
    expect(ids(facts({ reservations: [reservation('u.e1.x', 'u')], temporal: false }))).not.toContain('stale-reservation:u.e1.x');
  });
  it('a unit still frozen by the reservation’s move is fixed first by frozen-without-move, not by releasing', () => {
    const f = judge(facts({ reservations: [reservation('u.e1.x', 'u')], moving: 'u' }), { fenceLockClass: 1 }).find((x) => x.kind === 'stale-reservation');
    expect(f).toMatchObject({ autoFix: false });
    expect(f!.fix).toContain('frozen-without-move:u');
  });
});

describe('doctor: objects behind shardctl’s back on a non-owner', () => {
  it('reports them, critical, naming the key, never auto-fixed', () => {
    const [f] = judge(facts({ foreign: [blobs('u', true)] }), { fenceLockClass: 1 });
    expect(f).toMatchObject({ id: 'foreign-blobs:a:u', kind: 'foreign-blobs', severity: 'critical', autoFix: false });
    expect(f.message).toContain('tenants/u/k written');
  });
  it('an untracked copy of a unit whose move runs (or when Temporal is unreachable) is left to the move', () => {
    expect(ids(facts({ foreign: [blobs('u', false)], running: [running('u', null)] }))).toEqual([]);
    expect(ids(facts({ foreign: [blobs('u', false)], temporal: false }))).not.toContain('foreign-blobs:a:u');
    expect(ids(facts({ foreign: [blobs('u', true)], running: [running('u', null)] }))).toEqual(['foreign-blobs:a:u']);
    expect(ids(facts({ foreign: [blobs('u', false)] }))).toEqual(['foreign-blobs:a:u']);
  });
});

describe('doctor: search attributes and moves stuck in a phase', () => {
  const H = 3_600_000;
  const now = '2026-12-01T12:00:00.000Z';
  const at = (msBefore: number) => new Date(Date.parse(now) - msBefore).toISOString();
  const judged = (f: Facts) => judge(f, { fenceLockClass: 1 });
  it('names each search attribute the namespace lacks, with the command that creates it', () => {
    const f = facts({});
    f.namespace = 'prod';
    f.temporal.searchAttributes = ['ShardctlUnit', 'ShardctlPhase', 'CustomThing'];
    const found = judged(f).find((x) => x.kind === 'search-attributes-missing')!;
    expect(found.message).toContain('ShardctlSource, ShardctlTarget, ShardctlBlockedReason');
    expect(found.fix).toBe(
      ['ShardctlSource', 'ShardctlTarget', 'ShardctlBlockedReason']
        .map((n) => `temporal operator search-attribute create --namespace prod --name ${n} --type Keyword`)
        .join(' && '),
    );
    f.temporal.searchAttributes = Object.keys(REQUIRED_SEARCH_ATTRIBUTES);
    expect(judged(f).map((x) => x.kind)).not.toContain('search-attributes-missing');
    delete f.temporal.searchAttributes; // not answered: nothing is claimed
    expect(judged(f).map((x) => x.kind)).not.toContain('search-attributes-missing');
  });
  it('reports a move in one phase past the threshold, and a soak past its end by the threshold', () => {
    const f = facts({
      running: [
        running('slow', 'slow.e1.x', { phase: 'copy', phaseSince: at(7 * H) }),
        running('fresh', 'fresh.e1.x', { phase: 'copy', phaseSince: at(5 * H) }),
        running('soaking', 'soaking.e1.x', { phase: 'soak', phaseSince: at(50 * H), soakEndsAt: at(-20 * H) }),
        running('unretired', 'unretired.e1.x', { phase: 'soak', phaseSince: at(80 * H), soakEndsAt: at(7 * H) }),
        running('unknown', null, { phase: 'copy' }),
      ],
    });
    f.now = now;
    f.phaseThresholdMs = 6 * H;
    const found = judged(f).filter((x) => x.kind === 'move-phase-too-long');
    expect(found.map((x) => x.id)).toEqual(['move-phase-too-long:slow', 'move-phase-too-long:unretired']);
    expect(found[0].message).toContain('in phase copy for 7.0 h');
    expect(found[1].message).toContain('still in soak 7.0 h after its soak ended');
    delete f.phaseThresholdMs;
    expect(judged(f).map((x) => x.kind)).not.toContain('move-phase-too-long');
  });
});
