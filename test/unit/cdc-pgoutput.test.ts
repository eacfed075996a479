import { describe, it, expect } from 'vitest';
import { PgoutputDecoder, RawTuple, UNCHANGED_TOAST } from '../../lib/cdc/pgoutput';

// A tiny encoder for pgoutput v1 messages, written from the protocol documentation.
class W {
  private parts: Buffer[] = [];
  u8(v: number | string) {
    this.parts.push(Buffer.from([typeof v === 'string' ? v.charCodeAt(0) : v]));
    return this;
  }
  i16(v: number) {
    const b = Buffer.alloc(2);
    b.writeInt16BE(v);
    this.parts.push(b);
    return this;
  }
  i32(v: number) {
    const b = Buffer.alloc(4);
    b.writeInt32BE(v);
    this.parts.push(b);
    return this;
  }
  i64(v: bigint) {
    const b = Buffer.alloc(8);
    b.writeBigInt64BE(v);
    this.parts.push(b);
    return this;
  }
  lsn(hi: number, lo: number) {
    const b = Buffer.alloc(8);
    b.writeUInt32BE(hi, 0);
    b.writeUInt32BE(lo, 4);
    this.parts.push(b);
    return this;
  }
  str(s: string) {
    this.parts.push(Buffer.from(s + '\0', 'utf8'));
    return this;
  }
  text(s: string) {
    const b = Buffer.from(s, 'utf8');
    return this.u8('t').i32(b.length).raw(b);
  }
  raw(b: Buffer) {
    this.parts.push(b);
    return this;
  }
  buf() {
    return Buffer.concat(this.parts);
  }
}

const relation = () =>
  new W()
    .u8('R')
    .i32(16384)
    .str('public')
    .str('Docs')
    .u8('d')
    .i16(3)
    .u8(1)
    .str('tenant_id')
    .i32(25)
    .i32(-1)
    .u8(1)
    .str('id')
    .i32(20)
    .i32(-1)
    .u8(0)
    .str('big')
    .i32(25)
    .i32(-1)
    .buf();

describe('pgoutput decoder', () => {
  it('decodes begin and commit positions', () => {
    const d = new PgoutputDecoder();
    expect(d.decode(new W().u8('B').lsn(0x16, 0xb374d848).i64(1n).i32(777).buf())).toEqual({
      tag: 'begin',
      finalLsn: '16/B374D848',
      commitTimeMicros: 1n,
      xid: 777,
    });
    expect(d.decode(new W().u8('C').u8(0).lsn(0, 0x100).lsn(0, 0x128).i64(2n).buf())).toEqual({
      tag: 'commit',
      flags: 0,
      commitLsn: '0/100',
      endLsn: '0/128',
      commitTimeMicros: 2n,
    });
  });

  it('keeps values as exact text, NULL as null', () => {
    const d = new PgoutputDecoder();
    const rel = d.decode(relation());
    expect(rel).toMatchObject({
      tag: 'relation',
      relation: {
        name: 'Docs',
        replicaIdentity: 'default',
        columns: [
          { name: 'tenant_id', isKey: true },
          { name: 'id', isKey: true },
          { name: 'big', isKey: false },
        ],
      },
    });
    const ins = d.decode(new W().u8('I').i32(16384).u8('N').i16(3).text('acme').text('9007199254740993').u8('n').buf());
    expect(ins).toMatchObject({ tag: 'insert', newTuple: ['acme', '9007199254740993', null] });
  });

  it('marks an unchanged TOAST value with the sentinel, never undefined or null', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    const upd = d.decode(new W().u8('U').i32(16384).u8('N').i16(3).text('acme').text('1').u8('u').buf());
    expect(upd).toMatchObject({ tag: 'update', oldKind: null, oldTuple: null });
    if (upd.tag !== 'update') throw new Error();
    expect(upd.newTuple[2]).toBe(UNCHANGED_TOAST);
  });

  it('fills an unchanged TOAST value from a full old tuple (REPLICA IDENTITY FULL)', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    const upd = d.decode(new W().u8('U').i32(16384).u8('O').i16(3).text('acme').text('1').text('BIG').u8('N').i16(3).text('acme').text('2').u8('u').buf());
    if (upd.tag !== 'update') throw new Error();
    expect(upd.oldKind).toBe('O');
    expect(upd.newTuple).toEqual(['acme', '2', 'BIG']);
  });

  it('decodes a key change and a delete by key', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    const upd = d.decode(new W().u8('U').i32(16384).u8('K').i16(3).text('acme').text('1').u8('n').u8('N').i16(3).text('acme').text('5').text('x').buf());
    expect(upd).toMatchObject({ tag: 'update', oldKind: 'K', oldTuple: ['acme', '1', null], newTuple: ['acme', '5', 'x'] });
    const del = d.decode(new W().u8('D').i32(16384).u8('K').i16(3).text('acme').text('5').u8('n').buf());
    expect(del).toMatchObject({ tag: 'delete', oldKind: 'K', oldTuple: ['acme', '5', null] });
  });

  it('decodes a truncate naming its relations', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    const t = d.decode(new W().u8('T').i32(1).u8(1).i32(16384).buf());
    expect(t).toMatchObject({ tag: 'truncate', cascade: true, restartIdentity: false, relations: [{ name: 'Docs' }] });
  });

  it('copies values out of the input buffer (the driver reuses it)', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    const b = new W().u8('I').i32(16384).u8('N').i16(3).text('acme').text('1').text('hello').buf();
    const ins = d.decode(b);
    b.fill(0);
    expect(ins).toMatchObject({ newTuple: ['acme', '1', 'hello'] });
  });

  it('throws on malformed input instead of yielding a partial change', () => {
    const d = new PgoutputDecoder();
    expect(() => d.decode(new W().u8('I').i32(1).u8('N').i16(0).buf())).toThrow(/before its relation message/);
    d.decode(relation());
    expect(() => d.decode(new W().u8('I').i32(16384).u8('N').i16(2).text('a').text('b').buf())).toThrow(/has 2 columns/);
    expect(() => d.decode(new W().u8('I').i32(16384).u8('N').i16(3).text('a').buf())).toThrow(/truncated/);
    expect(() => d.decode(new W().u8('I').i32(16384).u8('N').i16(3).text('a').text('b').u8('b').i32(1).u8(0).buf())).toThrow(/binary/);
    expect(() => d.decode(new W().u8('S').buf())).toThrow(/unknown pgoutput message/);
  });

  it('checks a truncated length or an unknown value kind inside an insert tuple', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    const cut = new W().u8('I').i32(16384).u8('N').i16(3).text('acme').text('1').u8('t').i32(10).raw(Buffer.from('short')).buf();
    expect(() => d.decode(cut)).toThrow(/truncated pgoutput message \(need 10 bytes/);
    expect(() => d.decode(new W().u8('I').i32(16384).u8('N').i16(3).text('acme').text('1').u8('x').buf())).toThrow(/unknown tuple value kind 'x'/);
    expect(() => d.decode(new W().u8('I').i32(16384).u8('N').i16(3).text('acme').text('1').u8('t').i32(1).buf())).toThrow(/truncated/);
  });
});

