// Decoder for pgoutput protocol version 1 messages (PostgreSQL "Logical Replication Message
// Formats"), keeping every value as the exact text PostgreSQL sent. Pure, no I/O.
// Invariants: values are copied out of the input buffer (the driver reuses its buffers), an
// unchanged TOAST datum is the UNCHANGED_TOAST sentinel (never undefined or null), and a
// malformed message throws instead of yielding a partial change. An INSERT's tuple is checked
// whole but kept as its bytes (RawTuple): its values are decoded when asked for, and the COPY
// path writes them from the bytes without making a string of each (most of the apply's per-row work).

/** Marks a column whose TOASTed value did not change: the apply must leave the target's value. */
export const UNCHANGED_TOAST: unique symbol = Symbol('unchanged-toast');
export type Datum = string | null | typeof UNCHANGED_TOAST;

export interface RelationColumn {
  name: string;
  /** Part of the replica identity (the key) on the source. */
  isKey: boolean;
  typeOid: number;
  typeMod: number;
}

export interface Relation {
  relationOid: number;
  schema: string;
  name: string;
  replicaIdentity: 'default' | 'nothing' | 'full' | 'index';
  columns: RelationColumn[];
}

export type PgoutputMessage =
  | { tag: 'begin'; finalLsn: string; commitTimeMicros: bigint; xid: number }
  | { tag: 'commit'; flags: number; commitLsn: string; endLsn: string; commitTimeMicros: bigint }
  | { tag: 'origin'; originLsn: string; originName: string }
  | { tag: 'relation'; relation: Relation }
  | { tag: 'type'; typeOid: number; schema: string; name: string }
  /** `raw`: the tuple's bytes, when decoded from the wire (newTuple is then decoded from them on first use). */
  | { tag: 'insert'; relation: Relation; newTuple: Datum[]; raw?: RawTuple }
  | { tag: 'update'; relation: Relation; oldKind: 'K' | 'O' | null; oldTuple: Datum[] | null; newTuple: Datum[] }
  | { tag: 'delete'; relation: Relation; oldKind: 'K' | 'O'; oldTuple: Datum[] }
  | { tag: 'truncate'; relations: Relation[]; cascade: boolean; restartIdentity: boolean }
  | {
      tag: 'message';
      transactional: boolean;
      lsn: string;
      prefix: string;
      size: number;
      /** Only for shardctl's own (prefix `shardctl`), short. */ content?: string;
    };

export class PgoutputDecodeError extends Error {
  override readonly name = 'PgoutputDecodeError';
}

const truncated = (need: number, at: number, of: number) => new PgoutputDecodeError(`truncated pgoutput message (need ${need} bytes at ${at} of ${of})`);

class Reader {
  off = 0;
  constructor(readonly buf: Buffer) {}
  private need(n: number) {
    if (this.off + n > this.buf.length) throw truncated(n, this.off, this.buf.length);
  }
  u8(): number {
    this.need(1);
    return this.buf.readUInt8(this.off++);
  }
  i16(): number {
    this.need(2);
    const v = this.buf.readInt16BE(this.off);
    this.off += 2;
    return v;
  }
  i32(): number {
    this.need(4);
    const v = this.buf.readInt32BE(this.off);
    this.off += 4;
    return v;
  }
  u32(): number {
    this.need(4);
    const v = this.buf.readUInt32BE(this.off);
    this.off += 4;
    return v;
  }
  i64(): bigint {
    this.need(8);
    const v = this.buf.readBigInt64BE(this.off);
    this.off += 8;
    return v;
  }
  lsn(): string {
    const hi = this.u32();
    const lo = this.u32();
    return `${hi.toString(16).toUpperCase()}/${lo.toString(16).toUpperCase()}`;
  }
  cstring(): string {
    const end = this.buf.indexOf(0, this.off);
    if (end < 0) throw new PgoutputDecodeError('unterminated string in pgoutput message');
    const s = this.buf.toString('utf8', this.off, end);
    this.off = end + 1;
    return s;
  }
  text(len: number): string {
    this.need(len);
    const s = this.buf.toString('utf8', this.off, this.off + len); // a copy: the input buffer is reused by the driver
    this.off += len;
    return s;
  }
  skip(len: number) {
    this.need(len);
    this.off += len;
  }
}

