// `shardctl doctor`'s judgement, pure: from the facts gathered on the fleet (lib/doctor/facts.ts)
// to findings, each with the exact command that fixes it. The one rule for replication objects:
// a slot or publication named like ours is an orphan only when no running move can own it. A
// running move whose id is unknown (its status could not be queried) protects every name its unit
// could produce, and without Temporal nothing is called an orphan at all.
import { replicationNames, replicationNamePattern } from '../ids';
import { bucketUnitName, parseUnit, type ParsedUnit } from '../buckets/units';
import { SEARCH_ATTRIBUTES } from '../dev/topology';

export interface SlotFact {
  name: string;
  active: boolean;
  /** WAL held back: pg_current_wal_lsn() - restart_lsn (null for a slot that never reserved WAL). */
  retainedBytes: number | null;
  walStatus: string | null;
}
export interface FenceFact {
  unit: string;
  epoch: number;
  owned: boolean;
  frozen: boolean;
}
export interface ShardFacts {
  shard: string;
  host: string;
  reachable: boolean;
  error?: string;
  slots: SlotFact[];
  publications: string[];
  schemaInstalled: boolean;
  fences: FenceFact[];
  /** Tenant tables without an enabled fence trigger. */
  unfenced: string[];
  /** Units placed elsewhere with objects in this shard's bucket that its blob ledger does not account for. */
  foreignBlobs: ForeignBlobFact[];
  /** Why the bucket could not be listed (absent: it was). */
  bucketError?: string;
  /** The bucket count B each bucketed dataset is recorded with on this shard (`shards prepare`); absent: not read. */
  datasetBuckets?: Record<string, number>;
  /** Each bucket unit of a configured dataset with rows in a dataset table here (absent: not read). */
  bucketRows?: BucketRowsFact[];
}
export interface BucketRowsFact {
  unit: string;
  /** The dataset table (quoted, `"schema"."name"`) and its bucket column. */
  table: string;
  column: string;
  bucket: number;
}
export interface ForeignBlobFact {
  shard: string;
  bucket: string;
  unit: string;
  /** The shard the directory places the unit on. */
  owner: string;
  /** The shard's ledger has rows for the unit (a sync left its record there). */
  tracked: boolean;
  /** How many objects are unaccounted for; `objects` shows the first of them. */
  total: number;
  objects: { key: string; change: 'written' | 'changed' | 'deleted' }[];
}
export interface ReservationFact {
  moveId: string;
  unit: string;
  source: string;
  target: string;
  load: number;
  workflowId: string;
  takenAt: string;
}
export interface PlacementFact {
  unit: string;
  shard: string;
  epoch: number;
  state: 'active' | 'moving';
  moveId: string | null;
}
export interface RunningMove {
  unit: string;
  workflowId: string;
  /** From the move's status query; null when it could not be asked (no worker polling, timeout). */
  moveId: string | null;
  phase: string | null;
  blockedReason: string | null;
  /** When the move entered its phase (status query; null when unknown). */
  phaseSince: string | null;
  soakEndsAt: string | null;
}
export interface Facts {
  directory: {
    reachable: boolean;
    error?: string;
    placements: PlacementFact[];
    moveTargets: Record<string, string>;
    /** Headroom reservations not yet released (lib/directory/reservations.ts). */
    reservations: ReservationFact[];
    /** Shards dedicated to a tenant (`tenant isolate`); absent: not read. */
    dedications?: { shard: string; tenant: string }[];
  };
  temporal: {
    reachable: boolean;
    error?: string;
    running: RunningMove[];
    /** The namespace's custom search attributes (absent: not asked or not answered, see searchAttributesError). */
    searchAttributes?: string[];
    searchAttributesError?: string;
    /** Whether the fleet's rebalance run (a drain and an isolate are runs too) is running; absent: not known. */
    rebalanceRunning?: boolean;
  };
  shards: ShardFacts[];
  walThresholdBytes: number;
  /** A move in one phase (but soak) longer than this, or this long past its soak's end, is reported. */
  phaseThresholdMs?: number;
  /** When the facts were gathered (ISO); phase ages are measured to it. */
  now?: string;
  namespace?: string;
  /** The config's bucketed datasets and their bucket counts (absent: none configured). */
  datasets?: { name: string; buckets: number }[];
}