/** COPY text format from decoded values, as the applier writes rows that carry no bytes. */
function copyLineFromValues(values: (string | null)[]): string {
  const esc: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };
  return values.map((v) => (v === null ? '\\N' : v.replace(/[\\\n\r\t]/g, (c) => esc[c]))).join('\t') + '\n';
}

describe('an insert kept as its bytes (RawTuple)', () => {
  const awkward = ['a\\b', 'tab\there', 'line\nbreak', 'cr\rlf\r\n', '\\.', '', 'é日本🐘', '\\N', 'plain', ' \\\\t '];
  const insertOf = (d: PgoutputDecoder, big: string | null) => {
    const w = new W().u8('I').i32(16384).u8('N').i16(3).text('acme').text('42');
    return d.decode((big === null ? w.u8('n') : w.text(big)).buf());
  };

  it('decodes the same values as the tuple reader, and only the asked ones on request', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    for (const v of [...awkward, null]) {
      const ins = insertOf(d, v);
      if (ins.tag !== 'insert' || !ins.raw) throw new Error('expected an insert with its bytes');
      expect(ins.newTuple).toEqual(['acme', '42', v]);
      expect(ins.raw.datums()).toEqual(['acme', '42', v]);
      expect(ins.raw.datumsAt([2, 0])).toEqual([v, 'acme']);
      expect(ins.raw.hasUnchanged).toBe(false);
    }
  });

  it('writes a COPY text line byte for byte as from the decoded values, in the asked column order', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    for (const v of [...awkward, null]) {
      const ins = insertOf(d, v);
      if (ins.tag !== 'insert' || !ins.raw) throw new Error('expected an insert with its bytes');
      for (const order of [[0, 1, 2], [2, 0], [1]]) {
        const raw: RawTuple = ins.raw;
        const out = Buffer.alloc(raw.copyLineBound);
        const end = raw.writeCopyLine(out, 0, order);
        expect(out.subarray(0, end).toString('utf8')).toBe(copyLineFromValues(order.map((i) => ins.newTuple[i] as string | null)));
      }
    }
  });

  it('stays within its bound when every byte needs escaping, and writes lines back to back', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    const worst = '\\\t\n\r'.repeat(50);
    const a = insertOf(d, worst);
    const b = insertOf(d, null);
    if (a.tag !== 'insert' || !a.raw || b.tag !== 'insert' || !b.raw) throw new Error('expected inserts with their bytes');
    const out = Buffer.alloc(a.raw.copyLineBound + b.raw.copyLineBound);
    const end = b.raw.writeCopyLine(out, a.raw.writeCopyLine(out, 0, [0, 1, 2]), [0, 1, 2]);
    expect(end).toBeLessThanOrEqual(out.length);
    expect(out.subarray(0, end).toString('utf8')).toBe(copyLineFromValues(['acme', '42', worst]) + copyLineFromValues(['acme', '42', null]));
  });

  it('keeps its bytes when the input buffer is reused', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    const input = new W().u8('I').i32(16384).u8('N').i16(3).text('acme').text('7').text('tab\tvalue').buf();
    const ins = d.decode(input);
    input.fill(0);
    if (ins.tag !== 'insert' || !ins.raw) throw new Error('expected an insert with its bytes');
    const out = Buffer.alloc(ins.raw.copyLineBound);
    expect(out.subarray(0, ins.raw.writeCopyLine(out, 0, [0, 1, 2])).toString()).toBe('acme\t7\ttab\\tvalue\n');
    expect(ins.newTuple).toEqual(['acme', '7', 'tab\tvalue']);
  });

  it('marks an insert carrying an unchanged TOAST value, and refuses to write it as COPY text', () => {
    const d = new PgoutputDecoder();
    d.decode(relation());
    const ins = d.decode(new W().u8('I').i32(16384).u8('N').i16(3).text('acme').text('1').u8('u').buf());
    if (ins.tag !== 'insert' || !ins.raw) throw new Error('expected an insert with its bytes');
    expect(ins.raw.hasUnchanged).toBe(true);
    expect(ins.newTuple[2]).toBe(UNCHANGED_TOAST);
    expect(() => ins.raw!.writeCopyLine(Buffer.alloc(ins.raw!.copyLineBound), 0, [0, 1, 2])).toThrow(/unchanged TOAST/);
  });
});
