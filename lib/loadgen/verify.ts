// `loadgen verify`: checks a loadgen log against the data of each tenant's CURRENT owner (from
// the directory), read directly with read-only connections. Exact, per key: the last ack fixes
// the state, refusals must never show, unknown outcomes allow before or after; every acked
// blob must exist in the owner's bucket with its sha256; through the index, a name's row must hold
// its last acknowledged version, and a name whose last acknowledged write unlinked it must have no
// row (the lookup getBlob resolves through). Run it after the load has stopped.
import type { Pool } from 'pg';
import type { Config } from '../config';
import { shardByName } from '../config';
import { hashObject } from '../blobs/hash';
import { isNotFound } from '../blobs/list';
import { forEachLimit } from '../blobs/concurrency';
import { findIndexRow, tenantIndexScope } from '../blobs/index-table';
import { blobNameOf } from '../blobs/fenced';
import { foldLog, KeyExpectation, RowState, type UnlinkedBlob } from './expect';
import { readLog, LogRecord, LoadTable } from './log';
import { diffRow, ObservedRow, observedState, readRows } from './model';
import { currentOwners, Placement, S3For } from './route';
import { tenantUnitForRow } from '../buckets/route';
import { invalidInput } from '../errors';
import { ownedClients } from './clients';
import { checkUnit, UnitBaseline, UnitFinding } from './baseline';

export interface RowFinding {
  tenant: string;
  table: LoadTable;
  key: string;
  shard: string;
  /** Acceptable states ('absent' when the key must not exist). */
  expected: RowState[] | 'absent';
  actual: RowState | 'absent';
  /** Columns that differ from the closest acceptable state: balance, name, version, title, body, blob_key, payload.v, payload. */
  columns?: string[];
  /** seq (and run) of the refused writes that showed up. */
  refused?: Array<{ seq: number; run?: string; op: string }>;
  lastAckSeq?: number;
}

export interface BlobFinding {
  tenant: string;
  key: string;
  blobKey: string;
  bucket: string;
  expectedSha256: string;
  actualSha256?: string;
  reason: 'missing' | 'sha256 mismatch' | 'not in the blob index' | 'index sha256 mismatch';
  /** Indexed blobs: the version object the owner's index row names. */
  objectKey?: string;
  /** Indexed blobs after unknown outcomes: the other sha256s the row could have held. */
  alsoAccepts?: string[];
}

/** A name unlinked by its last acknowledged delete that the owner's index still resolves. */
export interface UnlinkedBlobFinding {
  tenant: string;
  key: string;
  blobKey: string;
  shard: string;
  /** What the row resolves to: the version object and the sha256 recorded for it. */
  objectKey: string;
  actualSha256: string;
  reason: 'deleted but in the blob index';
  lastAckSeq?: number;
}

export interface VerifyReport {
  ok: boolean;
  logFile: string;
  records: number;
  /** Keys checked against the owner shard. */
  checked: number;
  /** Keys checked per unit: the tenant, or a split tenant's sub-unit the key's row belongs to. */
  checkedByUnit: Record<string, number>;
  /** Each unit's owner: the tenants', and a split tenant's sub-units'. */
  owners: Record<string, Placement>;
  missing: RowFinding[];
  wrongValue: RowFinding[];
  presentButRefused: RowFinding[];
  /** Rows whose last ack was a delete but which exist. */
  presentButDeleted: RowFinding[];
  unknownOutcomes: number;
  /** Keys with more than one acceptable state (after unknown outcomes) whose row matched one of them. */
  ambiguousKeys: number;
  blobsChecked: number;
  blobMissing: BlobFinding[];
  /** Objects deleted by acknowledged blob deletes (no longer expected), and names unlinked through the index. */
  blobsDeleted: number;
  /** Names unlinked through the index whose absence on the owner was checked. */
  unlinkedChecked: number;
  /** Unlinked names the owner's index still names (a delete lost, or a name resurrected). */
  blobPresentButDeleted: UnlinkedBlobFinding[];
  /** With baselines: what of the whole unit (beyond loadgen's keys) is wrong on its owner. */
  unit: UnitFinding[];
  /** With baselines: each tenant's row count per table on its owner. */
  ownerRows: Record<string, Record<string, number>>;
}

