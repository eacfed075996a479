// The live implementation of the cutover's steps (see steps.ts): the directory, the two shards'
// fences and the replication stream. Every statement is a named function of the module that
// owns its table. Node-only. The pools are the worker's frozen-window pools (activities/deps.ts):
// every statement is bounded, so a step against a dead or blackholed server fails, never hangs.
import type { Pool } from 'pg';
import type { TenantTable } from '../shard/tables';
import { getPlacement, compareAndSetPlacement } from '../directory/placements';
import { measuredPauseMs, frozenForMs } from '../directory/moves';
import { randomUUID } from 'node:crypto';
import { freezeSource, unfreeze, acceptEpoch, disown, takeBackAcceptance, pinFreeze } from '../shard/fence';
import { applyChangesUntil, currentWalLsn } from '../cdc';
import type { SubUnitStream } from '../cdc/sub-unit-filter';
import { openFinalApply, type FinalApply } from './final-apply';
import { fingerprintUnit, fingerprintUnitKeys, fingerprintDiff } from '../validate/fingerprint';
import { readDelta } from '../cdc/delta';
import type { CopyBlobPrefixResult } from '../blobs/copy';
import { blobNamesOfDeltaKeys, type IndexDeltaResult } from '../blobs/index-delta';
import { BLOB_INDEX_QUALIFIED } from '../blobs/index-table';
import { replicationNames } from '../ids';
import { advanceSequencesForUnit } from '../shard/sequences';
import { unownedWritesSince } from '../shard/write-audit';
import { awaitQuietWriters, describeLongWriter, describeWriters, unitWriters } from '../shard/unit-writers';
import { CUTOVER_FAULT_POINTS, type CutoverPlan, type CutoverSteps, type Standing, type UnfreezeOutcome, type WindowBlobSync } from './steps';

/** The least time a frozen-window apply statement or stream read is given, however little budget is left. */
const FENCE_APPLY_MIN_WAIT_MS = 500;
export interface LiveCutoverEnv {
  directory: Pool;
  ownerPool: Pool;
  nextPool: Pool;
  /** The owner's DSN, for the replication connection (resolved by the worker from config). */
  ownerDsn: string;
  /** The unit's row predicate, `<tenantColumn> = <unitValue>` (lib/unit-rows.ts): a tenant's column and id, or a bucket column and number. */
  tenantColumn: string;
  /** Default: the unit's name (a tenant). */
  unitValue?: string;
  /** A split tenant's sub-unit: its K, which the next owner's fence records when it accepts (acceptEpoch). */
  splitWays?: number;
  /** A split tenant's sub-unit: the stream filter its final apply keeps to (lib/cdc/sub-unit-filter.ts). */
  subUnit?: SubUnitStream;
  tables(): Promise<TenantTable[]>;
  /**
   * The whole-prefix blob sync (lib/blobs/copy.ts): before the freeze, and the final delta of a unit
   * not written only through the blob index. `fromIndex` (the pre-sync, outside the pause): version
   * objects only when the source's index names them (one read of the unit's index).
   */
  syncBlobs(
    signal?: AbortSignal,
    opts?: { fromIndex?: boolean },
  ): Promise<Pick<CopyBlobPrefixResult, 'sourceObjects' | 'unversioned'> & Partial<Pick<CopyBlobPrefixResult, 'copied' | 'atDestination'>>>;
  /**
   * The final delta of a unit written only through the blob index: the objects its changed index
   * rows name (lib/blobs/index-delta.ts). Absent: the final delta is always the whole-prefix sync.
   */
  syncChangedBlobs?(names: readonly string[], seenAtDestination?: CopyBlobPrefixResult['atDestination']): Promise<IndexDeltaResult>;
  /** Tenant tables of a shard without an enabled fence trigger (the same check as `shards list`). */
  unfencedTables(side: 'owner' | 'next'): Promise<string[]>;
  maxTxBytes: number;
  /**
   * At most this many changed keys are compared under the fence (the stream's delta since the last
   * full comparison); a larger or untracked delta compares the whole unit instead.
   */
  deltaCompareMaxKeys?: number;
  /** The token of the full comparison the move knows (validateMove's); forward only, absent = compare the whole unit. */
  deltaToken?: string;
  /**
   * Before a freeze: wait until no writer has held the unit's write lock on the owner `longMs`,
   * at most `maxWaitMs` (lib/shard/unit-writers.ts). Absent: no wait.
   */
  longWrites?: { longMs: number; maxWaitMs: number };
  /** Heartbeat with a detail (a no-op outside an activity). */
  beat(detail?: unknown): void;
  /** Named fault points inside a step (the crash suite kills the worker there). */
  faultPoint?(name: string): Promise<void>;
}

