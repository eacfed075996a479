// The apply dispatcher against a recording fake client: which statements a source transaction
// turns into, and when it must touch nothing at all.
import { describe, it, expect } from 'vitest';
import type { ClientBase } from 'pg';
import { ChangeApplier } from '../../lib/cdc/applier';
import { PgoutputDecoder, PgoutputMessage, Relation, UNCHANGED_TOAST } from '../../lib/cdc/pgoutput';

const rel: Relation = {
  relationOid: 1,
  schema: 'public',
  name: 'docs',
  replicaIdentity: 'default',
  columns: [
    { name: 'tenant_id', isKey: true, typeOid: 25, typeMod: -1 },
    { name: 'id', isKey: true, typeOid: 23, typeMod: -1 },
    { name: 'big', isKey: false, typeOid: 25, typeMod: -1 },
  ],
};

function fakeClient(opts: { existingRows?: number; independentKeys?: boolean; small?: boolean } = {}) {
  const log: { text: string; values?: unknown[] }[] = [];
  const client = {
    async query(q: any, values?: unknown[]) {
      const text: string = typeof q === 'string' ? q : q.text;
      const vals = typeof q === 'string' ? values : q.values;
      log.push({ text, values: vals });
      if (text.includes('to_regclass')) {
        // loadTargetTable's one statement: the oid, the columns, the two verdicts.
        const cols = [
          { name: 'tenant_id', type: 'text', generated: false, identity_always: false, pk_pos: 0 },
          { name: 'id', type: 'integer', generated: false, identity_always: false, pk_pos: 1 },
          { name: 'big', type: 'text', generated: false, identity_always: false, pk_pos: null },
          ...(opts.small ? [{ name: 'small', type: 'integer', generated: false, identity_always: false, pk_pos: null }] : []),
        ];
        return { rows: [{ oid: '42', cols, independent: opts.independentKeys ?? false, copyable: true }], rowCount: 1 };
      }
      if (/^(UPDATE|SELECT 1)/.test(text)) return { rows: [], rowCount: opts.existingRows ?? 1 };
      return { rows: [], rowCount: 1 };
    },
  };
  return { client: client as unknown as ClientBase, log };
}

