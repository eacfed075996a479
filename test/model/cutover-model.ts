// An exhaustive model of the cutover protocol (lib/cutover/steps.ts + live.ts) for DESIGN.md §5:
// the directory placement (compare-and-set only), the two shards' fence rows with the guarded
// verbs of lib/shard/fence.ts, two concurrent attempts of the same move (a redelivery B that
// starts while A is anywhere: paused past its heartbeat timeout, crashed, or thrown), and
// routers writing with a possibly stale cached route. Every statement against a database is one
// atomic step (a fence change holds the unit's advisory lock exclusively, a write holds it shared
// from its check to its commit, so the two never interleave). Explored breadth-first with
// memoisation; a violation comes back as the shortest trace of steps that reaches it.
// The freeze lease (issue 14, F1) adds an abstract clock: a freeze's switch deadline passes and the
// source's lease runs out as nondeterministic events, the second only after the first for the
// freeze that raised it (lib/cutover/lease.ts), so no real time is modelled.
// Pure: no I/O, no server.

/** Which protocol to explore. `LIVE` is what lib/cutover/live.ts does today. */
export interface ProtocolVariant {
  /** The switch's directory CAS requires this attempt's freeze token (live: yes). */
  switchChecksToken: boolean;
  /** unfreeze: directory CAS first, then the guarded fence (live: yes); false lowers the fence first. */
  unfreezeDirectoryFirst: boolean;
  /**
   * The fence row also carries the freeze token, raiseFence writes this
   * attempt's token there and the fence's unfreeze is guarded on it too (live since the model found the bug).
   */
  fenceCarriesToken: boolean;
  /**
   * A lost freeze CAS re-reads the standing instead of declining, so a
   * delivery whose standing went stale (the other attempt froze, or switched, meanwhile) takes
   * that freeze over or finishes the switch (live).
   */
  lostFreezeRereadsStanding: boolean;
  /**
   * When unfreeze finds the unit switched (by the other attempt, which may
   * have died before finishing), it finishes the old owner before answering ok (live).
   */
  abortSwitchedFinishes: boolean;
  /**
   * A lost switch CAS that finds the owner active again (the other attempt
   * unfroze after this one's late raise) lowers the fence it raised, before throwing (live).
   */
  lostSwitchUnfreezes: boolean;
  /**
   * The target's acceptance carries the accepting attempt's freeze generation (the directory's
   * generation of its freeze compare-and-set, higher for every later freeze): acceptEpoch is
   * refused when a later freeze's attempt already accepted, and a lost switch takes back only
   * its own acceptance (live since a fresh-clone CI run caught the unguarded take-back).
   */
  acceptCarriesGeneration: boolean;
  /**
   * The source's freeze is a lease (issue 14, F1): the model's abstract clock may run it out, and a
   * fence whose lease ran out accepts writes again. Without the directory deadline it may run out
   * at any instant after the raise; with it, only after the switch deadline of the freeze that
   * raised it has passed (the durations argument of lib/cutover/lease.ts).
   */
  freezeLease: boolean;
  /** The switch CAS refuses once its freeze's switch deadline (the directory's clock) has passed. */
  switchDeadline: boolean;
  /** Before the switch the source's freeze is pinned (never runs out), refused once its lease ran out. */
  pinBeforeSwitch: boolean;
  /**
   * The source's fence keeps the highest freeze generation that raised it, and a raise of an older
   * freeze is refused (the attempt aborts): a superseded attempt's late raise cannot replace a later
   * attempt's pinned freeze with a lease of its own (which would run out after that attempt's switch).
   */
  raiseCarriesGeneration: boolean;
}

/**
 * What lib/cutover/live.ts did before this model found its bugs (a paused attempt's late fence
 * unfreeze reopened another attempt's freeze and lost an acknowledged write); kept as the
 * checker's first real catch.
 */
export const BEFORE_FIX: ProtocolVariant = {
  switchChecksToken: true,
  unfreezeDirectoryFirst: true,
  fenceCarriesToken: false,
  lostFreezeRereadsStanding: false,
  abortSwitchedFinishes: false,
  lostSwitchUnfreezes: false,
  acceptCarriesGeneration: false,
  freezeLease: false,
  switchDeadline: false,
  pinBeforeSwitch: false,
  raiseCarriesGeneration: false,
};
/**
 * The protocol after the model's first fixes, before the generation guard: a superseded attempt's
 * lost switch took back the target's acceptance after (or before) the winner's, so the directory
 * named an owner that refused every write (caught by activities-twice in a fresh-clone CI run,
 * not by the model, which had no invariant for it then).
 */