export const FINDING_KINDS = [
  'directory-unreachable',
  'temporal-unreachable',
  'shard-unreachable',
  'unfenced-tables',
  'orphaned-slot',
  'orphaned-publication',
  'slot-retention',
  'frozen-without-move',
  'fence-disagrees',
  'move-blocked',
  'stale-reservation',
  'foreign-blobs',
  'bucket-unreachable',
  'search-attributes-missing',
  'move-phase-too-long',
  'dataset-buckets-unplaced',
  'dataset-bucket-count',
  'dedication-elsewhere',
  'stray-bucket-rows',
  'split-incomplete',
] as const;
export type FindingKind = (typeof FINDING_KINDS)[number];

export interface Finding {
  /** Stable: `<kind>:<shard>:<object>` or `<kind>:<unit>`; what `--fix` takes. */
  id: string;
  kind: FindingKind;
  severity: 'critical' | 'warning';
  message: string;
  /** The exact command (or statement) that fixes it. */
  fix: string;
  /** `doctor --fix <id>` may apply it (only the safe ones, and only when safe now). */
  autoFix: boolean;
  shard?: string;
  unit?: string;
  object?: string;
  retainedBytes?: number | null;
}

/** Postgres LIKE (with backslash escapes) as a RegExp. */
export function likeRegExp(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i];
    if (ch === '\\' && i + 1 < pattern.length) re += escapeRe(pattern[++i]);
    else if (ch === '%') re += '.*';
    else if (ch === '_') re += '.';
    else re += escapeRe(ch);
  }
  return new RegExp(`^${re}$`);
}
const escapeRe = (c: string) => c.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Who may own a replication object name: the running move (or unit) that could, or none. */
export function liveOwnerOf(name: string, running: readonly RunningMove[]): string | undefined {
  for (const m of running) {
    if (m.moveId) {
      const f = replicationNames(m.moveId, 'forward');
      const r = replicationNames(m.moveId, 'reverse');
      if (name === f.slot || name === r.slot) return m.workflowId;
    } else if (likeRegExp(replicationNamePattern(`${m.unit}.e`)).test(name)) {
      return m.workflowId;
    }
  }
  return undefined;
}

/** The directory's unit whose frozen move may own `name` (a move gone while its unit stays frozen). */
function frozenMoveOf(name: string, placements: readonly PlacementFact[]): PlacementFact | undefined {
  return placements.find(
    (p) => p.state === 'moving' && p.moveId && (replicationNames(p.moveId, 'forward').slot === name || replicationNames(p.moveId, 'reverse').slot === name),
  );
}

const mb = (n: number) => `${(n / (1024 * 1024)).toFixed(1)} MiB`;
const q = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** A fence change as a statement an operator can run with psql: under the unit's fence lock, so in-flight writers finish first. */
export function fenceStatement(host: string, lockClass: number, unit: string, set: string, where: string): string {
  return `psql "postgres://<role>@${host}" -c "begin; select pg_advisory_xact_lock(${lockClass}, hashtext(${q(unit)})); update shardctl.fence set ${set} where unit = ${q(unit)}${where ? ` and ${where}` : ''}; commit;"`;
}

/** The search attributes shardctl sets on every move (the ones `dev up` registers), with their types. */
export const REQUIRED_SEARCH_ATTRIBUTES = SEARCH_ATTRIBUTES;

const ago = (ms: number) =>
  ms >= 3_600_000 ? `${(ms / 3_600_000).toFixed(1)} h` : ms >= 60_000 ? `${Math.round(ms / 60_000)} min` : `${Math.round(ms / 1000)} s`;