describe('ChangeApplier', () => {
  it('applies a transaction as one replica-role target transaction with its progress', async () => {
    const { client, log } = fakeClient();
    const a = new ChangeApplier(client, 'm1', 'forward', null);
    await a.begin('0/100');
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '1', 'x'] });
    expect(await a.commit('0/180')).toBe(true);
    expect(a.applied).toBeNull(); // not durable until the target transaction commits
    expect(await a.commitPending()).toBe(true);
    const texts = log.map((l) => l.text);
    expect(texts[0]).toMatch(/^BEGIN; SET LOCAL session_replication_role = replica/);
    expect(texts.some((t) => t.startsWith('INSERT INTO "public"."docs"'))).toBe(true);
    const progress = log.find((l) => l.text.includes('shardctl.move_progress'))!;
    expect(progress.values).toEqual(['m1', 'forward', '0/180', 'commit']);
    expect(texts[texts.length - 1]).toBe('COMMIT');
    expect(a.applied).toBe('0/180');
    expect(a.stats).toMatchObject({ transactionsApplied: 1, rowsApplied: 1 });
  });

  it('sends a run of full-row upserts as one statement and flushes it before a delete, keeping source order', async () => {
    const { client, log } = fakeClient();
    const a = new ChangeApplier(client, 'm1', 'forward', null);
    await a.begin('0/100');
    for (let i = 1; i <= 3; i++) await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', String(i), `v${i}`] });
    await a.apply({ tag: 'update', relation: rel, oldKind: null, oldTuple: null, newTuple: ['acme', '4', 'w'] });
    await a.apply({ tag: 'update', relation: rel, oldKind: null, oldTuple: null, newTuple: ['acme', '1', 'again'] }); // same key: new batch
    await a.apply({ tag: 'delete', relation: rel, oldKind: 'K', oldTuple: ['acme', '2', null] });
    await a.commit('0/180');
    await a.commitPending();
    const writes = log.filter((l) => /^(INSERT|UPDATE|DELETE)/.test(l.text));
    expect(writes.map((w) => w.text.split(' ')[0])).toEqual(['INSERT', 'INSERT', 'DELETE']);
    expect(writes[0].text).toContain('FROM unnest($1::text[], $2::text[], $3::text[])');
    expect(writes[0].values).toEqual([
      ['acme', 'acme', 'acme', 'acme'],
      ['1', '2', '3', '4'],
      ['v1', 'v2', 'v3', 'w'],
    ]);
    expect(writes[1].values).toEqual(['acme', '1', 'again']);
    expect(a.stats.rowsApplied).toBe(6);
  });

  it('commits several source transactions in one target transaction with the last end LSN (group commit)', async () => {
    const { client, log } = fakeClient();
    const a = new ChangeApplier(client, 'm1', 'forward', null);
    for (const [b, e, id] of [
      ['0/100', '0/180', '1'],
      ['0/200', '0/280', '2'],
    ]) {
      await a.begin(b);
      await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', id, 'x'] });
      await a.commit(e);
    }
    expect(a.pendingTransactions).toBe(2);
    await a.commitPending();
    const texts = log.map((l) => l.text);
    expect(texts.filter((t) => t.startsWith('BEGIN'))).toHaveLength(1);
    expect(texts.filter((t) => t === 'COMMIT')).toHaveLength(1);
    expect(log.filter((l) => l.text.includes('shardctl.move_progress')).map((l) => l.values![2])).toEqual(['0/280']);
    expect(a.stats).toMatchObject({ transactionsApplied: 2, rowsApplied: 2 });
  });

  it('loses nothing durable on rollback: the pending group is simply redelivered', async () => {
    const { client, log } = fakeClient();
    const a = new ChangeApplier(client, 'm1', 'forward', '0/50');
    await a.begin('0/100');
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '1', 'x'] });
    await a.commit('0/180');
    await a.begin('0/200');
    await a.rollback();
    expect(log[log.length - 1].text).toBe('ROLLBACK');
    expect(a.applied).toBe('0/50');
    expect(a.stats.transactionsApplied).toBe(0);
  });

  it('skips a redelivered transaction that committed before the stored position, touching nothing', async () => {
    const { client, log } = fakeClient();
    const a = new ChangeApplier(client, 'm1', 'forward', '0/180');
    await a.begin('0/100');
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '1', 'x'] });
    expect(await a.commit('0/180')).toBe(false);
    expect(await a.commitPending()).toBe(false);
    expect(log).toEqual([]);
    expect(a.stats).toMatchObject({ transactionsApplied: 0, transactionsSkipped: 1, rowsApplied: 0 });
  });

  it('applies a transaction whose commit starts exactly at the stored position', async () => {
    const { client } = fakeClient();
    const a = new ChangeApplier(client, 'm1', 'forward', '0/180');
    await a.begin('0/180');
    await a.apply({ tag: 'delete', relation: rel, oldKind: 'K', oldTuple: ['acme', '1', null] });
    expect(await a.commit('0/1A8')).toBe(true);
  });

  it('never writes an unchanged TOAST column, and counts an update of a missing row instead of inserting it', async () => {
    const { client, log } = fakeClient({ existingRows: 0 });
    const a = new ChangeApplier(client, 'm1', 'forward', null);
    await a.begin('0/100');
    await a.apply({ tag: 'update', relation: rel, oldKind: null, oldTuple: null, newTuple: ['acme', '1', UNCHANGED_TOAST] });
    await a.commit('0/180');
    await a.commitPending();
    const writes = log.filter((l) => /^(INSERT|UPDATE|DELETE)/.test(l.text));
    expect(writes).toEqual([]);
    expect(a.stats).toMatchObject({ rowsApplied: 0, rowsSkippedIncomplete: 1 });
  });

  it('refuses a TRUNCATE, even inside a skipped transaction', async () => {
    for (const stored of [null, '0/900']) {
      const { client } = fakeClient();
      const a = new ChangeApplier(client, 'm1', 'forward', stored);
      await a.begin('0/100');
      await expect(a.apply({ tag: 'truncate', relations: [rel], cascade: false, restartIdentity: false })).rejects.toMatchObject({
        type: 'PreconditionFailed',
      });
    }
  });

  const wide: Relation = { ...rel, columns: [...rel.columns, { name: 'small', isKey: false, typeOid: 23, typeMod: -1 }] };
  const other: Relation = { ...wide, relationOid: 2, name: 'notes' };
  const narrowOther: Relation = { ...rel, relationOid: 3, name: 'notes' };
  const statementsOf = (log: { text: string }[]) =>
    log.filter((l) => /^(INSERT|UPDATE|DELETE)/.test(l.text)).map((l) => `${l.text.split(' ')[0]} ${/"public"\."\w+"/.exec(l.text)![0]}`);

  it('batches a table with independent keys across tables and kinds: one statement per table and kind, a repeated key ending the batch', async () => {
    const { client, log } = fakeClient({ independentKeys: true, existingRows: 2, small: true });
    const a = new ChangeApplier(client, 'm1', 'forward', null);
    for (const [b, e, i] of [
      ['0/100', '0/180', 1],
      ['0/200', '0/280', 2],
      ['0/300', '0/380', 3],
    ] as const) {
      await a.begin(b);
      await a.apply({ tag: 'insert', relation: wide, newTuple: ['acme', String(i), 'x', '1'] });
      await a.apply({ tag: 'insert', relation: other, newTuple: ['acme', String(i), 'n', '1'] });
      await a.apply({ tag: 'delete', relation: wide, oldKind: 'K', oldTuple: ['acme', String(10 + i), null, null] });
      await a.apply({ tag: 'update', relation: wide, oldKind: null, oldTuple: null, newTuple: ['acme', String(20 + i), UNCHANGED_TOAST, '5'] });
      await a.commit(e);
    }
    await a.begin('0/400');
    await a.apply({ tag: 'delete', relation: wide, oldKind: 'K', oldTuple: ['acme', '1', null, null] }); // 1 is in the pending upsert batch
    await a.commit('0/480');
    await a.commitPending();
    const writes = statementsOf(log);
    expect(writes).toEqual(['INSERT "public"."docs"', 'DELETE "public"."docs"', 'UPDATE "public"."docs"', 'INSERT "public"."notes"', 'DELETE "public"."docs"']);
    const del = log.find((l) => l.text.startsWith('DELETE'))!;
    expect(del.text).toContain('USING unnest($1::text[], $2::text[])');
    expect(del.values).toEqual([
      ['acme', 'acme', 'acme'],
      ['11', '12', '13'],
    ]);
    // Three in-place updates, two rows found: one counted as skipped, as the row-by-row path would.
    expect(a.stats).toMatchObject({ transactionsApplied: 4, rowsApplied: 12, rowsSkippedIncomplete: 1 });
  });

  it('keeps source order exactly for a table whose keys are not independent: each change of table or kind ends the batch', async () => {
    const { client, log } = fakeClient({ independentKeys: false });
    const a = new ChangeApplier(client, 'm1', 'forward', null);
    await a.begin('0/100');
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '1', 'x'] });
    await a.apply({ tag: 'insert', relation: narrowOther, newTuple: ['acme', '1', 'n'] });
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '2', 'x'] });
    await a.apply({ tag: 'delete', relation: rel, oldKind: 'K', oldTuple: ['acme', '3', null] });
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '4', 'x'] });
    await a.commit('0/180');
    await a.commitPending();
    const writes = statementsOf(log);
    expect(writes).toEqual(['INSERT "public"."docs"', 'INSERT "public"."notes"', 'INSERT "public"."docs"', 'DELETE "public"."docs"', 'INSERT "public"."docs"']);
  });

  it('writes inserts from the wire after the copy as one COPY of their bytes, the first by apply() and the rest without a promise', async () => {
    const { client, log, copies } = fakeCopyClient({ independentKeys: true });
    const a = new ChangeApplier(client, 'm1', 'forward', null, 0, { safeAfter: new Map([['public.docs', '0/10']]), client, timeoutMs: 5000, refuse: () => {} });
    await a.begin('0/100');
    let now = 0;
    for (let i = 1; i <= 10; i++) {
      const msg = wireInsert(String(i), i === 5 ? 'tab\there \\ and\nnewline' : i === 7 ? null : `v${i}`);
      if (a.applyInsertNow(msg)) now++;
      else await a.apply(msg);
    }
    await a.commit('0/180');
    await a.commitPending();
    expect(now).toBe(9); // the first binds the plan and takes the COPY decision
    expect(copies).toHaveLength(1);
    expect(copies[0].sql).toBe('COPY "public"."docs" ("tenant_id", "id", "big") FROM STDIN');
    const lines = Array.from({ length: 10 }, (_, k) => `acme\t${k + 1}\t${k === 4 ? 'tab\\there \\\\ and\\nnewline' : k === 6 ? '\\N' : `v${k + 1}`}`);
    expect(copies[0].data).toBe(lines.join('\n') + '\n');
    expect(log.some((l) => l.text.startsWith('INSERT'))).toBe(false);
    expect(a.stats).toMatchObject({ rowsApplied: 10, rowsInsertedByCopy: 10 });
  });

  it('pipelined group commit: the next group is sent behind a COMMIT in flight, and counts as applied only once that COMMIT answered', async () => {
    const { client, log } = answeringClient([]);
    const a = new ChangeApplier(client, 'm1', 'forward', null);
    await a.begin('0/100');
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '1', 'x'] });
    await a.commit('0/180');
    expect(await a.commitPipelined()).toBe(true);
    expect(a.applied).toBeNull(); // sent, not known durable
    expect(a.commitInFlight).toBe(true);
    expect(a.pendingEnd).toBe('0/180');
    await a.begin('0/170'); // before the group in flight: skipped, not applied twice
    expect(await a.commit('0/178')).toBe(false);
    await a.begin('0/200');
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '2', 'y'] });
    await a.commit('0/280');
    expect(await a.commitPending()).toBe(true);
    expect(a.applied).toBe('0/280');
    expect(a.stats).toMatchObject({ transactionsApplied: 2, transactionsSkipped: 1, rowsApplied: 2 });
    const texts = log.map((l) => l.text.split(/[ ;]/)[0] + (l.text.includes('move_progress') ? `:${l.values![2]}` : ''));
    expect(texts.filter((t) => /^(BEGIN|INSERT|insert|COMMIT)/.test(t))).toEqual([
      'BEGIN',
      'INSERT',
      'insert:0/180',
      'COMMIT',
      'BEGIN',
      'INSERT',
      'insert:0/280',
      'COMMIT',
    ]);
  });

  it('pipelined group commit: a group whose COMMIT did not commit keeps the next group from committing (its progress would cover the lost one)', async () => {
    const { client, log } = answeringClient(['ROLLBACK']);
    const a = new ChangeApplier(client, 'm1', 'forward', null);
    await a.begin('0/100');
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '1', 'x'] });
    await a.commit('0/180');
    await a.commitPipelined();
    await a.begin('0/200');
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', '2', 'y'] });
    await a.commit('0/280');
    await expect(a.commitPending()).rejects.toThrow(/did not commit the group ending at 0\/180 \(it answered ROLLBACK\)/);
    expect(log.filter((l) => l.text === 'COMMIT')).toHaveLength(1); // the second group's COMMIT never sent
    expect(log.some((l) => l.text.includes('move_progress') && l.values![2] === '0/280')).toBe(false);
    await a.rollback();
    expect(log[log.length - 1].text).toBe('ROLLBACK');
    expect(a.applied).toBeNull();
    expect(a.stats.transactionsApplied).toBe(0);
  });

  it('leaves to apply() an insert whose key its batch holds, or that joins other pending changes, so source order stands', async () => {
    const { client, log, copies } = fakeCopyClient({ independentKeys: true });
    const a = new ChangeApplier(client, 'm1', 'forward', null, 0, { safeAfter: new Map([['public.docs', '0/10']]), client, timeoutMs: 5000, refuse: () => {} });
    await a.begin('0/100');
    await a.apply(wireInsert('1', 'x'));
    for (let i = 2; i <= 9; i++) expect(a.applyInsertNow(wireInsert(String(i), 'x'))).toBe(true);
    await a.apply({ tag: 'delete', relation: docs, oldKind: 'K', oldTuple: ['acme', '3', null] });
    expect(a.applyInsertNow(wireInsert('3', 'again'))).toBe(false); // a delete is pending beside the inserts
    await a.apply(wireInsert('3', 'again'));
    await a.commit('0/180');
    await a.commitPending();
    // Key 3 repeats: the first batch (inserts 1-9, delete of 3) goes before the re-insert.
    const writes = [...log.map((l, i) => ({ i, what: l.text.split(' ')[0] })).filter((w) => /^(INSERT|DELETE|COPY)$/.test(w.what))];
    expect(writes.map((w) => w.what)).toEqual(['COPY', 'DELETE', 'INSERT']);
    expect(copies[0].data.split('\n').filter(Boolean)).toHaveLength(9);
    expect(log.find((l) => l.text.startsWith('INSERT'))!.values).toEqual(['acme', '3', 'again']);
  });

  it('with the delta untracked, queues inserts without decoding their keys, and a later change of one of those keys still applies after it', async () => {
    const { client, log, copies } = fakeCopyClient({ independentKeys: true, untracked: true });
    const a = new ChangeApplier(client, 'm1', 'forward', null, 0, { safeAfter: new Map([['public.docs', '0/10']]), client, timeoutMs: 5000, refuse: () => {} });
    await a.begin('0/100');
    await a.apply(wireInsert('1', 'x'));
    for (let i = 2; i <= 9; i++) expect(a.applyInsertNow(wireInsert(String(i), `v${i}`))).toBe(true);
    await a.commit('0/180');
    await a.begin('0/200'); // the next source transaction's inserts join the same batch, the first one too
    expect(a.applyInsertNow(wireInsert('10', 'v10'))).toBe(true);
    await a.apply({ tag: 'update', relation: docs, oldKind: null, oldTuple: null, newTuple: ['acme', '5', 'changed'] });
    await a.apply({ tag: 'delete', relation: docs, oldKind: 'K', oldTuple: ['acme', '3', null] });
    expect(a.applyInsertNow(wireInsert('3', 'again'))).toBe(false); // other changes are pending beside the inserts
    await a.apply(wireInsert('3', 'again'));
    await a.commit('0/280');
    await a.commitPending();
    const writes = log.filter((l) => /^(INSERT|DELETE|COPY)/.test(l.text));
    expect(writes.map((w) => w.text.split(' ')[0])).toEqual(['COPY', 'INSERT', 'DELETE', 'INSERT']);
    expect(copies[0].data).toBe(['acme\t1\tx', ...Array.from({ length: 9 }, (_, k) => `acme\t${k + 2}\tv${k + 2}`)].join('\n') + '\n');
    expect(writes[1].values).toEqual(['acme', '5', 'changed']);
    expect(writes[2].values).toEqual(['acme', '3']);
    expect(writes[3].values).toEqual(['acme', '3', 'again']);
    expect(a.stats).toMatchObject({ transactionsApplied: 2, rowsApplied: 13, rowsInsertedByCopy: 10 });
  });

  it('with the delta untracked, leaves to apply() an insert lacking a key value, which refuses it with the reason', async () => {
    const { client, copies } = fakeCopyClient({ independentKeys: true, untracked: true });
    const a = new ChangeApplier(client, 'm1', 'forward', null, 0, { safeAfter: new Map([['public.docs', '0/10']]), client, timeoutMs: 5000, refuse: () => {} });
    await a.begin('0/100');
    await a.apply(wireInsert('1', 'x'));
    expect(a.applyInsertNow(wireInsert('2', 'y'))).toBe(true);
    const keyless = wireInsert(null, 'z');
    expect(a.applyInsertNow(keyless)).toBe(false);
    await expect(a.apply(keyless)).rejects.toThrow(/carries no value for key column id/);
    expect(copies).toHaveLength(0);
  });
});