export const BEFORE_ACCEPT_GUARD: ProtocolVariant = {
  ...BEFORE_FIX,
  fenceCarriesToken: true,
  lostFreezeRereadsStanding: true,
  abortSwitchedFinishes: true,
  lostSwitchUnfreezes: true,
};
/** Before the freeze lease (issue 14, F1): safe, but a freeze only its worker can lower. */
export const BEFORE_LEASE: ProtocolVariant = { ...BEFORE_ACCEPT_GUARD, acceptCarriesGeneration: true };
/** What lib/cutover/live.ts does now: the fixes below are all in the live code. */
export const LIVE: ProtocolVariant = { ...BEFORE_LEASE, freezeLease: true, switchDeadline: true, pinBeforeSwitch: true, raiseCarriesGeneration: true };
/**
 * The lease, the deadline and the pin, but a raise that ignores freeze generations (what the model
 * caught first: a superseded attempt's late raise replaced the winner's pin with a lease that ran out).
 */
export const LEASE_UNORDERED_RAISE: ProtocolVariant = { ...LIVE, raiseCarriesGeneration: false };
/**
 * The lease and the directory's switch deadline without the pin: every switch commits inside the
 * lease, but an old owner whose disown has not arrived reopens when its lease runs out later.
 */
export const LEASE_WITHOUT_PIN: ProtocolVariant = { ...LIVE, pinBeforeSwitch: false };
/** The lease alone: it may run out between the fence point and the switch. */
export const LEASE_WITHOUT_DEADLINE_OR_PIN: ProtocolVariant = { ...LIVE, switchDeadline: false, pinBeforeSwitch: false };
/** The lease and the pin, without the directory's deadline (the pin alone carries the safety). */
export const LEASE_WITHOUT_DEADLINE: ProtocolVariant = { ...LIVE, switchDeadline: false };
/** The fixes as first proposed by the model (in LIVE since; the broken variants below start from them, without the lease). */
export const CANDIDATE_FIX: ProtocolVariant = BEFORE_LEASE;
/** Deliberately broken: the switch CAS checks the move but not the freeze token. */
export const BROKEN_SWITCH_IGNORES_TOKEN: ProtocolVariant = { ...CANDIDATE_FIX, switchChecksToken: false };
/** Deliberately broken: unfreeze lowers the fence before the directory CAS. */
export const BROKEN_UNFREEZE_FENCE_FIRST: ProtocolVariant = { ...CANDIDATE_FIX, unfreezeDirectoryFirst: false };

export interface ModelBounds {
  /** Committed router writes at most (each is one acknowledged write). */
  writes: number;
  /** Routers, each with its own cached route. */
  routers: number;
}

const SOURCE = 0;
const TARGET = 1;
const EPOCH = 1; // the owner's epoch; the switch makes it EPOCH + 1
const SHARD_NAMES = ['source', 'target'];
const ATTEMPT_NAMES = ['A', 'B'];

type Pc =
  | 'idle' // B only: not delivered yet
  | 'standing'
  | 'freeze'
  | 'raiseFence'
  | 'apply' // applyToFencePoint + compare, as one step
  | 'pin' // pinFreeze on the source (pinBeforeSwitch only)
  | 'switchAccept' // acceptEpoch on the target
  | 'switchCas' // the directory CAS
  | 'switchDisown' // a lost CAS takes back the target's acceptance, then throws
  | 'finish' // finishOldOwner: disown the old owner at the new epoch
  | 'unfreezeCas'
  | 'unfreezeFence'
  | 'unfreezeFenceFirst' // broken variant: fence before directory
  | 'unfreezeCasAfterFence'
  | 'done';

type Outcome = 'none' | 'switched' | 'already-done' | 'declined' | 'threw' | 'crashed';

export interface Attempt {
  pc: Pc;
  /** Standing seen: 0 = open, otherwise the freeze token it will take over (-1: not yet read). */
  takeover: number;
  /** The source writes (bitmask) that its apply/compare step saw on the target; -1 = not applied. */
  applied: number;
  outcome: Outcome;
  /** The directory generation of this attempt's winning freeze CAS (0 = not frozen yet). */
  gen: number;
  /** switchDeadline: the directory's switch deadline of this attempt's freeze has passed. */
  late: boolean;
}

export interface Fence {
  epoch: number; // 0 with owned=false: no fence row yet
  owned: boolean;
  frozen: boolean;
  token: number; // fenceCarriesToken only; 0 otherwise
  acceptGen: number; // acceptCarriesGeneration only: the generation of the attempt that accepted
  /** A frozen fence's lease: 0 none (or pinned: never runs out), 1 running, 2 run out (writes pass). */
  lease: 0 | 1 | 2;
  /** raiseCarriesGeneration: the highest freeze generation that raised this fence (kept by every change). */
  freezeGen: number;
}