/** Search attributes the namespace lacks, and moves stuck in one phase past the threshold. */
function judgeTemporal(facts: Facts): Finding[] {
  const out: Finding[] = [];
  const t = facts.temporal;
  if (t.reachable && t.searchAttributes) {
    const missing = Object.keys(REQUIRED_SEARCH_ATTRIBUTES).filter((n) => !t.searchAttributes!.includes(n));
    if (missing.length) {
      const ns = facts.namespace ?? 'default';
      out.push({
        id: 'search-attributes-missing',
        kind: 'search-attributes-missing',
        severity: 'critical',
        message: `namespace ${ns} lacks the search attribute(s) ${missing.join(', ')}: \`move start\` is refused and the Web UI cannot filter moves`,
        fix: missing.map((n) => `temporal operator search-attribute create --namespace ${ns} --name ${n} --type ${REQUIRED_SEARCH_ATTRIBUTES[n]}`).join(' && '),
        autoFix: false,
      });
    }
  }
  const threshold = facts.phaseThresholdMs;
  const now = facts.now ? Date.parse(facts.now) : NaN;
  if (threshold === undefined || Number.isNaN(now)) return out;
  for (const m of t.running) {
    if (m.phase === 'soak') {
      const end = m.soakEndsAt ? Date.parse(m.soakEndsAt) : NaN;
      if (!Number.isNaN(end) && now - end > threshold)
        out.push({
          id: `move-phase-too-long:${m.unit}`,
          kind: 'move-phase-too-long',
          severity: 'warning',
          unit: m.unit,
          message: `the move of ${m.unit} is still in soak ${ago(now - end)} after its soak ended (${m.soakEndsAt}): retire has not run`,
          fix: `shardctl move status ${m.unit}  (a worker must be polling; the retire's reason is in its status)`,
          autoFix: false,
        });
      continue;
    }
    const since = m.phaseSince ? Date.parse(m.phaseSince) : NaN;
    if (Number.isNaN(since) || now - since <= threshold) continue;
    out.push({
      id: `move-phase-too-long:${m.unit}`,
      kind: 'move-phase-too-long',
      severity: 'warning',
      unit: m.unit,
      message: `the move of ${m.unit} has been in phase ${m.phase} for ${ago(now - since)} (since ${m.phaseSince}), over the ${ago(threshold)} threshold${m.blockedReason ? `; blocked: ${m.blockedReason}` : ''}`,
      fix: `shardctl move status ${m.unit}  (its progress and lag say whether it is slow or stuck; pause, throttle or cancel it)`,
      autoFix: false,
    });
  }
  return out;
}