const docs: Relation = { ...rel, columns: rel.columns.map((c) => ({ ...c })) };
const decoder = new PgoutputDecoder();
{
  const cols = docs.columns;
  const parts: Buffer[] = [Buffer.from('R'), u32(docs.relationOid), Buffer.from('public\0docs\0d'), u16(cols.length)];
  for (const c of cols) parts.push(Buffer.from([c.isKey ? 1 : 0]), Buffer.from(`${c.name}\0`), u32(c.typeOid), u32(c.typeMod >>> 0));
  decoder.decode(Buffer.concat(parts));
}
function u32(v: number) {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(v >>> 0);
  return b;
}
function u16(v: number) {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(v);
  return b;
}
/** An INSERT of (acme, id, big) as the decoder gives it from the wire (its bytes kept). */
function wireInsert(id: string | null, big: string | null): Extract<PgoutputMessage, { tag: 'insert' }> {
  const text = (v: string | null) => (v === null ? Buffer.from('n') : Buffer.concat([Buffer.from('t'), u32(Buffer.byteLength(v)), Buffer.from(v)]));
  const msg = decoder.decode(Buffer.concat([Buffer.from('I'), u32(docs.relationOid), Buffer.from('N'), u16(3), text('acme'), text(id), text(big)]));
  if (msg.tag !== 'insert' || !msg.raw) throw new Error('expected an insert with its bytes');
  return msg;
}