const IDENTITY: Record<string, Relation['replicaIdentity']> = { d: 'default', n: 'nothing', f: 'full', i: 'index' };

/** Stateful: relation messages are remembered, as later changes refer to relations by OID only. */
export class PgoutputDecoder {
  private readonly relations = new Map<number, Relation>();

  relation(oid: number): Relation | undefined {
    return this.relations.get(oid);
  }

  /** The message in `buf` from `start` on (a replication message's header before it is skipped, not copied). */
  decode(buf: Buffer, start = 0): PgoutputMessage {
    const r = new Reader(buf);
    r.off = start;
    const tag = String.fromCharCode(r.u8());
    switch (tag) {
      case 'B':
        return { tag: 'begin', finalLsn: r.lsn(), commitTimeMicros: r.i64(), xid: r.u32() };
      case 'C':
        return { tag: 'commit', flags: r.u8(), commitLsn: r.lsn(), endLsn: r.lsn(), commitTimeMicros: r.i64() };
      case 'O':
        return { tag: 'origin', originLsn: r.lsn(), originName: r.cstring() };
      case 'R':
        return { tag: 'relation', relation: this.readRelation(r) };
      case 'Y':
        return { tag: 'type', typeOid: r.u32(), schema: r.cstring(), name: r.cstring() };
      case 'I': {
        const relation = this.known(r.u32());
        const n = String.fromCharCode(r.u8());
        if (n !== 'N') throw new PgoutputDecodeError(`insert: expected 'N', got '${n}'`);
        return new InsertMessage(relation, RawTuple.read(r, relation));
      }
      case 'U': {
        const relation = this.known(r.u32());
        let kind = String.fromCharCode(r.u8());
        let oldKind: 'K' | 'O' | null = null;
        let oldTuple: Datum[] | null = null;
        if (kind === 'K' || kind === 'O') {
          oldKind = kind;
          oldTuple = readTuple(r, relation, null);
          kind = String.fromCharCode(r.u8());
        }
        if (kind !== 'N') throw new PgoutputDecodeError(`update: expected 'N', got '${kind}'`);
        // Under REPLICA IDENTITY FULL the old tuple carries the full value of an unchanged TOAST column.
        const newTuple = readTuple(r, relation, oldKind === 'O' ? oldTuple : null);
        return { tag: 'update', relation, oldKind, oldTuple, newTuple };
      }
      case 'D': {
        const relation = this.known(r.u32());
        const kind = String.fromCharCode(r.u8());
        if (kind !== 'K' && kind !== 'O') throw new PgoutputDecodeError(`delete: expected 'K' or 'O', got '${kind}'`);
        return { tag: 'delete', relation, oldKind: kind, oldTuple: readTuple(r, relation, null) };
      }
      case 'T': {
        const n = r.u32();
        const flags = r.u8();
        const relations: Relation[] = [];
        for (let i = 0; i < n; i++) relations.push(this.known(r.u32()));
        return { tag: 'truncate', relations, cascade: (flags & 1) !== 0, restartIdentity: (flags & 2) !== 0 };
      }
      case 'M': {
        const flags = r.u8();
        const lsn = r.lsn();
        const prefix = r.cstring();
        const size = r.u32();
        // Our own markers are read (they are short); anybody else's are skipped unread.
        const content = prefix.startsWith('shardctl') && size <= 1024 ? r.text(size) : (r.skip(size), undefined);
        return { tag: 'message', transactional: (flags & 1) !== 0, lsn, prefix, size, content };
      }
      default:
        throw new PgoutputDecodeError(`unknown pgoutput message '${tag}' (0x${buf[0]?.toString(16)}): only protocol version 1 is supported`);
    }
  }

  private known(oid: number): Relation {
    const rel = this.relations.get(oid);
    if (!rel) throw new PgoutputDecodeError(`change for relation ${oid} arrived before its relation message`);
    return rel;
  }

