// The replication connection's CopyData handler (lib/cdc/stream.ts), fed the bytes a walsender
// sends: what each message becomes, and that nothing it cannot read is skipped.
import { describe, it, expect } from 'vitest';
import { copyDataHandler, type CopyDataSink } from '../../lib/cdc/stream';
import { PgoutputDecoder, type PgoutputMessage } from '../../lib/cdc/pgoutput';

function recorder() {
  const seen: string[] = [];
  const messages: { msg: PgoutputMessage; bytes: number }[] = [];
  const sink: CopyDataSink = {
    message: (msg, bytes) => {
      messages.push({ msg, bytes });
      seen.push(`message ${msg.tag}`);
    },
    keepalive: (walEnd, reply) => seen.push(`keepalive ${walEnd} ${reply}`),
    fail: (e) => seen.push(`fail ${e.message}`),
  };
  return { sink, seen, messages, handle: copyDataHandler(new PgoutputDecoder(), sink) };
}

/** XLogData: 'w', WAL start, WAL end, send time, then the pgoutput message. */
function xlogData(payload: Buffer): Buffer {
  const head = Buffer.alloc(25);
  head[0] = 0x77;
  head.writeUInt32BE(0x1, 1);
  head.writeUInt32BE(0x1000, 5);
  return Buffer.concat([head, payload]);
}

/** pgoutput BEGIN: final LSN, commit time, xid. */
function begin(finalHi: number, finalLo: number): Buffer {
  const b = Buffer.alloc(21);
  b[0] = 0x42;
  b.writeUInt32BE(finalHi, 1);
  b.writeUInt32BE(finalLo, 5);
  b.writeBigInt64BE(0n, 9);
  b.writeUInt32BE(777, 17);
  return b;
}

function keepalive(hi: number, lo: number, reply: number): Buffer {
  const b = Buffer.alloc(18);
  b[0] = 0x6b;
  b.writeUInt32BE(hi, 1);
  b.writeUInt32BE(lo, 5);
  b[17] = reply;
  return b;
}

describe('copyDataHandler', () => {
  it('decodes an XLogData message past its header, counting the pgoutput bytes', () => {
    const r = recorder();
    const payload = begin(0x2, 0xabcdef01);
    r.handle({ chunk: xlogData(payload) });
    expect(r.seen).toEqual(['message begin']);
    expect(r.messages[0].msg).toMatchObject({ tag: 'begin', finalLsn: '2/ABCDEF01', xid: 777 });
    expect(r.messages[0].bytes).toBe(payload.length);
  });

  it("reads a keepalive's WAL end and whether the server asks for an answer", () => {
    const r = recorder();
    r.handle({ chunk: keepalive(0x3, 0xff, 1) });
    r.handle({ chunk: keepalive(0, 0x1234abcd, 0) });
    expect(r.seen).toEqual(['keepalive 3/FF true', 'keepalive 0/1234ABCD false']);
  });

  it('fails the stream on a message it cannot read, never skipping it', () => {
    const r = recorder();
    r.handle({ chunk: Buffer.from([0x78, 0, 0]) }); // no such replication message
    r.handle({ chunk: xlogData(begin(1, 1).subarray(0, 10)) }); // a truncated BEGIN
    r.handle({ chunk: keepalive(1, 1, 0).subarray(0, 12) });
    expect(r.messages).toHaveLength(0);
    expect(r.seen).toEqual([
      'fail unknown replication message 0x78 from the walsender',
      'fail truncated pgoutput message (need 8 bytes at 34 of 35)', // positions in the CopyData message, its 25-byte header included
      'fail truncated keepalive message (12 bytes)',
    ]);
  });
});