export interface ModelState {
  dir: { shard: number; epoch: number; moving: boolean; token: number; switchedBy: number; generation: number };
  fences: Fence[];
  /** Each router's cached route, as [shard, epoch]. */
  routers: [number, number][];
  /** Writes committed so far (their ids are 0..writes-1). */
  writes: number;
  /** Bitmask of write ids acknowledged by the source. */
  sourceAcks: number;
  /** Bitmask of source writes present on the target (its copy as of the latest apply). */
  targetCopy: number;
  attempts: Attempt[];
}

export type InvariantName =
  | 'single-authority' // §5.1
  | 'no-lost-write' // §5.2: the target has every write the old owner acknowledged
  | 'switch-saw-every-write' // §5.2 as the brief states it: in what the switching attempt applied
  | 'epochs-only-increase' // §5.4, first half
  | 'no-stale-write' // §5.4, second half
  | 'fail-open' // no frozen unit once every attempt has ended (without a crash)
  | 'ok-answer-is-true' // an ok answer means the directory has switched
  | 'old-owner-finished' // an ok answer leaves the old owner refusing the unit
  | 'owner-accepts'; // once settled, the shard the directory names accepts the unit's writes at its epoch

export const INVARIANTS: InvariantName[] = [
  'single-authority',
  'no-lost-write',
  'switch-saw-every-write',
  'epochs-only-increase',
  'no-stale-write',
  'fail-open',
  'ok-answer-is-true',
  'old-owner-finished',
  'owner-accepts',
];

export interface Violation {
  invariant: InvariantName;
  detail: string;
  /** The steps from the initial state, in order. */
  trace: string[];
}

export interface ExploreResult {
  states: number;
  transitions: number;
  /** Terminal states in which no attempt is left running (the activity has its answer). */
  settled: number;
  /** The shortest counterexample per violated invariant. */
  violations: Violation[];
  /** With a goal: the shortest trace to a state that satisfies it (null: unreachable). */
  reached: string[] | null;
}

export const DEFAULT_BOUNDS: ModelBounds = { writes: 2, routers: 2 };

/** Whether the state has settled (exported for goals): no attempt left to run. */
export function isSettled(s: ModelState): boolean {
  return settledAnswer(s) !== null;
}

function initial(b: ModelBounds): ModelState {
  return {
    dir: { shard: SOURCE, epoch: EPOCH, moving: false, token: 0, switchedBy: 0, generation: 0 },
    fences: [
      { epoch: EPOCH, owned: true, frozen: false, token: 0, acceptGen: 0, lease: 0, freezeGen: 0 },
      { epoch: 0, owned: false, frozen: false, token: 0, acceptGen: 0, lease: 0, freezeGen: 0 },
    ],
    routers: Array.from({ length: b.routers }, () => [SOURCE, EPOCH] as [number, number]),
    writes: 0,
    sourceAcks: 0,
    targetCopy: 0,
    attempts: [
      { pc: 'standing', takeover: -1, applied: -1, outcome: 'none', gen: 0, late: false },
      { pc: 'idle', takeover: -1, applied: -1, outcome: 'none', gen: 0, late: false },
    ],
  };
}

const clone = (s: ModelState): ModelState => ({
  dir: { ...s.dir },
  fences: s.fences.map((f) => ({ ...f })),
  routers: s.routers.map(([sh, ep]) => [sh, ep] as [number, number]),
  writes: s.writes,
  sourceAcks: s.sourceAcks,
  targetCopy: s.targetCopy,
  attempts: s.attempts.map((a) => ({ ...a })),
});

function key(s: ModelState): string {
  const d = s.dir;
  const f = s.fences.map((x) => `${x.epoch}${+x.owned}${+x.frozen}${x.token}:${x.acceptGen}:${x.lease}:${x.freezeGen}`).join(',');
  const r = s.routers.map(([sh, ep]) => `${sh}${ep}`).join(',');
  const a = s.attempts.map((x) => `${x.pc}:${x.takeover}:${x.applied}:${x.outcome}:${x.gen}:${+x.late}`).join(',');
  return `${d.shard}${d.epoch}${+d.moving}${d.token}${d.switchedBy}:${d.generation}|${f}|${r}|${s.writes}:${s.sourceAcks}:${s.targetCopy}|${a}`;
}