  private readRelation(r: Reader): Relation {
    const relationOid = r.u32();
    const schema = r.cstring();
    const name = r.cstring();
    const ident = String.fromCharCode(r.u8());
    const replicaIdentity = IDENTITY[ident];
    if (!replicaIdentity) throw new PgoutputDecodeError(`unknown replica identity '${ident}' for ${schema}.${name}`);
    const n = r.i16();
    const columns: RelationColumn[] = [];
    for (let i = 0; i < n; i++) {
      const flags = r.u8();
      columns.push({ isKey: (flags & 1) !== 0, name: r.cstring(), typeOid: r.u32(), typeMod: r.i32() });
    }
    const relation: Relation = { relationOid, schema, name, replicaIdentity, columns };
    this.relations.set(relationOid, relation);
    return relation;
  }
}

function readTuple(r: Reader, relation: Relation, unchangedFrom: Datum[] | null): Datum[] {
  const n = r.i16();
  if (n !== relation.columns.length) {
    throw new PgoutputDecodeError(`tuple for ${relation.schema}.${relation.name} has ${n} columns, relation message has ${relation.columns.length}`);
  }
  const out: Datum[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const kind = String.fromCharCode(r.u8());
    switch (kind) {
      case 'n':
        out[i] = null;
        break;
      case 'u': {
        const prev = unchangedFrom?.[i];
        out[i] = typeof prev === 'string' ? prev : UNCHANGED_TOAST;
        break;
      }
      case 't':
        out[i] = r.text(r.u32());
        break;
      case 'b':
        throw new PgoutputDecodeError(`binary tuple value in ${relation.schema}.${relation.name}: the stream must use text format`);
      default:
        throw new PgoutputDecodeError(`unknown tuple value kind '${kind}' in ${relation.schema}.${relation.name}`);
    }
  }
  return out;
}

/** An INSERT as decoded from the wire: the tuple is decoded from its bytes on first use. */
class InsertMessage {
  readonly tag = 'insert' as const;
  private decoded: Datum[] | null = null;
  constructor(
    readonly relation: Relation,
    readonly raw: RawTuple,
  ) {}
  get newTuple(): Datum[] {
    return (this.decoded ??= this.raw.datums());
  }
}

// Column positions in RawTuple.buf, for one tuple at a time (everything here is synchronous).
let colStart = new Int32Array(64);
let colEnd = new Int32Array(64);
const NULL_VALUE = -1;
const UNCHANGED_VALUE = -2;

const BACKSLASH = 0x5c;
const TAB = 0x09;
const NEWLINE = 0x0a;
const CR = 0x0d;

/**
 * A tuple's bytes (TupleData: column count, then per column its kind, and for 't' its length and
 * text), copied out of the input buffer and checked whole when read: every accessor below works
 * on a well-formed tuple of `columns` values.
 */
export class RawTuple {
  private constructor(
    readonly buf: Buffer,
    readonly columns: number,
    /** Some value is 'u' (an unchanged TOAST datum): not the case of any INSERT PostgreSQL sends. */
    readonly hasUnchanged: boolean,
  ) {}

  /** Reads and checks one tuple at the reader's position, as readTuple does, and copies its bytes. */
  static read(r: Reader, relation: Relation): RawTuple {
    const start = r.off;
    const n = r.i16();
    if (n !== relation.columns.length) {
      throw new PgoutputDecodeError(`tuple for ${relation.schema}.${relation.name} has ${n} columns, relation message has ${relation.columns.length}`);
    }
    // Reader's checks, inlined: this runs once per inserted row.
    const buf = r.buf;
    const len = buf.length;
    let off = r.off;
    let unchanged = false;
    for (let i = 0; i < n; i++) {
      if (off >= len) throw truncated(1, off, len);
      const kind = buf[off++];
      if (kind === 0x74 /* t */) {
        if (off + 4 > len) throw truncated(4, off, len);
        const size = buf.readUInt32BE(off);
        off += 4;
        if (off + size > len) throw truncated(size, off, len);
        off += size;
      } else if (kind === 0x75 /* u */) unchanged = true;
      else if (kind !== 0x6e /* n */) {
        const k = String.fromCharCode(kind);
        if (k === 'b') throw new PgoutputDecodeError(`binary tuple value in ${relation.schema}.${relation.name}: the stream must use text format`);
        throw new PgoutputDecodeError(`unknown tuple value kind '${k}' in ${relation.schema}.${relation.name}`);
      }
    }
    r.off = off;
    // A copy: the input buffer is reused by the driver.
    const own = Buffer.allocUnsafe(off - start);
    buf.copy(own, 0, start, off);
    return new RawTuple(own, n, unchanged);
  }

