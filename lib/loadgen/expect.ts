// Folds a loadgen log into what each key must look like now. Pure. Per key, records are taken
// in file order (= commit order). An ack fixes the state; a refusal changes nothing (the write
// must never appear); an unknown outcome (or an intent with no outcome) allows both the state
// before and the state after, and the writer never touches such a key again. Blob names written
// through the index are folded the same way, per name: present with a sha256, or unlinked.
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
  /** Indexed, after unknown outcomes: other sha256s the name's row may hold instead. */
  alsoAccepts?: string[];
  /** Indexed, after an unknown delete: the name may have no row at all. */
  mayBeUnlinked?: true;
}

/** A name whose last acknowledged write through the index unlinked it: the owner has no row for it. */
export interface UnlinkedBlob {
  tenant: string;
  key: string;
  blobKey: string;
  lastAckSeq?: number;
}

export interface LogExpectations {
  keys: KeyExpectation[];
  /** Objects of acked blob puts not deleted since: each must exist in the current owner's bucket. */
  blobs: BlobExpectation[];
  /** Names written through the index and unlinked by their last acknowledged write: no row may name them. */
  blobsUnlinked: UnlinkedBlob[];
  /** Objects loadgen deleted after an acked blob delete (no longer expected anywhere), and names it unlinked. */
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

/** An indexed name's acceptable states: the sha256 its row holds, or null for no row. */
interface NameStates {
  tenant: string;
  key: string;
  blobKey: string;
  states: Array<string | null>;
  acks: number;
  unknown: number;
  lastAckSeq?: number;
}

/** What a blob op through the index leaves for its name: its version's sha256, or no row. */
const nameStateAfter = (rec: LogRecord): string | null => (rec.op === 'blob_put' ? String(rec.value) : null);

export function foldLog(records: LogRecord[]): LogExpectations {
  const byKey = new Map<string, KeyExpectation & { pending?: LogRecord }>();
  const blobs: BlobExpectation[] = [];
  const deletedObjects = new Set<string>();
  // Loadgen's names start with its own first put, so a name starts with no row.
  const names = new Map<string, NameStates>();
  const nameOf = (rec: LogRecord): NameStates | undefined => {
    if (!rec.indexed || !rec.blobKey || (rec.op !== 'blob_put' && rec.op !== 'blob_delete')) return undefined;
    const id = `${rec.tenant}\u0000${rec.blobKey}`;
    let n = names.get(id);
    if (!n) names.set(id, (n = { tenant: rec.tenant, key: rec.key, blobKey: rec.blobKey, states: [null], acks: 0, unknown: 0 }));
    return n;
  };
  let unknownOutcomes = 0;
  const settleUnknown = (k: KeyExpectation, rec: LogRecord) => {
    unknownOutcomes++;
    k.unknown++;
    // Through the index the name changes with the row, atomically: before or after, like the row.
    const n = nameOf(rec);
    if (n) {
      n.unknown++;
      n.states = [...new Set([...n.states, nameStateAfter(rec)])];
    }
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
        const n = nameOf(rec);
        if (n) {
          n.acks++;
          n.lastAckSeq = rec.seq;
          n.states = [nameStateAfter(rec)];
          break;
        }
        if (rec.op === 'blob_put' && rec.blobKey && typeof rec.value === 'string') {
          blobs.push({ tenant: rec.tenant, key: rec.key, blobKey: rec.blobKey, sha256: rec.value });
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
  const { present, unlinked } = indexedExpectations([...names.values()]);
  return {
    keys: [...byKey.values()],
    blobs: [...blobs.filter((b) => !deletedObjects.has(b.blobKey)), ...present],
    blobsUnlinked: unlinked,
    blobsDeleted: deletedObjects.size + unlinked.length,
    unknownOutcomes,
    records: records.length,
  };
}

/**
 * Each indexed name a write may have reached: present (the newest sha256 it may hold first), or
 * unlinked when every state left is "no row". Names only ever refused were never created.
 */
function indexedExpectations(names: NameStates[]): { present: BlobExpectation[]; unlinked: UnlinkedBlob[] } {
  const present: BlobExpectation[] = [];
  const unlinked: UnlinkedBlob[] = [];
  for (const n of names) {
    if (!n.acks && !n.unknown) continue;
    const shas = n.states.filter((s): s is string => s !== null).reverse();
    const base = { tenant: n.tenant, key: n.key, blobKey: n.blobKey };
    if (!shas.length) {
      unlinked.push({ ...base, ...(n.lastAckSeq !== undefined ? { lastAckSeq: n.lastAckSeq } : {}) });
      continue;
    }
    present.push({
      ...base,
      sha256: shas[0],
      indexed: true,
      ...(shas.length > 1 ? { alsoAccepts: shas.slice(1) } : {}),
      ...(n.states.includes(null) ? { mayBeUnlinked: true as const } : {}),
    });
  }
  return { present, unlinked };
}