/** How long the opened final catch-up may take to catch up before the freeze goes ahead without waiting more. */
const FINAL_APPLY_CATCH_UP_WAIT_MS = 10_000;

/** Default bound of the changed keys compared under the fence (see LiveCutoverEnv.deltaCompareMaxKeys). */
export const DELTA_COMPARE_MAX_KEYS = 50_000;

export function liveCutoverSteps(plan: CutoverPlan, env: LiveCutoverEnv): CutoverSteps {
  const { unit, moveId, owner, next, epoch } = plan;
  const newEpoch = epoch + 1;
  const rowsValue = env.unitValue ?? unit;
  const switchAction = plan.direction === 'forward' ? 'switch' : 'rollback-switch';
  // This attempt's freeze token: unique per freeze, never reused (a freeze after a lost
  // compare-and-set, or after a raise that long writers outlasted, takes a new one); and the token
  // of an earlier attempt's freeze this one took over (it may still be on the fence if that
  // attempt's raise was the last).
  let token = randomUUID();
  let froze = false;
  // This freeze's raise timed out on the unit's lock (so it rolled back): its unfreeze need not
  // queue behind the writers that held it up (lib/shard/fence.ts unfreeze).
  let raiseRolledBack = false;
  // What this attempt's waits for long writers took so far (they share limits.longWriteMaxWaitMs).
  let quietWaitedMs = 0;
  let takenOver: string | undefined;
  const myTokens = () => (takenOver ? [token, takenOver] : [token]);
  // The directory generation of this attempt's freeze: every later freeze (a takeover, or a fresh
  // freeze after an unfreeze) has a higher one. The next owner's acceptance carries it.
  let freezeGen: number | undefined;
  // Marks this attempt's fence point in the change stream (lib/shard/fence.ts FENCE_MARKER_PREFIX).
  // One per attempt, not per freeze: the final apply opened before the first freeze waits for it,
  // and at most one raise of an attempt commits (a try is retried only when its raise rolled back).
  const fenceMarker = `${moveId}/${randomUUID()}`;
  // The final catch-up opened before the freeze (openFinalApply), until applyToFencePoint uses it.
  let finalApply: FinalApply | undefined;
  // What this attempt's whole-prefix sync before the freeze saw at the source: when every object
  // was a version object of the blob index, the final delta is bounded by the changed index rows.
  let preSynced: (Pick<CopyBlobPrefixResult, 'sourceObjects' | 'unversioned'> & Partial<Pick<CopyBlobPrefixResult, 'atDestination'>>) | undefined;
  // The final whole-prefix sync, when startFinalBlobSync started it beside the final catch-up.
  let earlyBlobs: { done: Promise<WindowBlobSync>; stop: AbortController } | undefined;
  let windowBlobs: WindowBlobSync | undefined;
  const prefixSync = (r: { sourceObjects: number; copied?: number }): WindowBlobSync => ({ via: 'prefix', objects: r.sourceObjects, copied: r.copied ?? 0 });
  // The owner's tenant tables as read inside this attempt's window (the compare's, then the
  // sequences'): one catalog read per window, not one per step.
  let windowTables: Promise<TenantTable[]> | undefined;
  const tablesOfWindow = () => (windowTables ??= env.tables());
  /** Whether the final blob delta can be the bounded one (decided for good once the delta keys are read). */
  const mayUseIndexedDelta = () => !!env.syncChangedBlobs && !!preSynced && preSynced.sourceObjects > 0 && preSynced.unversioned === 0;
  /** Stops the early final blob sync if it still runs and waits for it to end (an abandoned attempt must not leave a sync behind). */
  async function stopEarlyBlobs(): Promise<void> {
    const e = earlyBlobs;
    earlyBlobs = undefined;
    if (!e) return;
    e.stop.abort(new Error('the cutover attempt ended before its final blob sync did'));
    await e.done.catch(() => {});
  }
  const applyNames = { ...replicationNames(moveId, plan.direction), moveId, stream: plan.direction, subUnit: env.subUnit } as const;
  // Inside the frozen window every wait is bounded by the budget, not by the catch-up's own bounds
  // (a 10 s receive deadline, 30 s statements): a next owner that stops answering mid-apply must end
  // the attempt (and unfreeze) within the budget.
  const windowWaitMs = (budgetMs: number) => Math.max(FENCE_APPLY_MIN_WAIT_MS, budgetMs);

  /** Undoes this attempt's freeze: the directory first (only this freeze), then the guarded fence. */
  async function unfreezeOwn(reason: string): Promise<UnfreezeOutcome> {
    // The directory goes first (moving -> active, only for this move): if another delivery
    // already switched, the old owner must stay fenced, so the fence is lowered only after
    // that compare-and-set, and only from the state this move set.
    const cas = await compareAndSetPlacement(
      env.directory,
      unit,
      { shard: owner, epoch, state: 'moving', moveId, freezeToken: token },
      { shard: owner, state: 'active', moveId: null },
      { actor: plan.actor, action: 'unfreeze', reason, detail: { moveId, freezeToken: token } },
    );
    if (!cas.ok) {
      const cur = cas.current;
      if (cur && cur.shard === next && cur.epoch === newEpoch) return 'switched';
      if (!(cur && cur.shard === owner && cur.epoch === epoch && cur.state === 'active')) return 'lost';
    }
    await unfreeze(env.ownerPool, unit, epoch, myTokens(), { noRaiseInFlight: raiseRolledBack });
    return 'unfrozen';
  }

  return {
    async standing(): Promise<Standing> {
      const p = await getPlacement(env.directory, unit);
      if (!p) return { kind: 'foreign', reason: `unit ${unit} vanished from the directory` };
      if (p.shard === next && p.epoch === newEpoch) return { kind: 'switched' };
      if (p.shard === owner && p.epoch === epoch && p.state === 'active') {
        // A table whose fence trigger is missing or disabled would let writes through the freeze.
        for (const side of ['owner', 'next'] as const) {
          const bad = await env.unfencedTables(side);
          if (bad.length) {
            const shard = side === 'owner' ? owner : next;
            return { kind: 'foreign', reason: `table ${bad[0]} on ${shard} has no enabled fence trigger; run \`shardctl shards prepare --shard ${shard}\`` };
          }
        }
        return { kind: 'open' };
      }
      if (p.shard === owner && p.epoch === epoch && p.moveId === moveId) return { kind: 'frozen-by-this-move', token: p.freezeToken };
      return {
        kind: 'foreign',
        reason: `directory changed under the move: ${p.unit} is ${p.state} on ${p.shard} at epoch ${p.epoch} (move ${p.moveId ?? '-'})`,
      };
    },

    async preSyncBlobs() {
      preSynced = await env.syncBlobs(undefined, { fromIndex: true });
    },

    async openFinalApply() {
      // Its waits are the frozen window's from the start: it is opened for the window.
      const opened = openFinalApply({
        sourceDsn: env.ownerDsn,
        sourceName: owner,
        target: env.nextPool,
        targetName: next,
        ...applyNames,
        untilMarker: fenceMarker,
        receiveTimeoutMs: windowWaitMs(plan.fenceBudgetMs),
        applyQueryTimeoutMs: windowWaitMs(plan.fenceBudgetMs),
        maxTxBytes: env.maxTxBytes,
      });
      let timer: ReturnType<typeof setTimeout> | undefined;
      const waited = await Promise.race([opened.caughtUp, new Promise<'late'>((r) => (timer = setTimeout(() => r('late'), FINAL_APPLY_CATCH_UP_WAIT_MS)))]);
      clearTimeout(timer);
      env.beat({ step: 'final apply opened', caughtUp: waited === true });
      // A round that ended already (its session failed) is of no use: the apply opens its own.
      if (waited === false || !opened.usable()) opened.close();
      else finalApply = opened;
    },

    closeFinalApply() {
      finalApply?.close();
      finalApply = undefined;
    },

    startFinalBlobSync() {
      // A unit not written only through the blob index gets the whole-prefix sync whatever the
      // stream's delta says: it needs nothing from the catch-up, so it runs beside it. Under the
      // raised fence no write of the unit can still commit, and an object a committed write
      // references was put before that write committed, so the listing sees it.
      if (mayUseIndexedDelta() || earlyBlobs) return;
      const stop = new AbortController();
      const done = env.syncBlobs(stop.signal).then(prefixSync);
      done.catch(() => {}); // awaited by compare, or stopped by unfreeze; never an unhandled rejection
      earlyBlobs = { done, stop };
    },

    async freeze(standing) {
      const takeover = standing.kind === 'frozen-by-this-move';
      if (takeover && standing.token) takenOver = standing.token;
      if (froze) token = randomUUID();
      froze = true;
      raiseRolledBack = false;
      const cas = await compareAndSetPlacement(
        env.directory,
        unit,
        takeover ? { shard: owner, epoch, state: 'moving', moveId, freezeToken: standing.token ?? null } : { shard: owner, epoch, state: 'active' },
        // The switch deadline starts now, on the directory's clock, before the owner's lease does.
        { shard: owner, state: 'moving', moveId, freezeToken: token, switchWithinMs: plan.lease.switchWithinMs },
        // A takeover is not a new freeze: the pause is measured from the first one.
        { actor: plan.actor, action: takeover ? 'refreeze' : 'freeze', detail: { moveId, direction: plan.direction, freezeToken: token } },
      );
      if (cas.ok) {
        freezeGen = cas.generation;
        return { ok: true };
      }
      return { ok: false, reason: `lost the race to freeze ${unit} (another attempt froze or took it over): ${JSON.stringify(cas.current)}` };
    },

    async awaitQuietWriters() {
      const o = env.longWrites;
      // One bound for the attempt's waits together, however many tries it makes: the attempt must
      // end well within the cutover activity's own timeout.
      const maxWaitMs = o ? o.maxWaitMs - quietWaitedMs : 0;
      if (!o || o.longMs <= 0 || maxWaitMs <= 0) return 0;
      const w = await awaitQuietWriters(env.ownerPool, unit, {
        longMs: o.longMs,
        maxWaitMs,
        onWait: (ws, waitedMs) => env.beat({ step: 'waiting for long writers before the freeze', waitedMs, writers: ws.slice(0, 5) }),
      });
      quietWaitedMs += w.waitedMs;
      if (!w.longest) return 0;
      env.beat({
        step: w.gaveUp ? 'freezing with a long writer still in flight' : 'long writers done',
        waitedMs: w.waitedMs,
        longest: describeLongWriter(w.longest),
      });
      return w.waitedMs;
    },

    async raiseFence(lockBudgetMs) {
      // Returns once every in-flight writer of the unit has finished. A writer holding its
      // transaction open past the budget makes us back off, never wait open-ended.
      if (freezeGen === undefined) throw new Error(`raise of ${unit}'s fence without a freeze of this attempt`);
      try {
        // A lease: cut off from us, the owner reopens the unit's writes by itself once it runs out.
        // Ordered by freeze generation: a later freeze's raise (perhaps pinned already) is never replaced.
        const r = await freezeSource(env.ownerPool, unit, epoch, {
          lockTimeoutMs: lockBudgetMs,
          token,
          marker: fenceMarker,
          leaseMs: plan.lease.leaseMs,
          gen: freezeGen,
        });
        if (r.ok) return { ok: true };
        const f = r.current;
        return {
          ok: false,
          reason: `${owner}'s fence of ${unit} was not raised for this attempt: ${f && f.epoch > epoch ? `it is at epoch ${f.epoch}` : `a later freeze (generation ${f?.freezeGen}, this attempt's ${freezeGen}) raised it`}`,
        };
      } catch (e: any) {
        if (e?.code !== '55P03') throw e;
        raiseRolledBack = true;
        // Who held it up, for the operator (one read of pg_locks; no query text).
        const who = describeWriters(await unitWriters(env.ownerPool, unit).catch(() => []));
        return { ok: false, writersHeld: true, reason: `in-flight writers of ${unit} held the fence lock longer than the budget of ${lockBudgetMs} ms${who}` };
      }
    },

    async applyToFencePoint(budgetMs) {
      // Where the owner's WAL stood after the fence (recorded with the switch), asked beside the apply.
      const fenceLsnAsked = currentWalLsn(env.ownerPool);
      fenceLsnAsked.catch(() => {});
      const opened = finalApply;
      finalApply = undefined;
      if (opened?.usable()) {
        // The stream is open and caught up: only the changes since, up to this attempt's marker (or
        // the owner's WAL position after the fence, whichever it reaches first).
        fenceLsnAsked.then(
          (l) => opened.stopAt(l),
          () => {},
        );
        const stop = await opened.fenced(budgetMs);
        const fenceLsn = await fenceLsnAsked;
        env.beat({ step: 'applied', appliedLsn: stop.appliedLsn, opened: 'before the freeze' });
        if (stop.stopReason !== 'until')
          return { ok: false, reason: `final catch-up did not reach the fence marker (${fenceLsn}) within the fence budget of ${plan.fenceBudgetMs} ms` };
        return { ok: true, fenceLsn };
      }
      const fenceLsn = await fenceLsnAsked;
      const applied = await applyChangesUntil({
        sourceDsn: env.ownerDsn,
        target: env.nextPool,
        ...applyNames,
        untilLsn: fenceLsn,
        // The raise's own marker: applied as soon as it arrives, without waiting for a keepalive.
        untilMarker: fenceMarker,
        maxDurationMs: budgetMs,
        receiveTimeoutMs: windowWaitMs(budgetMs),
        applyQueryTimeoutMs: windowWaitMs(budgetMs),
        maxTxBytes: env.maxTxBytes,
      });
      env.beat({ step: 'applied', appliedLsn: applied.appliedLsn });
      if (!applied.caughtUp) return { ok: false, reason: `final catch-up did not reach ${fenceLsn} within the fence budget of ${plan.fenceBudgetMs} ms` };
      return { ok: true, fenceLsn };
    },

    async compare(mark) {
      // The final blob delta and the row fingerprints are independent: run them side by side.
      // Only what the stream changed since the last full comparison (lib/cdc/delta.ts says why that
      // is enough), never a scan of the unit; the whole unit when there is no usable delta.
      // Forward: only the delta of the comparison the workflow saw pass (a superseded validation may
      // have restarted it since). Reverse: started once, at the switch, and never restarted.
      // The owner's catalog and the next owner's delta are read at once.
      const expect = plan.direction === 'reverse' ? ('any' as const) : env.deltaToken ? { token: env.deltaToken } : null;
      const [tables, delta] = await Promise.all([
        tablesOfWindow(),
        expect
          ? readDelta(env.nextPool, moveId, plan.direction, env.deltaCompareMaxKeys ?? DELTA_COMPARE_MAX_KEYS, expect)
          : Promise.resolve({ tracked: false, why: 'no comparison token given' } as const),
      ]);
      mark('delta read');
      const known = new Set(tables.map((t) => `${t.schema}.${t.name}`));
      const keys = delta.tracked && !delta.overflow && [...delta.tables.keys()].every((t) => known.has(t)) ? delta.tables : null;
      const fingerprint = (pool: Pool) =>
        keys ? fingerprintUnitKeys(pool, tables, env.tenantColumn, rowsValue, keys) : fingerprintUnit(pool, tables, env.tenantColumn, rowsValue);
      // The delta covers the stream; a write on the next owner behind the stream's back (a session
      // bypassing its fence) is in its write audit instead: any since the delta started fails the compare.
      const bypass =
        keys && delta.tracked
          ? unownedWritesSince(env.nextPool, env.subUnit?.tenant ?? unit, { snapshot: delta.sinceSnapshot, epochSeconds: delta.since })
          : Promise.resolve({ count: 0, example: null });
      const blobIndex = tables.find((t) => `${t.schema}.${t.name}` === BLOB_INDEX_QUALIFIED);
      // Bounded only when the whole-prefix sync of this attempt, just before the freeze, found the
      // unit's objects all to be index versions (a unit also written behind the index, or none
      // yet, gets the whole-prefix sync: an object written there leaves no trace in the delta).
      const changedBlobs = keys && blobIndex && mayUseIndexedDelta() ? blobNamesOfDeltaKeys(keys.get(BLOB_INDEX_QUALIFIED) ?? [], blobIndex.primaryKey) : null;
      const syncBlobs = async (): Promise<WindowBlobSync> => {
        if (earlyBlobs) return earlyBlobs.done;
        if (!changedBlobs) return prefixSync(await env.syncBlobs());
        // What the sync right before the freeze saw at the next owner needs no HEAD now (index-delta.ts says why).
        const r = await env.syncChangedBlobs!(changedBlobs, preSynced?.atDestination);
        env.beat({ step: 'blob delta', names: changedBlobs.length, referenced: r.referenced, copied: r.copied, requests: r.requests });
        return { via: 'index', objects: changedBlobs.length, copied: r.copied, requests: r.requests };
      };
      const rows = Promise.all([fingerprint(env.ownerPool), fingerprint(env.nextPool), bypass]).then((r) => {
        mark('rows');
        return r;
      });
      const [, [a, b, written]] = await Promise.all([
        syncBlobs().then((w) => {
          windowBlobs = w;
          mark(w.via === 'index' ? 'blobs via index' : 'blobs');
        }),
        rows,
      ]);
      env.beat({
        step: 'compared',
        compared: keys ? 'delta' : 'whole unit',
        keys: delta.tracked ? delta.total : null,
        why: keys
          ? undefined
          : !delta.tracked
            ? delta.why
            : delta.overflow
              ? `delta over ${env.deltaCompareMaxKeys ?? DELTA_COMPARE_MAX_KEYS} keys`
              : 'delta names an unknown table',
      });
      const diff = fingerprintDiff(a, b).map((d) => (keys ? `${d} (among ${delta.tracked ? delta.total : 0} changed keys)` : d));
      if (written.count > 0)
        diff.push(
          `${written.count} write(s) reached ${unit} on ${next} bypassing its fence since the last validation (application_name ${JSON.stringify(written.example)}): validate again`,
        );
      return diff;
    },

    windowBlobSync: () => windowBlobs,

    async advanceSequences() {
      // Under the fence the unit cannot write on either side, and the next owner holds every row
      // it will hold at the switch: its max per sequence-fed column is final.
      try {
        const advanced = await advanceSequencesForUnit(env.nextPool, await tablesOfWindow(), env.tenantColumn, rowsValue);
        env.beat({ step: 'sequences', advanced: advanced.filter((a) => a.nextAfter !== a.nextBefore).length });
        return { ok: true };
      } catch (e: any) {
        return { ok: false, reason: `could not advance ${next}'s sequences past ${unit}'s values: ${e?.message ?? e}` };
      }
    },

    async reverseStartLsn() {
      // Everything the next owner committed so far came from the owner; only writes after the
      // switch must flow back.
      return currentWalLsn(env.nextPool);
    },

    async pinFreeze() {
      const pinned = await pinFreeze(env.ownerPool, unit, epoch, token);
      if (pinned.ok) return { ok: true };
      const f = pinned.current;
      const why = f?.leaseExpired
        ? `its lease of ${plan.lease.leaseMs} ms ran out on ${owner}`
        : `${owner}'s fence is no longer this attempt's freeze (${f ? `epoch ${f.epoch}, ${f.owned ? 'owned' : 'not owned'}, ${f.frozen ? 'frozen' : 'open'}` : 'no fence'})`;
      return { ok: false, reason: `could not pin the freeze of ${unit} before the switch: ${why}` };
    },

    async switchOwner(fenceLsn, reverseStartLsn) {
      if (freezeGen === undefined) throw new Error(`switch of ${unit} without a freeze of this attempt`);
      let accepted: Awaited<ReturnType<typeof acceptEpoch>>;
      try {
        accepted = await acceptEpoch(env.nextPool, unit, newEpoch, freezeGen, env.splitWays);
      } catch (e: any) {
        // The next owner did not answer (down, partitioned, too slow): nothing is switched, so
        // fail open now instead of holding the pinned freeze until a later attempt takes it over
        // (the lease cannot end a pinned freeze). An acceptance the next owner recorded without
        // answering is taken back if it answers now; a later attempt's (a later freeze generation)
        // overrides it anyway, and no router learns of this epoch unless a switch publishes it.
        const u = await unfreezeOwn(`${next} did not answer the acceptance of epoch ${newEpoch}`);
        if (u === 'switched') return;
        await takeBackAcceptance(env.nextPool, unit, newEpoch, freezeGen).catch(() => {});
        throw new Error(
          `switch not made: ${next} did not answer accepting ${unit} at epoch ${newEpoch} (${e?.message ?? e}); ${unit} ${u === 'unfrozen' ? 'unfrozen on' : 'left as is on'} ${owner}, will retry`,
        );
      }
      if (!accepted.ok) {
        // An attempt of a later freeze accepted first: it decides (switches or takes it back).
        // Nothing of this attempt's is on the next owner; its freeze was taken over.
        const cur = await getPlacement(env.directory, unit);
        if (cur && cur.shard === next && cur.epoch === newEpoch) return;
        throw new Error(
          `switch superseded: ${next} accepted ${unit} at epoch ${accepted.current?.epoch} for a later attempt (generation ${accepted.current?.acceptGen}, this attempt's ${freezeGen}); ${unit} stays frozen on ${owner}`,
        );
      }
      await env.faultPoint?.(CUTOVER_FAULT_POINTS.afterAcceptEpoch(plan.direction));
      // Only from this attempt's own freeze (a late attempt cannot switch on another's), and only
      // before its switch deadline on the directory's clock: the owner's lease, started after the
      // deadline's clock, is then still running (lib/cutover/lease.ts), and the freeze is pinned.
      const cas = await compareAndSetPlacement(
        env.directory,
        unit,
        { shard: owner, epoch, state: 'moving', moveId, freezeToken: token, beforeSwitchDeadline: true },
        { shard: next, state: 'active', moveId: null },
        { actor: plan.actor, action: switchAction, detail: { moveId, from: owner, to: next, fenceLsn, freezeToken: token, reverseStartLsn } },
      );
      // The reverse start is recorded once, atomically with the winning switch, in its audit
      // entry; the soak's first round copies it to the old owner (never a late attempt).
      if (cas.ok) return;
      const cur = cas.current;
      if (cur && cur.shard === next && cur.epoch === newEpoch) return;
      // Someone else changed the placement (e.g. a concurrent delivery took the freeze over, or
      // aborted and unfroze): take back this attempt's own acceptance (never a later attempt's,
      // which may be switching the directory to it now), then fail; the next delivery decides afresh.
      await takeBackAcceptance(env.nextPool, unit, newEpoch, freezeGen);
      if (cur && cur.shard === owner && cur.epoch === epoch && cur.state === 'moving' && cur.freezeToken === token) {
        // Still this attempt's freeze: refused by its switch deadline. Nothing switched; undo the
        // freeze as any abort does (its pin means the lease will not do it for us).
        const u = await unfreezeOwn('switch refused after the switch deadline');
        throw new Error(
          `switch refused: the directory's switch deadline for this freeze (${cur.switchDeadline ?? 'none'}) had passed; ${unit} ${u === 'unfrozen' ? 'unfrozen on' : 'left as is on'} ${owner}, will retry`,
        );
      }
      // If the directory shows the owner open again, the fence this attempt raised late must not
      // stay up (fail open); the guard leaves any other attempt's freeze alone.
      if (cur && cur.shard === owner && cur.epoch === epoch && cur.state === 'active') await unfreeze(env.ownerPool, unit, epoch, myTokens());
      throw new Error(`switch compare-and-set lost: directory shows ${JSON.stringify(cur)}; ${unit} stays frozen on ${owner}`);
    },

    async finishOldOwner() {
      // Idempotent, and a no-op once done: a late attempt cannot move the fence's timestamps.
      // (A winner that died before recording the reverse start leaves it to the soak's first
      // round, which reads it from the switch's audit entry; a late attempt never writes it.)
      await disown(env.ownerPool, unit, newEpoch);
    },

    async unfreeze(reason) {
      // The tenant is unfrozen first; then a final blob sync this attempt started is stopped.
      try {
        return await unfreezeOwn(reason);
      } finally {
        await stopEarlyBlobs();
      }
    },

    measuredPauseMs() {
      return measuredPauseMs(env.directory, unit, moveId, switchAction);
    },
    frozenForMs() {
      return frozenForMs(env.directory, unit, moveId);
    },
  };
}