export interface VerifyOptions {
  logFile: string;
  config: Config;
  /** Injected clients (else created here and closed at the end). */
  directory?: Pool;
  shardPool?: (shard: string) => Pool;
  s3For?: S3For;
  concurrency?: number;
  /** Baselines (snapshotUnit) of tenants to check whole: seeded rows and objects too. */
  baselines?: UnitBaseline[];
  /** The schema of loadgen's tables (as loadgen's own `schema`); default `public`. */
  schema?: string;
}

export async function verifyLog(opts: VerifyOptions): Promise<VerifyReport> {
  return verifyRecords(readLog(opts.logFile), opts);
}

export async function verifyRecords(records: LogRecord[], opts: VerifyOptions): Promise<VerifyReport> {
  const { config } = opts;
  const own = ownedClients(config, opts);
  try {
    const exp = foldLog(records);
    const tenants = [...new Set(exp.keys.map((k) => k.tenant))];
    const baselines = opts.baselines ?? [];
    for (const b of baselines) if (!tenants.includes(b.tenant)) tenants.push(b.tenant);
    const { placements: owners, splits } = tenants.length
      ? await currentOwners(own.directory(), tenants)
      : { placements: new Map<string, Placement>(), splits: new Map<string, number>() };
    // A key's owner: its tenant's, or for a split tenant its row's sub-unit's (the key is its split key, as loadgen wrote it).
    const unitOf = (tenant: string, key: string) => (splits.has(tenant) ? tenantUnitForRow(tenant, key, splits) : tenant);
    const shardOf = (tenant: string, key: string) => owners.get(unitOf(tenant, key))!.shard;
    for (const b of baselines) if (splits.has(b.tenant)) throw invalidInput(`tenant ${b.tenant} is split: a baseline checks a whole tenant, not its sub-units`);
    const report: VerifyReport = {
      ok: false,
      logFile: opts.logFile,
      records: exp.records,
      checked: 0,
      checkedByUnit: {},
      owners: Object.fromEntries(owners),
      missing: [],
      wrongValue: [],
      presentButRefused: [],
      presentButDeleted: [],
      unknownOutcomes: exp.unknownOutcomes,
      ambiguousKeys: 0,
      blobsChecked: 0,
      blobMissing: [],
      blobsDeleted: exp.blobsDeleted,
      unlinkedChecked: 0,
      blobPresentButDeleted: [],
      unit: [],
      ownerRows: {},
    };
    const groups = new Map<string, KeyExpectation[]>();
    for (const k of exp.keys) {
      const g = `${unitOf(k.tenant, k.key)}\u0000${k.table}`;
      if (!groups.has(g)) groups.set(g, []);
      groups.get(g)!.push(k);
    }
    for (const keys of groups.values()) {
      const { tenant, table } = keys[0];
      const unit = unitOf(tenant, keys[0].key);
      const shard = owners.get(unit)!.shard;
      for (let i = 0; i < keys.length; i += 1000) {
        const batch = keys.slice(i, i + 1000);
        const rows = await readRows(
          own.shardPool(shard),
          tenant,
          table,
          batch.map((k) => k.key),
          opts.schema,
        );
        for (const k of batch) {
          report.checked++;
          report.checkedByUnit[unit] = (report.checkedByUnit[unit] ?? 0) + 1;
          judgeKey(report, k, shard, rows.get(k.key));
        }
      }
    }
    await forEachLimit(exp.blobs, opts.concurrency ?? 8, async (b) => {
      const shard = shardOf(b.tenant, b.key);
      const bucket = shardByName(config, shard).bucket;
      report.blobsChecked++;
      const finding = { tenant: b.tenant, key: b.key, blobKey: b.blobKey, bucket, expectedSha256: b.sha256 };
      // Through the index, the object is the version the owner's index row names: the row must
      // have moved with the unit's rows, with the sha256 recorded at write time, and its object too.
      let objectKey = b.blobKey;
      let want = b.sha256;
      if (b.indexed) {
        const accepts = b.alsoAccepts ? { alsoAccepts: b.alsoAccepts } : {};
        const v = await findIndexRow(own.shardPool(shard), tenantIndexScope(config.tenant.column, b.tenant), blobNameOf(b.tenant, b.blobKey));
        if (!v) {
          // An unknown delete may have unlinked it: no row is then one of the outcomes allowed.
          if (!b.mayBeUnlinked) report.blobMissing.push({ ...finding, ...accepts, reason: 'not in the blob index' });
          return;
        }
        // An overwrite is a new version of the same name: the row must hold the last acknowledged one.
        if (v.sha256 !== b.sha256 && !b.alsoAccepts?.includes(v.sha256))
          return void report.blobMissing.push({ ...finding, ...accepts, objectKey: v.key, actualSha256: v.sha256, reason: 'index sha256 mismatch' });
        objectKey = v.key;
        want = v.sha256;
      }
      const extra = b.indexed ? { objectKey } : {};
      try {
        const h = await hashObject(own.s3For(shard), bucket, objectKey);
        if (h.sha256 !== want) report.blobMissing.push({ ...finding, ...extra, actualSha256: h.sha256, reason: 'sha256 mismatch' });
      } catch (e) {
        if (!isNotFound(e)) throw e;
        report.blobMissing.push({ ...finding, ...extra, reason: 'missing' });
      }
    });
    report.blobMissing.sort((a, b) => (a.blobKey < b.blobKey ? -1 : 1));
    await forEachLimit(exp.blobsUnlinked, opts.concurrency ?? 8, async (u) => {
      const shard = shardOf(u.tenant, u.key);
      report.unlinkedChecked++;
      const f = await unlinkedFinding(own.shardPool(shard), config.tenant.column, shard, u);
      if (f) report.blobPresentButDeleted.push(f);
    });
    report.blobPresentButDeleted.sort((a, b) => (a.blobKey < b.blobKey ? -1 : 1));
    for (const b of baselines) {
      const shard = owners.get(b.tenant)!.shard;
      const r = await checkUnit({ config, baseline: b, records, shard, pool: own.shardPool(shard), s3: own.s3For(shard) });
      report.unit.push(...r.findings);
      report.ownerRows[b.tenant] = r.ownerRows;
    }
    report.ok =
      !report.missing.length &&
      !report.wrongValue.length &&
      !report.presentButRefused.length &&
      !report.presentButDeleted.length &&
      !report.blobMissing.length &&
      !report.blobPresentButDeleted.length &&
      !report.unit.length;
    return report;
  } finally {
    await own.close();
  }
}