export function judge(facts: Facts, opts: { fenceLockClass: number }): Finding[] {
  const out: Finding[] = [];
  const { directory, temporal } = facts;
  if (!directory.reachable) {
    out.push({
      id: 'directory-unreachable',
      kind: 'directory-unreachable',
      severity: 'critical',
      message: `the placement directory is unreachable (${directory.error ?? 'no answer'}): placement and fence checks skipped`,
      fix: 'check the directory database and the config (directory.dsn), then run `shardctl directory status`',
      autoFix: false,
    });
  }
  if (!temporal.reachable) {
    out.push({
      id: 'temporal-unreachable',
      kind: 'temporal-unreachable',
      severity: 'critical',
      message: `Temporal is unreachable (${temporal.error ?? 'no answer'}): without the running moves no slot is called an orphan, and frozen units are not judged`,
      fix: 'check the Temporal frontend and the config (temporal.address, namespace, TLS), then run `shardctl move list`',
      autoFix: false,
    });
  }
  const runningUnits = new Set(temporal.running.map((m) => m.unit));

  for (const s of facts.shards) {
    if (!s.reachable) {
      out.push({
        id: `shard-unreachable:${s.shard}`,
        kind: 'shard-unreachable',
        severity: 'critical',
        shard: s.shard,
        message: `shard ${s.shard} (${s.host}) is unreachable: ${s.error ?? 'no answer'}`,
        fix: `check the server at ${s.host} and its pg_hba.conf, then run \`shardctl shards list\``,
        autoFix: false,
      });
      continue;
    }
    if (!s.schemaInstalled || s.unfenced.length) {
      out.push({
        id: `unfenced-tables:${s.shard}`,
        kind: 'unfenced-tables',
        severity: 'critical',
        shard: s.shard,
        message: s.schemaInstalled
          ? `shard ${s.shard}: ${s.unfenced.length} tenant table(s) without an enabled fence trigger (their writes are not fenced; moves refuse them): ${s.unfenced.join(', ')}`
          : `shard ${s.shard} is not prepared: schema shardctl is missing`,
        fix: `shardctl shards prepare --shard ${s.shard}`,
        autoFix: false,
      });
    }
    for (const slot of s.slots) {
      const owner = temporal.reachable ? liveOwnerOf(slot.name, temporal.running) : 'unknown';
      const over = slot.retainedBytes !== null && slot.retainedBytes > facts.walThresholdBytes;
      if (owner) {
        if (over && owner !== 'unknown') {
          const unit = temporal.running.find((m) => m.workflowId === owner)?.unit ?? '';
          out.push({
            id: `slot-retention:${s.shard}:${slot.name}`,
            kind: 'slot-retention',
            severity: 'critical',
            shard: s.shard,
            unit,
            object: slot.name,
            retainedBytes: slot.retainedBytes,
            message: `slot ${slot.name} on ${s.shard} retains ${mb(slot.retainedBytes!)} of WAL (> ${mb(facts.walThresholdBytes)}; wal_status ${slot.walStatus}) for the running move ${owner}: it is not applying its stream`,
            fix: `shardctl move status ${unit}  (see its blocked reason; resume it, or \`shardctl move cancel ${unit} --reason "slot retention"\` drops the slot)`,
            autoFix: false,
          });
        } else if (over) {
          out.push({
            id: `slot-retention:${s.shard}:${slot.name}`,
            kind: 'slot-retention',
            severity: 'critical',
            shard: s.shard,
            object: slot.name,
            retainedBytes: slot.retainedBytes,
            message: `slot ${slot.name} on ${s.shard} retains ${mb(slot.retainedBytes!)} of WAL (> ${mb(facts.walThresholdBytes)}); whether a move owns it is unknown while Temporal is unreachable`,
            fix: 'restore Temporal, then run `shardctl doctor` again',
            autoFix: false,
          });
        }
        continue;
      }
      const frozen = directory.reachable ? frozenMoveOf(slot.name, directory.placements) : undefined;
      const held = slot.active;
      out.push({
        id: `orphaned-slot:${s.shard}:${slot.name}`,
        kind: 'orphaned-slot',
        severity: over ? 'critical' : 'warning',
        shard: s.shard,
        object: slot.name,
        retainedBytes: slot.retainedBytes,
        message:
          `orphaned replication slot ${slot.name} on ${s.shard}: no running move owns it; it retains ${slot.retainedBytes === null ? 'no' : mb(slot.retainedBytes)} WAL` +
          (held ? '; a walsender still streams it (a late activity of a gone move: it stops within the heartbeat timeout)' : '') +
          (frozen ? `; the directory still names its move ${frozen.moveId} on the frozen unit ${frozen.unit}: fix that first` : ''),
        fix: held || frozen ? 'run `shardctl doctor` again in a minute' : `shardctl doctor --fix orphaned-slot:${s.shard}:${slot.name}`,
        autoFix: directory.reachable && !held && !frozen,
      });
    }
    if (temporal.reachable) {
      for (const pub of s.publications) {
        if (liveOwnerOf(pub, temporal.running)) continue;
        const frozen = directory.reachable ? frozenMoveOf(pub, directory.placements) : undefined;
        out.push({
          id: `orphaned-publication:${s.shard}:${pub}`,
          kind: 'orphaned-publication',
          severity: 'warning',
          shard: s.shard,
          object: pub,
          message:
            `orphaned publication ${pub} on ${s.shard}: no running move owns it` +
            (frozen ? `; the directory still names its move ${frozen.moveId}: fix that first` : ''),
          fix: frozen ? 'run `shardctl doctor` again after fixing the frozen unit' : `shardctl doctor --fix orphaned-publication:${s.shard}:${pub}`,
          autoFix: directory.reachable && !frozen,
        });
      }
    }
  }

  if (directory.reachable) {
    const shardFacts = new Map(facts.shards.filter((s) => s.reachable && s.schemaInstalled).map((s) => [s.shard, s]));
    for (const p of directory.placements) {
      // A running move changes the directory and the fences step by step: judged only without one.
      if (!temporal.reachable || runningUnits.has(p.unit)) continue;
      if (p.state === 'moving') {
        const target = p.moveId ? directory.moveTargets[p.moveId] : undefined;
        const accepted = target ? shardFacts.get(target)?.fences.find((f) => f.unit === p.unit && f.owned && f.epoch > p.epoch) : undefined;
        out.push({
          id: `frozen-without-move:${p.unit}`,
          kind: 'frozen-without-move',
          severity: 'critical',
          unit: p.unit,
          shard: p.shard,
          message:
            `${p.unit} is frozen (directory: moving on ${p.shard} at epoch ${p.epoch}, move ${p.moveId}) but no move workflow runs for it: its writes are refused` +
            (accepted ? `; ${target} already accepts epoch ${accepted.epoch} (a switch cut in half): not safe to unfreeze automatically` : ''),
          fix: accepted
            ? `decide the owner by hand: the directory says ${p.shard}; take ${target}'s acceptance back with ${fenceStatement(shardFacts.get(target!)!.host, opts.fenceLockClass, p.unit, 'owned = false', `epoch = ${accepted.epoch}`)}, then \`shardctl doctor --fix frozen-without-move:${p.unit}\``
            : `shardctl doctor --fix frozen-without-move:${p.unit}`,
          autoFix: !accepted,
        });
        continue;
      }
      const owner = shardFacts.get(p.shard);
      if (owner) {
        const f = owner.fences.find((x) => x.unit === p.unit);
        const lock = (set: string, where = '') => fenceStatement(owner.host, opts.fenceLockClass, p.unit, set, where);
        let why: string | undefined;
        let fix = '';
        if (!f) {
          why = `${p.shard} has no fence row for it, so it refuses the unit's writes`;
          fix = `psql "postgres://<role>@${owner.host}" -c "insert into shardctl.fence(unit, epoch, owned, frozen) values (${q(p.unit)}, ${p.epoch}, true, false)"`;
        } else if (f.frozen) {
          why = `${p.shard}'s fence is frozen at epoch ${f.epoch} with no move: its writes are refused`;
          fix = lock('frozen = false, freeze_token = null', `epoch = ${f.epoch} and owned`);
        } else if (!f.owned) {
          why = `${p.shard}'s fence does not own it (epoch ${f.epoch}): its writes are refused`;
          fix =
            f.epoch <= p.epoch
              ? lock(`owned = true, epoch = ${p.epoch}`, `epoch <= ${p.epoch}`)
              : `investigate: the fence saw a newer epoch (${f.epoch}) than the directory (${p.epoch}); see \`shardctl tenant show ${p.unit}\` and the directory audit log`;
        } else if (f.epoch !== p.epoch) {
          why = `${p.shard}'s fence owns it at epoch ${f.epoch}`;
          fix =
            f.epoch < p.epoch
              ? lock(`epoch = ${p.epoch}`, `epoch = ${f.epoch}`)
              : `investigate: the fence saw a newer epoch (${f.epoch}) than the directory (${p.epoch})`;
        }
        if (why) {
          out.push({
            id: `fence-disagrees:${p.shard}:${p.unit}`,
            kind: 'fence-disagrees',
            severity: 'critical',
            unit: p.unit,
            shard: p.shard,
            message: `${p.unit}: the directory says ${p.shard} at epoch ${p.epoch}, but ${why}`,
            fix,
            autoFix: false,
          });
        }
      }
      for (const other of shardFacts.values()) {
        if (other.shard === p.shard) continue;
        const f = other.fences.find((x) => x.unit === p.unit && x.owned);
        if (!f) continue;
        out.push({
          id: `fence-disagrees:${other.shard}:${p.unit}`,
          kind: 'fence-disagrees',
          severity: 'critical',
          unit: p.unit,
          shard: other.shard,
          message: `${p.unit}: the directory says ${p.shard} at epoch ${p.epoch}, but ${other.shard}'s fence also accepts its writes (epoch ${f.epoch}${f.frozen ? ', frozen' : ''}): two write authorities`,
          fix: fenceStatement(other.host, opts.fenceLockClass, p.unit, 'owned = false, frozen = false, freeze_token = null', `epoch = ${f.epoch}`),
          autoFix: false,
        });
      }
    }
  }

  if (directory.reachable) out.push(...incompleteSplits(directory.placements, facts.shards));
  if (directory.reachable && temporal.reachable) out.push(...staleReservations(directory, temporal.running));
  for (const s of facts.shards) {
    if (!s.reachable) continue;
    if (s.bucketError) {
      out.push({
        id: `bucket-unreachable:${s.shard}`,
        kind: 'bucket-unreachable',
        severity: 'warning',
        shard: s.shard,
        message: `the bucket of ${s.shard} could not be listed (${s.bucketError}): objects written there behind shardctl's back were not looked for`,
        fix: `check the S3 endpoint and the bucket of ${s.shard} in the config (s3, shards[].bucket), then run \`shardctl doctor\` again`,
        autoFix: false,
      });
    }
    for (const b of s.foreignBlobs) {
      // An untracked copy may be a running move's (its sync adopts what it finds): judged only without one.
      if (!b.tracked && (!temporal.reachable || runningUnits.has(b.unit))) continue;
      out.push(foreignBlobsFinding(b));
    }
  }

  for (const m of temporal.running) {
    if (!m.blockedReason) continue;
    out.push({
      id: `move-blocked:${m.unit}`,
      kind: 'move-blocked',
      severity: 'warning',
      unit: m.unit,
      message: `the move of ${m.unit} (phase ${m.phase ?? '?'}) is blocked: ${m.blockedReason}`,
      fix: `shardctl move status ${m.unit}  (then resume, approve or cancel it as the reason says)`,
      autoFix: false,
    });
  }
  out.push(...judgeTemporal(facts));
  out.push(...judgeDatasets(facts));
  out.push(...judgeDedications(facts, runningUnits));
  out.push(...judgeStrayBucketRows(facts, runningUnits));
  return out;
}

