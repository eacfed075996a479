// One loadgen slot's key space and its choice of the next operation. A slot is the only
// writer of its keys and runs one op at a time, so its view of each key is exact: after an ack
// the key is in the new state, after a refusal in the old one; after an unknown outcome the
// slot abandons the key (it never writes it again), keeping the log's expectations decidable.
import { randomBytes, randomUUID } from 'node:crypto';
import type { RowState } from './expect';
import type { LoadTable, LogOp } from './log';
import { LOAD_TABLES } from './log';
import { incompressibleText, sha256Hex } from './model';
import { tenantBlobPrefix } from '../blobs/prefix';

/** Deterministic PRNG (mulberry32) so `--seed` reproduces the op mix. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface PlannedRead {
  kind: 'read';
  tenant: string;
  table: LoadTable;
  key: string;
  expected: RowState;
}

export interface PlannedWrite {
  kind: 'write';
  tenant: string;
  table: LoadTable;
  key: string;
  op: LogOp;
  /** New version (insert/update). */
  version?: number;
  /** documents insert/update: new body; undefined = unchanged. */
  body?: string | null;
  /** `overwrites`: a new version of the name the document holds (through the index), not a new name. */
  blob?: { blobKey: string; content: Buffer; sha256: string; replaces?: string; overwrites?: true };
  /** blob_delete: the object the document names now; cleared in the row, then deleted. */
  blobDelete?: { blobKey: string };
  /** The key's state if the write commits. */
  after: RowState;
}

export type PlannedOp = PlannedRead | PlannedWrite;

export interface PlanOptions {
  readFraction: number;
  bodyBytes: number;
  /** Live keys per (tenant, table) above which the slot deletes more than it inserts. */
  maxLiveKeys: number;
  /**
   * Through the blob index a name has versions: a put over a document that holds a name writes a
   * new version of that name (an overwrite), where direct writes give it a new key.
   */
  overwriteInPlace?: boolean;
  /** false: no blob_put / blob_delete (a split tenant has no blobs: its blob writes would be refused). */
  blobOps?: boolean;
}

export class SlotPlanner {
  private readonly live = new Map<string, Map<string, RowState>>();
  private readonly rnd: () => number;

  constructor(
    readonly slot: number,
    readonly tenants: string[],
    seed: number,
    readonly opts: PlanOptions,
  ) {
    this.rnd = prng((seed * 1_000_003 + slot * 7919) >>> 0);
  }

  private keys(tenant: string, table: LoadTable): Map<string, RowState> {
    const id = `${tenant}/${table}`;
    let m = this.live.get(id);
    if (!m) this.live.set(id, (m = new Map()));
    return m;
  }

  private pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.rnd() * xs.length)];
  }

  liveCount(): number {
    let n = 0;
    for (const m of this.live.values()) n += m.size;
    return n;
  }

  next(): PlannedOp {
    const tenant = this.pick(this.tenants);
    if (this.rnd() < this.opts.readFraction) {
      const tables = LOAD_TABLES.filter((t) => this.keys(tenant, t).size > 0);
      if (tables.length) {
        const table = this.pick(tables);
        const [key, expected] = this.pick([...this.keys(tenant, table).entries()]);
        return { kind: 'read', tenant, table, key, expected };
      }
    }
    const r = this.rnd();
    const table: LoadTable = r < 0.3 ? 'accounts' : r < 0.7 ? 'documents' : 'events';
    const live = this.keys(tenant, table);
    const x = this.rnd();
    if (live.size < 2 || (live.size < this.opts.maxLiveKeys && x < 0.3)) return this.insert(tenant, table);
    const [key, state] = this.pick([...live.entries()]);
    if (x > (live.size >= this.opts.maxLiveKeys ? 0.5 : 0.85)) return { kind: 'write', tenant, table, key, op: 'delete', after: { present: false } };
    if (table === 'documents' && this.opts.blobOps !== false && this.rnd() < 0.35) {
      // A document with an object: replace it by a new version (overwrite) or delete it.
      if (state.blobKey && this.rnd() < 0.4) return this.blobDelete(tenant, key, state);
      return this.blobPut(tenant, key, state);
    }
    return this.update(tenant, table, key, state);
  }

  private body(): string | null {
    const r = this.rnd();
    if (r < 0.25) return incompressibleText(this.opts.bodyBytes);
    if (r < 0.85) return `short body ${randomBytes(6).toString('hex')} `.repeat(1 + Math.floor(this.rnd() * 20));
    return null;
  }

  private insert(tenant: string, table: LoadTable): PlannedWrite {
    const key = randomUUID();
    if (table !== 'documents') return { kind: 'write', tenant, table, key, op: 'insert', version: 1, after: { present: true, value: 1 } };
    const body = this.body();
    return {
      kind: 'write',
      tenant,
      table,
      key,
      op: 'insert',
      version: 1,
      body,
      after: { present: true, value: 1, bodySha: body === null ? null : sha256Hex(body), blobKey: null },
    };
  }

  private update(tenant: string, table: LoadTable, key: string, state: RowState): PlannedWrite {
    const version = (state.value ?? 0) + 1;
    if (table !== 'documents') return { kind: 'write', tenant, table, key, op: 'update', version, after: { ...state, value: version } };
    // Most document updates leave the body alone: the unchanged-TOAST path of change apply.
    const body = this.rnd() < 0.3 ? this.body() : undefined;
    const bodySha = body === undefined ? state.bodySha : body === null ? null : sha256Hex(body);
    return { kind: 'write', tenant, table, key, op: 'update', version, body, after: { ...state, value: version, bodySha } };
  }

  private blobPut(tenant: string, key: string, state: RowState): PlannedWrite {
    const content = randomBytes(512 + Math.floor(this.rnd() * 48 * 1024));
    const sha256 = sha256Hex(content);
    if (this.opts.overwriteInPlace && state.blobKey) {
      const blob = { blobKey: state.blobKey, content, sha256, overwrites: true as const };
      return { kind: 'write', tenant, table: 'documents', key, op: 'blob_put', blob, after: state };
    }
    const blobKey = `${tenantBlobPrefix(tenant)}docs/${randomUUID()}`;
    const replaces = state.blobKey ?? undefined;
    return { kind: 'write', tenant, table: 'documents', key, op: 'blob_put', blob: { blobKey, content, sha256, replaces }, after: { ...state, blobKey } };
  }

  private blobDelete(tenant: string, key: string, state: RowState): PlannedWrite {
    return { kind: 'write', tenant, table: 'documents', key, op: 'blob_delete', blobDelete: { blobKey: state.blobKey! }, after: { ...state, blobKey: null } };
  }

  /** Records the outcome of a planned write in the slot's view of its keys. */
  settle(w: PlannedWrite, status: 'ack' | 'refused' | 'unknown'): void {
    const live = this.keys(w.tenant, w.table);
    if (status === 'ack') {
      if (w.after.present) live.set(w.key, w.after);
      else live.delete(w.key);
    } else if (status === 'unknown') {
      live.delete(w.key);
    }
    // refused: nothing changed; a refused insert's key was never live and is never reused.
  }
}
