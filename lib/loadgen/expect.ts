// Folds a loadgen log into what each key must look like now. Pure. Per key, records are taken
// in file order (= commit order). An ack fixes the state; a refusal changes nothing (the write
// must never appear); an unknown outcome (or an intent with no outcome) allows both the state
// before and the state after, and the writer never touches such a key again.
import type { LogRecord, LoadTable } from './log';

export interface RowState {
  present: boolean;
  value?: number;
  /** documents only. */
  bodySha?: string | null;
  blobKey?: string | null;
}

export interface KeyExpectation {
  tenant: string;
  table: LoadTable;
  key: string;
  /** Every acceptable state of the key (more than one only after unknown outcomes). */
  states: RowState[];
  acks: number;
  refused: LogRecord[];
  unknown: number;
  /** Index of the last ack in the log, for reports. */
  lastAckSeq?: number;
}

export interface BlobExpectation {
  tenant: string;
  key: string;
  blobKey: string;
  sha256: string;
  /** Written through the blob index: the owner's index row for the name must hold this sha256, and its version object those bytes. */
  indexed?: true;
}

export interface LogExpectations {
  keys: KeyExpectation[];
  /** Objects of acked blob puts not deleted since: each must exist in the current owner's bucket. */
  blobs: BlobExpectation[];
  /** Objects loadgen deleted after an acked blob delete (no longer expected anywhere). */
  blobsDeleted: number;
  unknownOutcomes: number;
  records: number;
}

const ABSENT: RowState = { present: false };

export function applyOp(s: RowState, rec: LogRecord): RowState {
  switch (rec.op) {
    case 'insert':
      return rec.table === 'documents'
        ? { present: true, value: Number(rec.value), bodySha: rec.bodySha ?? null, blobKey: null }
        : { present: true, value: Number(rec.value) };
    case 'update':
      if (!s.present) return s;
      return rec.table === 'documents'
        ? { ...s, value: Number(rec.value), bodySha: rec.bodySha !== undefined ? rec.bodySha : s.bodySha }
        : { ...s, value: Number(rec.value) };
    case 'blob_put':
      return s.present ? { ...s, blobKey: rec.blobKey ?? null } : s;
    case 'blob_delete':
      return s.present ? { ...s, blobKey: null } : s;
    case 'delete':
      return ABSENT;
  }
}

/** What a committed op proves about the state it was applied to. */
function admits(s: RowState, rec: LogRecord): boolean {
  return rec.op === 'insert' ? !s.present : s.present;
}

export function stateKey(s: RowState): string {
  return JSON.stringify([s.present, s.value ?? null, s.bodySha ?? null, s.blobKey ?? null]);
}

function dedupe(states: RowState[]): RowState[] {
  const m = new Map<string, RowState>();
  for (const s of states) m.set(stateKey(s), s);
  return [...m.values()];
}

export function foldLog(records: LogRecord[]): LogExpectations {
  const byKey = new Map<string, KeyExpectation & { pending?: LogRecord }>();
  const blobs: BlobExpectation[] = [];
  const deletedObjects = new Set<string>();
  let unknownOutcomes = 0;
  const settleUnknown = (k: KeyExpectation, rec: LogRecord) => {
    unknownOutcomes++;
    k.unknown++;
    // Through the index a delete's unlink commits with its row: an unknown one may have taken the name.
    if (rec.op === 'blob_delete' && rec.indexed && rec.blobKey) deletedObjects.add(rec.blobKey);
    k.states = dedupe([...k.states, ...k.states.filter((s) => admits(s, rec)).map((s) => applyOp(s, rec))]);
  };
  for (const rec of records) {
    const id = `${rec.tenant}\u0000${rec.table}\u0000${rec.key}`;
    let k = byKey.get(id);
    if (!k) {
      k = { tenant: rec.tenant, table: rec.table, key: rec.key, states: [ABSENT], acks: 0, refused: [], unknown: 0 };
      byKey.set(id, k);
    }
    // An intent is resolved by the next record of its key; a second intent means the first
    // never got an outcome (the writer died), so it stays ambiguous.
    if (k.pending) {
      const p = k.pending;
      k.pending = undefined;
      if (rec.status === 'pending' || rec.op !== p.op) settleUnknown(k, p);
    }
    switch (rec.status) {
      case 'pending':
        k.pending = rec;
        break;
      case 'ack': {
        k.acks++;
        k.lastAckSeq = rec.seq;
        const before = k.states.filter((s) => admits(s, rec));
        // An ack the log cannot explain (e.g. a log spliced from two runs) still proves the op ran.
        const base = before.length ? before : [rec.op === 'insert' ? ABSENT : { present: true }];
        k.states = dedupe(base.map((s) => applyOp(s, rec)));
        if (rec.op === 'blob_put' && rec.blobKey && typeof rec.value === 'string') {
          blobs.push({ tenant: rec.tenant, key: rec.key, blobKey: rec.blobKey, sha256: rec.value, ...(rec.indexed ? { indexed: true as const } : {}) });
        }
        // Deleted, or maybe deleted (unknown outcome): no longer required to be present.
        if (rec.op === 'blob_delete' && rec.blobKey && (rec.objectDeleted === true || rec.objectDeleted === 'unknown')) deletedObjects.add(rec.blobKey);
        break;
      }
      case 'refused':
        k.refused.push(rec);
        break;
      case 'unknown':
        settleUnknown(k, rec);
        break;
    }
  }
  for (const k of byKey.values()) {
    if (k.pending) settleUnknown(k, k.pending);
    delete k.pending;
  }
  return {
    keys: [...byKey.values()],
    blobs: blobs.filter((b) => !deletedObjects.has(b.blobKey)),
    blobsDeleted: deletedObjects.size,
    unknownOutcomes,
    records: records.length,
  };
}