/**
 * A shard dedicated to a tenant the directory places elsewhere (or not at all), with no isolate
 * or move running that could be on its way: the shard takes no other unit and sits outside
 * balancing for a tenant that is not there (an isolate that ended half-way, a tenant moved off).
 */
function judgeDedications(facts: Facts, runningUnits: ReadonlySet<string>): Finding[] {
  const { directory, temporal } = facts;
  // An isolate run dedicates first and moves after: judged only when Temporal says no run is going.
  if (!directory.reachable || !temporal.reachable || temporal.rebalanceRunning !== false) return [];
  const at = new Map(directory.placements.map((p) => [p.unit, p]));
  const out: Finding[] = [];
  for (const d of directory.dedications ?? []) {
    const p = at.get(d.tenant);
    if ((p && p.shard === d.shard) || runningUnits.has(d.tenant)) continue;
    const undo = `shardctl shards undedicate ${d.shard} --reason "tenant ${d.tenant} is not on it"`;
    out.push({
      id: `dedication-elsewhere:${d.shard}`,
      kind: 'dedication-elsewhere',
      severity: 'warning',
      shard: d.shard,
      unit: d.tenant,
      message: p
        ? `${d.shard} is dedicated to tenant ${d.tenant}, but the directory places ${d.tenant} on ${p.shard} and no isolate or move of it runs: ${d.shard} takes no other unit and is left out of balancing`
        : `${d.shard} is dedicated to tenant ${d.tenant}, which is not in the directory: ${d.shard} takes no other unit and is left out of balancing`,
      fix: p ? `shardctl tenant isolate --tenant ${d.tenant} --to ${d.shard}  (finish the isolation), or ${undo}  (share it again)` : undo,
      autoFix: false,
    });
  }
  return out;
}

