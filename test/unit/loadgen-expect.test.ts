// Folding a loadgen log into expected key states: acks fix the state, refusals never count,
// unknown outcomes (and intents without an outcome) allow both the before and the after state.
import { describe, it, expect } from 'vitest';
import { foldLog, RowState } from '../../lib/loadgen/expect';
import { LogRecord, parseLog } from '../../lib/loadgen/log';

let seq = 0;
function rec(p: Partial<LogRecord>): LogRecord {
  return { seq: ++seq, ts: '2026-01-01T00:00:00Z', tenant: 't1', table: 'accounts', key: 'k1', op: 'insert', value: 1, status: 'ack', ...p } as LogRecord;
}
const only = (records: LogRecord[]) => {
  const e = foldLog(records);
  expect(e.keys).toHaveLength(1);
  return e.keys[0];
};
const present = (value: number, extra: Partial<RowState> = {}): RowState => ({ present: true, value, ...extra });

describe('foldLog', () => {
  it('takes the last acked write as the expected state', () => {
    const k = only([rec({ op: 'insert', value: 1 }), rec({ op: 'update', value: 2 }), rec({ op: 'update', value: 3 })]);
    expect(k.states).toEqual([present(3)]);
    expect(k.acks).toBe(3);
  });

  it('expects an acked delete to leave the key absent', () => {
    const k = only([rec({ op: 'insert', value: 1 }), rec({ op: 'delete', value: null })]);
    expect(k.states).toEqual([{ present: false }]);
  });

  it('ignores refused writes, so a refused-only key must be absent', () => {
    const k = only([rec({ op: 'insert', value: 1, status: 'refused' })]);
    expect(k.states).toEqual([{ present: false }]);
    expect(k.refused).toHaveLength(1);
    expect(k.acks).toBe(0);
  });

  it('keeps the acked value when a later update is refused', () => {
    const k = only([rec({ op: 'insert', value: 1 }), rec({ op: 'update', value: 2, status: 'refused' })]);
    expect(k.states).toEqual([present(1)]);
  });

  it('accepts the before and after state of an unknown outcome', () => {
    const e = foldLog([rec({ op: 'insert', value: 1 }), rec({ op: 'update', value: 2, status: 'unknown' })]);
    expect(e.keys[0].states).toEqual([present(1), present(2)]);
    expect(e.unknownOutcomes).toBe(1);
  });

  it('accepts absent or present after an unknown insert', () => {
    const k = only([rec({ op: 'insert', value: 1, status: 'unknown' })]);
    expect(k.states).toEqual([{ present: false }, present(1)]);
  });

  it('tracks document bodies and blob keys, keeping the body across updates that leave it alone', () => {
    const d = { table: 'documents' as const };
    const k = only([
      rec({ ...d, op: 'insert', value: 1, bodySha: 'b1' }),
      rec({ ...d, op: 'blob_put', value: 'sha-x', blobKey: 'tenants/t1/docs/x' }),
      rec({ ...d, op: 'update', value: 2 }),
    ]);
    expect(k.states).toEqual([present(2, { bodySha: 'b1', blobKey: 'tenants/t1/docs/x' })]);
  });

  it('lists acked blob puts (not refused or unknown ones) for the bucket check', () => {
    const d = { table: 'documents' as const };
    const e = foldLog([
      rec({ ...d, op: 'insert', value: 1, bodySha: null }),
      rec({ ...d, op: 'blob_put', value: 's1', blobKey: 'tenants/t1/docs/1' }),
      rec({ ...d, op: 'blob_put', value: 's2', blobKey: 'tenants/t1/docs/2', status: 'refused' }),
      rec({ ...d, op: 'blob_put', value: 's3', blobKey: 'tenants/t1/docs/3', status: 'unknown' }),
    ]);
    expect(e.blobs).toEqual([{ tenant: 't1', key: 'k1', blobKey: 'tenants/t1/docs/1', sha256: 's1' }]);
  });

  it('keeps an overwritten object expected (objects are immutable) and expects the row to name the new one', () => {
    const d = { table: 'documents' as const };
    const e = foldLog([
      rec({ ...d, op: 'insert', value: 1, bodySha: null }),
      rec({ ...d, op: 'blob_put', value: 's1', blobKey: 'tenants/t1/docs/1' }),
      rec({ ...d, op: 'blob_put', value: 's2', blobKey: 'tenants/t1/docs/2', replaces: 'tenants/t1/docs/1' }),
    ]);
    expect(e.keys[0].states).toEqual([present(1, { bodySha: null, blobKey: 'tenants/t1/docs/2' })]);
    expect(e.blobs.map((b) => b.blobKey)).toEqual(['tenants/t1/docs/1', 'tenants/t1/docs/2']);
  });

  it('expects an acked blob delete to clear the row and stops expecting the deleted object', () => {
    const d = { table: 'documents' as const };
    const e = foldLog([
      rec({ ...d, op: 'insert', value: 1, bodySha: null }),
      rec({ ...d, op: 'blob_put', value: 's1', blobKey: 'tenants/t1/docs/1' }),
      rec({ ...d, op: 'blob_delete', value: null, blobKey: 'tenants/t1/docs/1', objectDeleted: true }),
    ]);
    expect(e.keys[0].states).toEqual([present(1, { bodySha: null, blobKey: null })]);
    expect(e.blobs).toEqual([]);
    expect(e.blobsDeleted).toBe(1);
  });

  it('after an acked blob delete whose object delete failed, expects the object only when that delete was refused', () => {
    const d = { table: 'documents' as const };
    const put = [rec({ ...d, op: 'insert', value: 1, bodySha: null }), rec({ ...d, op: 'blob_put', value: 's1', blobKey: 'tenants/t1/docs/1' })];
    const del = (objectDeleted: boolean | 'unknown') =>
      foldLog([...put, rec({ ...d, op: 'blob_delete', value: null, blobKey: 'tenants/t1/docs/1', objectDeleted })]);
    // Refused: untouched, still expected. Unknown (lost around its COMMIT): maybe gone, not expected.
    expect(del(false).blobs.map((b) => b.blobKey)).toEqual(['tenants/t1/docs/1']);
    expect(del('unknown').blobs).toEqual([]);
    expect(del('unknown').keys[0].states).toEqual([present(1, { bodySha: null, blobKey: null })]);
  });

  it('keeps the object expected after a refused or unknown blob delete, and allows either row state after the unknown one', () => {
    const d = { table: 'documents' as const };
    const put = [rec({ ...d, op: 'insert', value: 1, bodySha: null }), rec({ ...d, op: 'blob_put', value: 's1', blobKey: 'tenants/t1/docs/1' })];
    const refused = foldLog([...put, rec({ ...d, op: 'blob_delete', value: null, blobKey: 'tenants/t1/docs/1', status: 'refused' })]);
    expect(refused.keys[0].states).toEqual([present(1, { bodySha: null, blobKey: 'tenants/t1/docs/1' })]);
    expect(refused.blobs.map((b) => b.blobKey)).toEqual(['tenants/t1/docs/1']);
    const unknown = foldLog([...put, rec({ ...d, op: 'blob_delete', value: null, blobKey: 'tenants/t1/docs/1', status: 'unknown' })]);
    expect(unknown.keys[0].states).toEqual([present(1, { bodySha: null, blobKey: 'tenants/t1/docs/1' }), present(1, { bodySha: null, blobKey: null })]);
    expect(unknown.blobs.map((b) => b.blobKey)).toEqual(['tenants/t1/docs/1']);
  });

  describe('through the blob index', () => {
    const d = { table: 'documents' as const, indexed: true as const };
    const name = 'tenants/t1/docs/1';
    const put = [rec({ table: 'documents', op: 'insert', value: 1, bodySha: null }), rec({ ...d, op: 'blob_put', value: 's1', blobKey: name })];

    it('expects an acked put to leave its name in the index with its sha256', () => {
      expect(foldLog(put).blobs).toEqual([{ tenant: 't1', key: 'k1', blobKey: name, sha256: 's1', indexed: true }]);
    });

    it('expects an overwritten name to hold the last acknowledged version, not a refused later one', () => {
      const e = foldLog([
        ...put,
        rec({ ...d, op: 'blob_put', value: 's2', blobKey: name, overwrites: true }),
        rec({ ...d, op: 'blob_put', value: 's3', blobKey: name, overwrites: true, status: 'refused' }),
      ]);
      expect(e.blobs).toEqual([{ tenant: 't1', key: 'k1', blobKey: name, sha256: 's2', indexed: true }]);
    });

    it('accepts the version before or after an unknown overwrite', () => {
      const e = foldLog([...put, rec({ ...d, op: 'blob_put', value: 's2', blobKey: name, overwrites: true, status: 'unknown' })]);
      expect(e.blobs).toEqual([{ tenant: 't1', key: 'k1', blobKey: name, sha256: 's2', alsoAccepts: ['s1'], indexed: true }]);
    });

    it('expects a name whose last acknowledged write deleted it to have no index row', () => {
      const e = foldLog([...put, rec({ ...d, op: 'blob_delete', value: null, blobKey: name, objectDeleted: true })]);
      expect(e.blobs).toEqual([]);
      expect(e.blobsUnlinked).toEqual([{ tenant: 't1', key: 'k1', blobKey: name, lastAckSeq: seq }]);
      expect(e.blobsDeleted).toBe(1);
    });

    it('expects a name put again after its delete to hold the new version', () => {
      const e = foldLog([...put, rec({ ...d, op: 'blob_delete', value: null, blobKey: name }), rec({ ...d, op: 'blob_put', value: 's2', blobKey: name })]);
      expect(e.blobsUnlinked).toEqual([]);
      expect(e.blobs).toEqual([{ tenant: 't1', key: 'k1', blobKey: name, sha256: 's2', indexed: true }]);
    });

    it('after an unknown delete (or an intent never answered) accepts the name with its version or without a row; a refused delete keeps it', () => {
      const unknown = foldLog([...put, rec({ ...d, op: 'blob_delete', value: null, blobKey: name, status: 'unknown' })]);
      expect(unknown.blobs).toEqual([{ tenant: 't1', key: 'k1', blobKey: name, sha256: 's1', indexed: true, mayBeUnlinked: true }]);
      expect(unknown.blobsUnlinked).toEqual([]);
      expect(unknown.keys[0].states).toEqual([present(1, { bodySha: null, blobKey: name }), present(1, { bodySha: null, blobKey: null })]);
      const intent = foldLog([...put, rec({ ...d, op: 'blob_delete', value: null, blobKey: name, status: 'pending' })]);
      expect(intent.blobs).toEqual(unknown.blobs);
      const refused = foldLog([...put, rec({ ...d, op: 'blob_delete', value: null, blobKey: name, status: 'refused' })]);
      expect(refused.blobs).toEqual(foldLog(put).blobs);
    });

    it('expects nothing of a name only ever refused', () => {
      const e = foldLog([
        rec({ table: 'documents', op: 'insert', value: 1, bodySha: null }),
        rec({ ...d, op: 'blob_put', value: 's1', blobKey: name, status: 'refused' }),
      ]);
      expect([e.blobs, e.blobsUnlinked]).toEqual([[], []]);
    });
  });

  it('treats an intent followed by its outcome as that outcome', () => {
    const k = only([rec({ op: 'insert', value: 1, status: 'pending' }), rec({ op: 'insert', value: 1, status: 'ack' })]);
    expect(k.states).toEqual([present(1)]);
    expect(k.unknown).toBe(0);
  });

  it('treats an intent without an outcome (writer killed) as unknown', () => {
    const e = foldLog([rec({ op: 'insert', value: 1 }), rec({ op: 'update', value: 2, status: 'pending' })]);
    expect(e.keys[0].states).toEqual([present(1), present(2)]);
    expect(e.unknownOutcomes).toBe(1);
  });

  it('keeps keys of different tenants and tables apart', () => {
    const e = foldLog([rec({ tenant: 'a' }), rec({ tenant: 'b', op: 'insert', status: 'refused' }), rec({ tenant: 'a', table: 'events', value: 5 })]);
    expect(e.keys.map((k) => [k.tenant, k.table, k.states[0].present])).toEqual([
      ['a', 'accounts', true],
      ['b', 'accounts', false],
      ['a', 'events', true],
    ]);
  });
});

describe('parseLog', () => {
  it('skips a torn last line left by a killed writer', () => {
    const line = JSON.stringify(rec({}));
    expect(parseLog(`${line}\n${line.slice(0, 20)}`)).toHaveLength(1);
  });

  it('rejects a corrupt line in the middle', () => {
    const line = JSON.stringify(rec({}));
    expect(() => parseLog(`${line}\n{oops\n${line}\n`, 'f')).toThrow(/f:2: not JSON/);
  });
});