/** The trigger's rule (lib/shard/fence-sql.ts): owned, epoch equal, not frozen (or its lease ran out); no row refuses. */
function fenceAccepts(f: Fence, epoch: number): 'ok' | 'SC421' | 'SC423' {
  if (!f.owned || f.epoch !== epoch) return 'SC421';
  if (f.frozen && f.lease !== 2) return 'SC423';
  return 'ok';
}

/** setUnitFence: the guard (expect) must match, and epochs never go down; otherwise nothing changes. */
function setFence(
  s: ModelState,
  shard: number,
  next: Omit<Fence, 'token' | 'acceptGen' | 'lease' | 'freezeGen'> & { token?: number; acceptGen?: number; lease?: 0 | 1; freezeGen?: number },
  expect?: Partial<Fence>,
): boolean {
  const cur = s.fences[shard];
  if (expect && Object.entries(expect).some(([k, v]) => (cur as any)[k] !== v)) return false;
  if (next.epoch < cur.epoch) return false;
  // The acceptance's generation belongs to its epoch: kept by other changes at that epoch.
  const acceptGen = next.acceptGen ?? (next.epoch === cur.epoch ? cur.acceptGen : 0);
  // Only a freeze carries a lease; every other change clears it (unfreeze, accept, disown).
  s.fences[shard] = {
    epoch: next.epoch,
    owned: next.owned,
    frozen: next.frozen,
    token: next.token ?? 0,
    acceptGen,
    lease: next.frozen ? (next.lease ?? 0) : 0,
    freezeGen: Math.max(cur.freezeGen, next.freezeGen ?? 0),
  };
  return true;
}

const LEASE_STR = ['', ', lease running', ', lease run out'];
const fenceStr = (f: Fence) =>
  f.owned || f.epoch
    ? `{epoch ${f.epoch}, ${f.owned ? 'owned' : 'not owned'}, ${f.frozen ? 'frozen' : 'open'}${f.frozen ? LEASE_STR[f.lease] : ''}${f.token ? `, token t${ATTEMPT_NAMES[f.token - 1]}` : ''}}`
    : '{no fence row}';
const dirStr = (s: ModelState) => `${SHARD_NAMES[s.dir.shard]} e${s.dir.epoch} ${s.dir.moving ? `moving t${ATTEMPT_NAMES[s.dir.token - 1]}` : 'active'}`;

interface Step {
  label: string;
  next: ModelState;
  /** A property of the step itself that failed (epochs going down, a stale write committing). */
  broken?: { invariant: InvariantName; detail: string };
}