/**
 * Rows of a bucket on a shard that does not own it, with no move of the bucket running (a move's
 * target holds a copy before its switch, its source one during soak): nothing routes to them, and
 * they make a later move of the bucket onto that shard refuse at plan. Left by a cancel or retire
 * that did not finish, or written past the router.
 */
function judgeStrayBucketRows(facts: Facts, runningUnits: ReadonlySet<string>): Finding[] {
  const { directory, temporal } = facts;
  if (!directory.reachable || !temporal.reachable) return [];
  const at = new Map(directory.placements.map((p) => [p.unit, p.shard]));
  const out: Finding[] = [];
  for (const s of facts.shards) {
    if (!s.reachable || !s.bucketRows) continue;
    const byUnit = new Map<string, BucketRowsFact[]>();
    for (const r of s.bucketRows) byUnit.set(r.unit, [...(byUnit.get(r.unit) ?? []), r]);
    for (const [unit, rows] of byUnit) {
      const owner = at.get(unit);
      if (!owner || owner === s.shard || runningUnits.has(unit)) continue;
      const deletes = rows.map((r) => `delete from ${r.table} where "${r.column.replace(/"/g, '""')}" = ${r.bucket};`).join(' ');
      out.push({
        id: `stray-bucket-rows:${s.shard}:${unit}`,
        kind: 'stray-bucket-rows',
        severity: 'warning',
        shard: s.shard,
        unit,
        message: `${s.shard} holds rows of ${unit} (in ${rows.map((r) => r.table).join(', ')}), which the directory places on ${owner}, and no move of it runs: nothing routes to them, and a move of ${unit} onto ${s.shard} would refuse`,
        fix: `compare them with ${owner} first (they may be writes made past the router), then delete them on ${s.shard}: psql "postgres://<role>@${s.host}" -c "begin; set local session_replication_role = replica; ${deletes} commit;"`,
        autoFix: false,
      });
    }
  }
  return out;
}