/** fakeClient, plus COPY FROM STDIN as pg-copy-streams drives it (the statement and the data it sent). */
function fakeCopyClient(opts: { independentKeys?: boolean; untracked?: boolean } = {}) {
  const base = fakeClient(opts);
  const copies: { sql: string; data: string }[] = [];
  const query = (base.client as any).query.bind(base.client);
  (base.client as any).query = (q: any, values?: unknown[]) => {
    if (!q || typeof q.handleCopyInResponse !== 'function') {
      if (opts.untracked && typeof q === 'string' && q.startsWith('BEGIN'))
        return query(q, values).then((r: object) => ({ ...r, rows: [{ tracking: false }] }));
      return query(q, values);
    }
    base.log.push({ text: q.text });
    const chunks: Buffer[] = [];
    const copy = { sql: q.text as string, data: '' };
    copies.push(copy);
    const connection = {
      stream: {
        write(b: Buffer) {
          if (b.length === 5 && b[0] === 0x63) {
            // CopyDone: the server answers with the row count, then ReadyForQuery.
            const data = Buffer.concat(chunks.filter((c) => !(c.length === 5 && c[0] === 0x64))).toString('utf8');
            copy.data = data;
            setImmediate(() => {
              q.handleCommandComplete({ text: `COPY ${data.split('\n').length - 1}` });
              q.handleReadyForQuery();
            });
          } else chunks.push(Buffer.from(b));
          return true;
        },
        once() {},
      },
    };
    q.connection = connection;
    setImmediate(() => q.handleCopyInResponse(connection));
    return q;
  };
  return { ...base, copies };
}

/** fakeClient with the delta untracked, whose COMMITs answer, in turn, the commands given (then COMMIT), as a server does: an aborted transaction's COMMIT answers ROLLBACK. */
function answeringClient(commits: string[]) {
  const base = fakeClient();
  const query = (base.client as any).query.bind(base.client);
  (base.client as any).query = async (q: any, values?: unknown[]) => {
    const r = await query(q, values);
    if (typeof q === 'string' && q.startsWith('BEGIN')) return { ...r, rows: [{ tracking: false }] }; // the delta is not tracked
    return q === 'COMMIT' ? { ...r, command: commits.shift() ?? 'COMMIT' } : r;
  };
  return base;
}