function successors(s: ModelState, v: ProtocolVariant, b: ModelBounds): Step[] {
  const out: Step[] = [];
  const [A] = s.attempts;

  // ---------------------------------------------------------------- routers
  s.routers.forEach(([shard, epoch], r) => {
    const rn = `router ${r + 1}`;
    if (shard !== s.dir.shard || epoch !== s.dir.epoch) {
      const n = clone(s);
      n.routers[r] = [s.dir.shard, s.dir.epoch];
      out.push({ label: `${rn} refreshes from the directory: now (${SHARD_NAMES[s.dir.shard]}, e${s.dir.epoch})`, next: n });
    }
    if (s.writes < b.writes && fenceAccepts(s.fences[shard], epoch) === 'ok') {
      const n = clone(s);
      const id = n.writes++;
      if (shard === SOURCE) n.sourceAcks |= 1 << id;
      const stale = shard !== s.dir.shard || epoch !== s.dir.epoch;
      out.push({
        label: `${rn} writes w${id} on ${SHARD_NAMES[shard]} at e${epoch}: fence ${fenceStr(s.fences[shard])} accepts, acknowledged`,
        next: n,
        broken: stale
          ? { invariant: 'no-stale-write', detail: `w${id} committed on ${SHARD_NAMES[shard]} at e${epoch} while the directory says ${dirStr(s)}` }
          : undefined,
      });
    }
    // A refused write changes nothing (the router refreshes or backs off): no step.
  });

  // ---------------------------------------------------------------- the abstract clock
  if (v.freezeLease) {
    // A freeze's switch deadline passes at some instant after its compare-and-set.
    s.attempts.forEach((a, i) => {
      if (!v.switchDeadline || a.gen === 0 || a.late) return;
      const n = clone(s);
      n.attempts[i].late = true;
      out.push({ label: `clock: the directory's switch deadline of ${ATTEMPT_NAMES[i]}'s freeze passes`, next: n });
    });
    // The source's lease runs out; with the deadline, never before that of the freeze that raised it.
    const f = s.fences[SOURCE];
    if (f.frozen && f.lease === 1 && (!v.switchDeadline || (f.token > 0 && s.attempts[f.token - 1].late))) {
      const n = clone(s);
      n.fences[SOURCE].lease = 2;
      out.push({
        label: `clock: the source's lease${f.token ? ` (t${ATTEMPT_NAMES[f.token - 1]})` : ''} runs out: its fence accepts writes at e${f.epoch} again`,
        next: n,
      });
    }
  }

  // ---------------------------------------------------------------- attempts
  if (s.attempts[1].pc === 'idle' && (A.pc !== 'done' || A.outcome === 'threw' || A.outcome === 'crashed')) {
    const n = clone(s);
    n.attempts[1].pc = 'standing';
    out.push({ label: `B is delivered (A ${A.pc === 'done' ? A.outcome : `paused before ${A.pc}`})`, next: n });
  }
  s.attempts.forEach((a, i) => {
    if (a.pc === 'idle' || a.pc === 'done') return;
    const me = i + 1; // this attempt's freeze token
    const nm = ATTEMPT_NAMES[i];
    const step = (label: string, f: (n: ModelState, na: Attempt) => void) => {
      const n = clone(s);
      f(n, n.attempts[i]);
      out.push({ label: `${nm}: ${label}`, next: n });
    };
    const end = (na: Attempt, o: Outcome) => {
      na.pc = 'done';
      na.outcome = o;
    };
    // A worker may die at any instant.
    step(`crashes before ${a.pc}`, (_n, na) => end(na, 'crashed'));

    const d = s.dir;
    const ownerAtEpoch = d.shard === SOURCE && d.epoch === EPOCH;
    const switched = d.shard === TARGET && d.epoch === EPOCH + 1;
    const abortable = a.pc === 'raiseFence' || a.pc === 'apply' || a.pc === 'pin' || a.pc === 'switchAccept';
    if (abortable) {
      step(`aborts before ${a.pc} (budget, mismatch, error): unfreeze`, (_n, na) => (na.pc = v.unfreezeDirectoryFirst ? 'unfreezeCas' : 'unfreezeFenceFirst'));
    }
    switch (a.pc) {
      case 'standing':
        step(`standing reads ${dirStr(s)}`, (_n, na) => {
          if (switched)
            na.pc = 'finish'; // 'switched': finish the owner's side, report done
          else if (ownerAtEpoch && !d.moving) {
            na.pc = 'freeze';
            na.takeover = 0;
          } else if (ownerAtEpoch && d.moving) {
            na.pc = 'freeze';
            na.takeover = d.token;
          } else end(na, 'declined'); // foreign
        });
        break;
      case 'freeze': {
        const ok = a.takeover === 0 ? ownerAtEpoch && !d.moving : ownerAtEpoch && d.moving && d.token === a.takeover;
        const lost = v.lostFreezeRereadsStanding ? 're-reads the standing' : 'declines';
        step(
          ok
            ? `freeze CAS ${a.takeover ? `takes over t${ATTEMPT_NAMES[a.takeover - 1]}'s freeze` : 'active → moving'} with t${nm}`
            : `freeze CAS lost (directory ${dirStr(s)}): ${lost}`,
          (n, na) => {
            if (!ok && v.lostFreezeRereadsStanding) {
              na.pc = 'standing';
              na.takeover = -1;
              return;
            }
            if (!ok) return end(na, 'declined');
            n.dir = { ...n.dir, moving: true, token: me, generation: n.dir.generation + 1 };
            na.gen = n.dir.generation;
            na.pc = 'raiseFence';
          },
        );
        break;
      }
      case 'raiseFence': {
        const superseded = v.raiseCarriesGeneration && s.fences[SOURCE].freezeGen > a.gen;
        step(
          superseded
            ? `raiseFence: freezeSource(source, e${EPOCH}, g${a.gen}) refused (raised at g${s.fences[SOURCE].freezeGen}): aborts, unfreeze`
            : `raiseFence: freezeSource(source, e${EPOCH}${v.raiseCarriesGeneration ? `, g${a.gen}` : ''})`,
          (n, na) => {
            if (superseded) {
              na.pc = v.unfreezeDirectoryFirst ? 'unfreezeCas' : 'unfreezeFenceFirst';
              return;
            }
            // Without generations live.ts ignored the result of freezeSource: a refused raise still counted as raised.
            setFence(n, SOURCE, {
              epoch: EPOCH,
              owned: true,
              frozen: true,
              token: v.fenceCarriesToken ? me : 0,
              lease: v.freezeLease ? 1 : 0,
              freezeGen: v.raiseCarriesGeneration ? a.gen : 0,
            });
            na.pc = 'apply';
          },
        );
        break;
      }
      case 'apply':
        step(`applies to the fence point and compares: target has source writes ${maskStr(s.sourceAcks)}`, (n, na) => {
          na.applied = s.sourceAcks;
          n.targetCopy = s.sourceAcks;
          na.pc = v.pinBeforeSwitch ? 'pin' : 'switchAccept';
        });
        break;
      case 'pin': {
        const f = s.fences[SOURCE];
        const ok = f.epoch === EPOCH && f.owned && f.frozen && f.token === me && f.lease !== 2;
        step(
          ok ? `pinFreeze(source, t${nm}): the freeze no longer runs out` : `pinFreeze(source, t${nm}) refused (fence ${fenceStr(f)}): aborts, unfreeze`,
          (n, na) => {
            if (ok) {
              n.fences[SOURCE].lease = 0;
              na.pc = 'switchAccept';
            } else na.pc = v.unfreezeDirectoryFirst ? 'unfreezeCas' : 'unfreezeFenceFirst';
          },
        );
        break;
      }
      case 'switchAccept': {
        const t = s.fences[TARGET];
        // With generations: a later freeze's attempt already accepted (or took its acceptance back).
        const refused = v.acceptCarriesGeneration && t.epoch === EPOCH + 1 && t.acceptGen > a.gen;
        step(
          refused
            ? `switch: acceptEpoch(target, e${EPOCH + 1}, g${a.gen}) refused (accepted at g${t.acceptGen}): throws`
            : `switch: acceptEpoch(target, e${EPOCH + 1}${v.acceptCarriesGeneration ? `, g${a.gen}` : ''})`,
          (n, na) => {
            if (refused) return end(na, 'threw');
            setFence(n, TARGET, { epoch: EPOCH + 1, owned: true, frozen: false, acceptGen: v.acceptCarriesGeneration ? a.gen : 0 });
            na.pc = 'switchCas';
          },
        );
        break;
      }
      case 'switchCas': {
        const tooLate = v.switchDeadline && a.late;
        const ok = ownerAtEpoch && d.moving && (!v.switchChecksToken || d.token === me) && !tooLate;
        step(
          ok
            ? `switch CAS wins: directory → target e${EPOCH + 1}`
            : `switch CAS ${tooLate ? 'refused past its switch deadline' : 'lost'} (directory ${dirStr(s)})${switched ? ': already switched' : ''}`,
          (n, na) => {
            if (ok) {
              n.dir = { shard: TARGET, epoch: EPOCH + 1, moving: false, token: 0, switchedBy: me, generation: n.dir.generation + 1 };
              na.pc = 'finish';
            } else if (switched) na.pc = 'finish';
            else na.pc = 'switchDisown';
          },
        );
        break;
      }
      case 'switchDisown': {
        const reopen = v.lostSwitchUnfreezes && ownerAtEpoch && !d.moving;
        // Refused by its deadline, the directory still shows this attempt's freeze: undo it (live.ts unfreezeOwn).
        const ownFreeze = v.switchDeadline && ownerAtEpoch && d.moving && d.token === me;
        const t = s.fences[TARGET];
        const mine = !v.acceptCarriesGeneration || (t.epoch === EPOCH + 1 && t.acceptGen === a.gen);
        const what = mine ? `disown(target, e${EPOCH + 1})` : `take-back skipped (target accepted at g${t.acceptGen}, not g${a.gen})`;
        const then = ownFreeze
          ? ', its own freeze still stands: unfreeze'
          : reopen
            ? ', directory shows the owner active: unfreeze (as unfreeze does)'
            : ', then throws';
        step(`${what}${then}`, (n, na) => {
          if (mine) setFence(n, TARGET, { epoch: EPOCH + 1, owned: false, frozen: false });
          if (ownFreeze) na.pc = 'unfreezeCas';
          else if (reopen) na.pc = 'unfreezeFence';
          else end(na, 'threw');
        });
        break;
      }
      case 'finish':
        step(`finishOldOwner: disown(source, e${EPOCH + 1})`, (n, na) => {
          setFence(n, SOURCE, { epoch: EPOCH + 1, owned: false, frozen: false });
          end(na, s.dir.switchedBy === me ? 'switched' : 'already-done');
        });
        break;
      case 'unfreezeCas': {
        const ok = ownerAtEpoch && d.moving && d.token === me;
        step(ok ? 'unfreeze CAS: directory moving → active' : `unfreeze CAS lost (directory ${dirStr(s)})`, (n, na) => {
          if (ok) {
            n.dir = { ...n.dir, moving: false, token: 0, generation: n.dir.generation + 1 };
            na.pc = 'unfreezeFence';
          } else if (switched) {
            // 'switched': ok, alreadyDone; live.ts does not finish the old owner on this path.
            if (v.abortSwitchedFinishes) na.pc = 'finish';
            else end(na, 'already-done');
          } else if (!(ownerAtEpoch && !d.moving))
            end(na, 'declined'); // 'lost': left frozen, fail closed
          else na.pc = 'unfreezeFence';
        });
        break;
      }
      case 'unfreezeFence':
      case 'unfreezeFenceFirst': {
        // With tokens on the fence: this attempt's own freeze, or the one it took over.
        const mine = !v.fenceCarriesToken || s.fences[SOURCE].token === me || (a.takeover > 0 && s.fences[SOURCE].token === a.takeover);
        const guard = `{epoch ${EPOCH}, owned${v.fenceCarriesToken ? `, token t${nm}${a.takeover > 0 ? ` or t${ATTEMPT_NAMES[a.takeover - 1]}` : ''}` : ''}}`;
        const first = a.pc === 'unfreezeFenceFirst';
        step(`unfreeze fence${first ? ' FIRST' : ''}: unfreeze(source, e${EPOCH}) guarded on ${guard}`, (n, na) => {
          if (mine) setFence(n, SOURCE, { epoch: EPOCH, owned: true, frozen: false }, { epoch: EPOCH, owned: true });
          if (first) na.pc = 'unfreezeCasAfterFence';
          else end(na, 'declined');
        });
        break;
      }
      case 'unfreezeCasAfterFence': {
        const ok = ownerAtEpoch && d.moving && d.token === me;
        step(ok ? 'unfreeze CAS: directory moving → active' : `unfreeze CAS lost (directory ${dirStr(s)})`, (n, na) => {
          if (ok) n.dir = { ...n.dir, moving: false, token: 0, generation: n.dir.generation + 1 };
          end(na, switched ? 'already-done' : 'declined');
        });
        break;
      }
    }
  });
  return out;
}