/**
 * A split stopped between the directory's compare-and-set and the tenant's disown
 * (lib/tenant-split.ts): the directory names T's sub-units and not T, yet a shard's fence still
 * owns T. Every row of T is on that shard, so there is no second owner, but a router with T's old
 * route still writes there; the re-run of `tenant split` finishes it.
 */
export function incompleteSplits(placements: readonly { unit: string }[], shards: readonly ShardFacts[]): Finding[] {
  const placed = new Set(placements.map((p) => p.unit));
  const out: Finding[] = [];
  for (const s of shards) {
    if (!s.reachable || !s.schemaInstalled) continue;
    for (const f of s.fences) {
      if (!f.owned || f.unit.includes(':') || placed.has(f.unit) || !placed.has(`${f.unit}:0`)) continue;
      const ways = placements.filter((p) => p.unit.startsWith(`${f.unit}:`) && /^(0|[1-9][0-9]*)$/.test(p.unit.slice(f.unit.length + 1))).length;
      out.push({
        id: `split-incomplete:${s.shard}:${f.unit}`,
        kind: 'split-incomplete',
        severity: 'warning',
        shard: s.shard,
        unit: f.unit,
        message: `${f.unit} is split in the directory (${f.unit}:0 .. ${f.unit}:${ways - 1}) but ${s.shard}'s fence still owns ${f.unit} at epoch ${f.epoch}: a router with its old route still writes it there`,
        fix: `shardctl tenant split ${f.unit} --ways ${ways}`,
        autoFix: false,
      });
    }
  }
  return out;
}

function bucketOfUnit(unit: string): Extract<ParsedUnit, { kind: 'bucket' }> | undefined {
  try {
    const u = parseUnit(unit);
    return u.kind === 'bucket' ? u : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Bucket units (issue 13): every bucket of a configured dataset has a placement (else the keys
 * hashing there cannot be routed: an init that stopped half-way, or never ran), and every shard
 * records the dataset with the config's B, or none when none of its buckets is placed there
 * (moves onto or off a shard that records another B, or none, are refused at plan).
 */
function judgeDatasets(facts: Facts): Finding[] {
  const out: Finding[] = [];
  if (!facts.directory.reachable) return out;
  for (const ds of facts.datasets ?? []) {
    const on = new Map<number, string>();
    for (const p of facts.directory.placements) {
      const u = bucketOfUnit(p.unit);
      if (u && u.dataset === ds.name) on.set(u.bucket, p.shard);
    }
    const missing: string[] = [];
    for (let n = 0; n < ds.buckets; n++) if (!on.has(n)) missing.push(bucketUnitName(ds.name, n, ds.buckets));
    if (missing.length) {
      // The shard that holds most of the dataset's buckets (by name on a tie); none placed: the first open one is the operator's to choose.
      const count = new Map<string, number>();
      for (const sh of on.values()) count.set(sh, (count.get(sh) ?? 0) + 1);
      const home = [...count].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))[0]?.[0];
      const shown = `${missing.slice(0, 5).join(', ')}${missing.length > 5 ? `, ... (${missing.length})` : ''}`;
      out.push({
        id: `dataset-buckets-unplaced:${ds.name}`,
        kind: 'dataset-buckets-unplaced',
        severity: on.size ? 'critical' : 'warning',
        object: ds.name,
        message: on.size
          ? `dataset ${ds.name}: ${missing.length} of its ${ds.buckets} buckets have no placement in the directory (${shown}): keys that hash there cannot be routed (an init that stopped half-way?)`
          : `dataset ${ds.name} is configured (${ds.buckets} buckets) but none of its buckets is placed: nothing of it can be routed until it is initialised`,
        fix: `shardctl dataset init ${ds.name} --shard ${home ?? '<shard>'}  (places only the missing buckets; those placed stay where they are)`,
        autoFix: false,
      });
    }
    const placedOn = new Set(on.values());
    for (const s of facts.shards) {
      if (!s.reachable || !s.datasetBuckets) continue;
      const recorded = s.datasetBuckets[ds.name];
      if (recorded === ds.buckets || (recorded === undefined && !placedOn.has(s.shard))) continue;
      out.push({
        id: `dataset-bucket-count:${s.shard}:${ds.name}`,
        kind: 'dataset-bucket-count',
        severity: 'critical',
        shard: s.shard,
        object: ds.name,
        message:
          recorded === undefined
            ? `${s.shard} holds buckets of dataset ${ds.name} but does not record the dataset's B (it was not prepared for it): its dataset tables may be unfenced`
            : `${s.shard} records dataset ${ds.name} with ${recorded} buckets, the config says ${ds.buckets}: \`shards prepare\` and \`dataset init\` refuse ${s.shard}, and the router hashes keys into ${ds.buckets} buckets`,
        fix:
          recorded === undefined
            ? `shardctl shards prepare --shard ${s.shard}`
            : `find the dataset's real B (the CHECK of its tables on ${s.shard} names it: shardctl.bucket_of(key, B)) and put the config's datasets[].buckets back to it: a dataset is never re-bucketed in place`,
        autoFix: false,
      });
    }
  }
  return out;
}