  /** Fills colStart/colEnd (end NULL_VALUE / UNCHANGED_VALUE for those kinds). */
  private locate(): void {
    const b = this.buf;
    const n = this.columns;
    if (colStart.length < n) {
      colStart = new Int32Array(n);
      colEnd = new Int32Array(n);
    }
    let off = 2;
    for (let i = 0; i < n; i++) {
      const kind = b[off++];
      if (kind === 0x74) {
        const len = b.readUInt32BE(off);
        off += 4;
        colStart[i] = off;
        colEnd[i] = off + len;
        off += len;
      } else {
        colStart[i] = off;
        colEnd[i] = kind === 0x75 ? UNCHANGED_VALUE : NULL_VALUE;
      }
    }
  }

  /** Every value, as readTuple gives them. */
  datums(): Datum[] {
    this.locate();
    const out: Datum[] = new Array(this.columns);
    for (let i = 0; i < this.columns; i++) {
      const e = colEnd[i];
      out[i] = e === NULL_VALUE ? null : e === UNCHANGED_VALUE ? UNCHANGED_TOAST : this.buf.toString('utf8', colStart[i], e);
    }
    return out;
  }

  /** The values at `indexes` (e.g. the key's), decoding only those. */
  datumsAt(indexes: readonly number[]): Datum[] {
    this.locate();
    const out: Datum[] = new Array(indexes.length);
    for (let k = 0; k < indexes.length; k++) {
      const i = indexes[k];
      const e = colEnd[i];
      out[k] = e === NULL_VALUE ? null : e === UNCHANGED_VALUE ? UNCHANGED_TOAST : this.buf.toString('utf8', colStart[i], e);
    }
    return out;
  }

  /** Whether a value at `indexes` is NULL or an unchanged TOAST datum (datumsAt without making strings). */
  lacksAny(indexes: readonly number[]): boolean {
    this.locate();
    for (let k = 0; k < indexes.length; k++) if (colEnd[indexes[k]] < 0) return true;
    return false;
  }

  /** Room writeCopyLine may need at most: every byte escaped, plus separators and `\N`s. */
  get copyLineBound(): number {
    return 2 * this.buf.length + 2;
  }

  /**
   * Writes the values at `indexes`, in that order, as one line of COPY's text format into `out`
   * at `pos` (NULL as \N; backslash, tab, newline and carriage return escaped; tab-separated,
   * newline-terminated) and returns the position after it. The text's bytes are copied as they
   * came: those four are ASCII, and no byte of a multi-byte UTF-8 character is ASCII, so escaping
   * bytes is escaping characters. Throws on an unchanged TOAST value (it has no text to write).
   */
  writeCopyLine(out: Buffer, pos: number, indexes: readonly number[]): number {
    this.locate();
    const b = this.buf;
    for (let k = 0; k < indexes.length; k++) {
      if (k > 0) out[pos++] = TAB;
      const i = indexes[k];
      const e = colEnd[i];
      if (e === NULL_VALUE) {
        out[pos++] = BACKSLASH;
        out[pos++] = 0x4e; // N
        continue;
      }
      if (e === UNCHANGED_VALUE) throw new Error('writeCopyLine: an unchanged TOAST value has no text');
      for (let j = colStart[i]; j < e; j++) {
        const c = b[j];
        if (c === BACKSLASH || c === TAB || c === NEWLINE || c === CR) {
          out[pos++] = BACKSLASH;
          out[pos++] = c === BACKSLASH ? BACKSLASH : c === TAB ? 0x74 : c === NEWLINE ? 0x6e : 0x72;
        } else out[pos++] = c;
      }
    }
    out[pos++] = NEWLINE;
    return pos;
  }
}