const maskStr = (m: number) => {
  const ids: string[] = [];
  for (let i = 0; 1 << i <= m; i++) if (m & (1 << i)) ids.push(`w${i}`);
  return `{${ids.join(', ')}}`;
};

/** The state's own invariants (the step's are checked in `explore`). */
function checkState(s: ModelState): { invariant: InvariantName; detail: string }[] {
  const bad: { invariant: InvariantName; detail: string }[] = [];
  // 1. Every route a router can hold: the owner's, and the target's once the directory showed it.
  const routes = new Set<string>([`${SOURCE}:${EPOCH}`, `${s.dir.shard}:${s.dir.epoch}`, ...s.routers.map(([sh, ep]) => `${sh}:${ep}`)]);
  const accepting = [SOURCE, TARGET].filter((sh) =>
    [...routes].some((r) => {
      const [rs, re] = r.split(':').map(Number);
      return rs === sh && fenceAccepts(s.fences[sh], re) === 'ok';
    }),
  );
  if (accepting.length > 1)
    bad.push({
      invariant: 'single-authority',
      detail: `both shards accept writes: source ${fenceStr(s.fences[SOURCE])}, target ${fenceStr(s.fences[TARGET])}, directory ${dirStr(s)}`,
    });

  // 2. Once switched, the new owner has every write the old one acknowledged.
  if (s.dir.shard === TARGET) {
    const missing = s.sourceAcks & ~s.targetCopy;
    if (missing) bad.push({ invariant: 'no-lost-write', detail: `source acknowledged ${maskStr(missing)}, which the target does not have` });
    const sw = s.attempts[s.dir.switchedBy - 1];
    const unseen = s.sourceAcks & ~sw.applied;
    if (unseen)
      bad.push({
        invariant: 'switch-saw-every-write',
        detail: `${ATTEMPT_NAMES[s.dir.switchedBy - 1]} switched having compared ${maskStr(sw.applied)}; the source acknowledged ${maskStr(unseen)} outside it`,
      });
  }

  // Once the activity has its answer and no attempt is left running or due.
  const answer = settledAnswer(s);
  if (answer) {
    const crashed = s.attempts.some((a) => a.outcome === 'crashed');
    const frozen = s.dir.moving || (s.dir.shard === SOURCE && s.fences[SOURCE].owned && s.fences[SOURCE].frozen && s.fences[SOURCE].lease !== 2);
    // A crashed attempt may have left its freeze (or a late raise) behind: the brief's exception
    // (the directory shows another attempt's freeze) and the residual risk of a dead zombie.
    if (frozen && !crashed)
      bad.push({
        invariant: 'fail-open',
        detail: `every attempt ended without a crash, the answer is ${answer.outcome}, and the unit is left frozen: directory ${dirStr(s)}, source fence ${fenceStr(s.fences[SOURCE])}`,
      });
    // (A 'declined' answer while switched can be honest: a superseded attempt may switch after the
    // last delivery answered; the workflow's next cutover try reads 'switched' and finishes.)
    const ok = answer.outcome === 'switched' || answer.outcome === 'already-done';
    if (ok && s.dir.shard !== TARGET)
      bad.push({ invariant: 'ok-answer-is-true', detail: `the activity answers ok (${answer.outcome}) but the directory says ${dirStr(s)}` });
    if (ok && s.fences[SOURCE].owned)
      bad.push({ invariant: 'old-owner-finished', detail: `the answer is ok and the old owner still owns the unit: ${fenceStr(s.fences[SOURCE])}` });
    // Fail closed must not become closed for good: the owner the directory names, active, takes
    // the unit's writes at its epoch (a crash may leave a freeze behind, never a switch to nobody).
    if (!s.dir.moving && fenceAccepts(s.fences[s.dir.shard], s.dir.epoch) !== 'ok' && !(crashed && s.dir.shard === SOURCE))
      bad.push({
        invariant: 'owner-accepts',
        detail: `the directory says ${dirStr(s)} but ${SHARD_NAMES[s.dir.shard]}'s fence ${fenceStr(s.fences[s.dir.shard])} refuses the unit's writes at e${s.dir.epoch}`,
      });
  }
  return bad;
}