/** A reservation no running move holds: its move's workflow is gone (terminated, timed out) without releasing it. */
function staleReservations(directory: Facts['directory'], running: readonly RunningMove[]): Finding[] {
  const out: Finding[] = [];
  for (const r of directory.reservations) {
    // The running move of the unit holds it unless its id is known and differs.
    const live = running.find((m) => m.workflowId === r.workflowId && (m.moveId === null || m.moveId === r.moveId));
    if (live) continue;
    const frozen = directory.placements.find((p) => p.unit === r.unit && p.state === 'moving' && p.moveId === r.moveId);
    out.push({
      id: `stale-reservation:${r.moveId}`,
      kind: 'stale-reservation',
      severity: 'warning',
      unit: r.unit,
      shard: r.target,
      object: r.moveId,
      message:
        `move ${r.moveId} of ${r.unit} (${r.source} → ${r.target}) still reserves load ${r.load} (since ${r.takenAt}) but no move workflow runs for it: ` +
        `the room stays taken on ${r.target} and ${r.source} for every move and placement, and ${r.unit} cannot move again until it is released` +
        (frozen ? `; the unit is still frozen by that move: fix frozen-without-move:${r.unit} first` : ''),
      fix: frozen
        ? `shardctl doctor --fix frozen-without-move:${r.unit}, then \`shardctl doctor\` again`
        : `shardctl doctor --fix stale-reservation:${r.moveId}`,
      autoFix: !frozen,
    });
  }
  return out;
}

function foreignBlobsFinding(b: ForeignBlobFact): Finding {
  const shown = b.objects
    .slice(0, 5)
    .map((o) => `${o.key} ${o.change}`)
    .join('; ');
  const more = b.total > 5 ? `; and ${b.total - 5} more (\`shardctl doctor --json\` lists ${b.objects.length})` : '';
  const deleted = b.objects.filter((o) => o.change === 'deleted');
  const written = b.objects.length - deleted.length;
  const what = deleted.length === 0 ? 'written or changed' : written === 0 ? 'deleted' : 'written, changed or deleted';
  const harm = [
    written > 0 ? `nothing copies what was written or changed to the owner, so it is lost when ${b.shard}'s copy is deleted` : '',
    deleted.length > 0 ? `what was deleted is missing from ${b.shard}'s copy (during a soak, the way back), and syncs report it rather than restore it` : '',
  ].filter(Boolean);
  const fixes = [
    written > 0
      ? `reconcile with the owner: write what the application still needs to ${b.unit} on ${b.owner} through the router's blob API, then remove exactly these keys from ${b.bucket} ` +
        `(e.g. \`aws s3 rm s3://${b.bucket}/${b.objects.find((o) => o.change !== 'deleted')?.key ?? ''}\`) — not the unit's whole prefix while a move of it is in soak (that copy is the way back)`
      : '',
    deleted.length > 0
      ? `for the deleted ones: run \`delete from shardctl.blob_ledger where unit = '${b.unit}'\` on ${b.shard}, and the next sync from ${b.owner} ` +
        `(a soak round) copies back what ${b.owner} holds`
      : '',
  ].filter(Boolean);
  return {
    id: `foreign-blobs:${b.shard}:${b.unit}`,
    kind: 'foreign-blobs',
    severity: 'critical',
    shard: b.shard,
    unit: b.unit,
    object: b.bucket,
    message:
      `${b.total} object(s) of ${b.unit} in bucket ${b.bucket} of ${b.shard}, which does not own the unit (the directory places it on ${b.owner}), were ${what} behind shardctl's back (${shown}${more}): ` +
      `${harm.join('; ')}; retire or rollback clean-up on ${b.shard} refuses while they differ`,
    fix: `${fixes.join('; ')}; then run \`shardctl doctor\` again`,
    autoFix: false,
  };
}