/** The owner's index row of a name that must have none (getBlob resolves a name through this row). */
async function unlinkedFinding(pool: Pool, tenantColumn: string, shard: string, u: UnlinkedBlob): Promise<UnlinkedBlobFinding | undefined> {
  const v = await findIndexRow(pool, tenantIndexScope(tenantColumn, u.tenant), blobNameOf(u.tenant, u.blobKey));
  if (!v) return undefined;
  return { ...u, shard, objectKey: v.key, actualSha256: v.sha256, reason: 'deleted but in the blob index' };
}

function judgeKey(report: VerifyReport, k: KeyExpectation, shard: string, row: ObservedRow | undefined): void {
  const base = { tenant: k.tenant, table: k.table, key: k.key, shard, lastAckSeq: k.lastAckSeq };
  const present = k.states.filter((s) => s.present);
  const expected = present.length ? k.states : ('absent' as const);
  if (!row) {
    if (present.length < k.states.length) return accept(report, k);
    report.missing.push({ ...base, expected, actual: 'absent' });
    return;
  }
  const diffs = present.map((s) => diffRow(k.table, s, row)).sort((a, b) => a.length - b.length);
  if (diffs.length && diffs[0].length === 0) return accept(report, k);
  const actual = observedState(k.table, row);
  // A refused write is visible: its value (or blob key) is what the row now holds.
  const shown = k.refused.filter((r) =>
    r.op === 'blob_put'
      ? r.blobKey === row.blobKey
      : r.op === 'blob_delete'
        ? row.blobKey === null && present.every((s) => s.blobKey !== null)
        : r.op !== 'delete' && Number(r.value) === row.value && !present.some((s) => s.value === row.value),
  );
  const refusedOnly = k.acks === 0 && k.unknown === 0 && k.refused.length > 0;
  if (refusedOnly || shown.length) {
    report.presentButRefused.push({
      ...base,
      expected,
      actual,
      refused: (shown.length ? shown : k.refused).map((r) => ({ seq: r.seq, run: r.run, op: r.op })),
    });
    return;
  }
  if (!present.length) {
    report.presentButDeleted.push({ ...base, expected, actual });
    return;
  }
  report.wrongValue.push({ ...base, expected, actual, columns: diffs[0] });
}

function accept(report: VerifyReport, k: KeyExpectation) {
  if (k.states.length > 1) report.ambiguousKeys++;
}