/**
 * The attempt whose answer the activity returns, once no attempt is running and that answer is
 * final: the last delivery (B if delivered, else A) returned ok or declined. A crashed or thrown
 * last delivery is not final: Temporal redelivers it (beyond this model's two attempts).
 */
function settledAnswer(s: ModelState): Attempt | null {
  const [A, B] = s.attempts;
  if (A.pc !== 'done') return null;
  const last = B.pc === 'idle' ? A : B;
  if (last.pc !== 'done' || last.outcome === 'crashed' || last.outcome === 'threw') return null;
  return last;
}

/** Explores every interleaving breadth-first; returns the shortest counterexample per invariant. */
export function explore(variant: ProtocolVariant, bounds: ModelBounds = DEFAULT_BOUNDS, goal?: (s: ModelState) => boolean): ExploreResult {
  const start = initial(bounds);
  const seen = new Map<string, { parent: string | null; label: string }>();
  const k0 = key(start);
  seen.set(k0, { parent: null, label: 'initial' });
  const queue: [string, ModelState][] = [[k0, start]];
  const found = new Map<InvariantName, Violation>();
  let transitions = 0;
  let settledCount = 0;
  let reached: string[] | null = null;
  const traceTo = (k: string): string[] => {
    const t: string[] = [];
    for (let c: string | null = k; c !== null;) {
      const e: { parent: string | null; label: string } = seen.get(c)!;
      if (e.parent !== null) t.push(e.label);
      c = e.parent;
    }
    return t.reverse();
  };
  const report = (invariant: InvariantName, detail: string, trace: string[]) => {
    if (!found.has(invariant)) found.set(invariant, { invariant, detail, trace });
  };
  for (const b of checkState(start)) report(b.invariant, b.detail, []);

  for (let qi = 0; qi < queue.length; qi++) {
    const [k, s] = queue[qi];
    if (settledAnswer(s)) settledCount++;
    for (const st of successors(s, variant, bounds)) {
      transitions++;
      const n = st.next;
      const dropped = n.dir.epoch < s.dir.epoch || n.fences.some((f, i) => f.epoch < s.fences[i].epoch) || n.routers.some(([, ep], i) => ep < s.routers[i][1]);
      if (dropped) report('epochs-only-increase', `an epoch went down in: ${st.label}`, [...traceTo(k), st.label]);
      if (st.broken) report(st.broken.invariant, st.broken.detail, [...traceTo(k), st.label]);
      const nk = key(n);
      if (seen.has(nk)) continue;
      seen.set(nk, { parent: k, label: st.label });
      queue.push([nk, n]);
      for (const b of checkState(n)) report(b.invariant, b.detail, traceTo(nk));
      if (goal && reached === null && goal(n)) reached = traceTo(nk);
    }
  }
  return { states: seen.size, transitions, settled: settledCount, reached, violations: INVARIANTS.flatMap((i) => (found.has(i) ? [found.get(i)!] : [])) };
}

/** A counterexample as numbered lines, for a failing test or a report. */
export function formatViolation(v: Violation): string {
  return [`${v.invariant}: ${v.detail}`, ...v.trace.map((t, i) => `  ${String(i + 1).padStart(2)}. ${t}`)].join('\n');
}
