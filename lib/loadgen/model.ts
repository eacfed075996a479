// How a loadgen key's state maps to rows of the demo tables: the writer writes exactly these
// columns and the verifier reads them back. Each write checks it touched exactly one row, so
// an ack also proves the row was where the writer believed it was.
import { createHash, randomBytes } from 'node:crypto';
import { escapeIdentifier, type PoolClient } from 'pg';
import { ShardctlError } from '../errors';
import type { LoadTable } from './log';
import type { RowState } from './expect';

export function sha256Hex(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Random base64 text of exactly `chars` characters: pglz cannot compress it, so it is TOASTed out of line. */
export function incompressibleText(chars: number): string {
  return randomBytes(Math.ceil((chars * 3) / 4) + 3)
    .toString('base64')
    .slice(0, chars);
}

export function accountName(key: string): string {
  return `loadgen account ${key.slice(0, 8)}`;
}

export function documentTitle(key: string, version: number): string {
  return `doc ${key.slice(0, 8)} v${version}`;
}

/**
 * The events payload: `v` is the version, every other field a pure function of the key, so the
 * verifier tells a wrong version ('payload.v') from damaged content ('payload').
 */
export function eventPayload(key: string, version: number): Record<string, unknown> {
  const n = parseInt(key.slice(0, 6), 16) || 0;
  return { v: version, source: 'loadgen', ref: key.slice(0, 8), tags: ['a', `t${n % 7}`], amount: { cents: n % 100_000, currency: 'EUR' } };
}

export interface WriteSpec {
  table: LoadTable;
  op: 'insert' | 'update' | 'delete';
  key: string;
  version: number;
  /** documents: the new body; undefined on update = leave the (possibly TOASTed) body alone. */
  body?: string | null;
}

function expectOneRow(n: number | null, what: string): void {
  if (n !== 1) throw new ShardctlError('Conflict', `loadgen ${what} touched ${n ?? 0} rows, expected 1`, { loadgenRowMissing: true });
}

/** The schema loadgen's tables live in unless told otherwise (the demo schema's). */
export const LOAD_SCHEMA = 'public';

/** `schema.table`, the schema quoted (loadgen's table names are its own constants). */
const tableIn = (schema: string, table: LoadTable) => `${escapeIdentifier(schema)}.${table}`;

export async function applyWrite(tx: PoolClient, tenant: string, w: WriteSpec, schema = LOAD_SCHEMA): Promise<void> {
  const what = `${w.op} ${w.table} ${w.key}`;
  const t = (table: LoadTable) => tableIn(schema, table);
  if (w.op === 'delete') {
    const r = await tx.query(`delete from ${t(w.table)} where tenant_id = $1 and id = $2`, [tenant, w.key]);
    return expectOneRow(r.rowCount, what);
  }
  let r;
  switch (w.table) {
    case 'accounts':
      r =
        w.op === 'insert'
          ? await tx.query(`insert into ${t('accounts')} (tenant_id, id, name, balance) values ($1, $2, $3, $4)`, [
              tenant,
              w.key,
              accountName(w.key),
              w.version,
            ])
          : await tx.query(`update ${t('accounts')} set balance = $3, updated_at = now() where tenant_id = $1 and id = $2`, [tenant, w.key, w.version]);
      break;
    case 'documents':
      if (w.op === 'insert') {
        r = await tx.query(`insert into ${t('documents')} (tenant_id, id, title, body, version) values ($1, $2, $3, $4, $5)`, [
          tenant,
          w.key,
          documentTitle(w.key, w.version),
          w.body ?? null,
          w.version,
        ]);
      } else if (w.body === undefined) {
        r = await tx.query(`update ${t('documents')} set version = $3, title = $4, updated_at = now() where tenant_id = $1 and id = $2`, [
          tenant,
          w.key,
          w.version,
          documentTitle(w.key, w.version),
        ]);
      } else {
        r = await tx.query(`update ${t('documents')} set version = $3, title = $4, body = $5, updated_at = now() where tenant_id = $1 and id = $2`, [
          tenant,
          w.key,
          w.version,
          documentTitle(w.key, w.version),
          w.body,
        ]);
      }
      break;
    case 'events':
      r =
        w.op === 'insert'
          ? await tx.query(`insert into ${t('events')} (tenant_id, id, kind, payload) values ($1, $2, 'loadgen.event', $3::jsonb)`, [
              tenant,
              w.key,
              JSON.stringify(eventPayload(w.key, w.version)),
            ])
          : await tx.query(`update ${t('events')} set payload = $3::jsonb where tenant_id = $1 and id = $2`, [
              tenant,
              w.key,
              JSON.stringify(eventPayload(w.key, w.version)),
            ]);
      break;
  }
  expectOneRow(r.rowCount, what);
}

/** Points the document at an object (blob_put) or at none (blob_delete, `null`). */
export async function setDocumentBlob(tx: PoolClient, tenant: string, key: string, blobKey: string | null, schema = LOAD_SCHEMA): Promise<void> {
  const r = await tx.query(`update ${tableIn(schema, 'documents')} set blob_key = $3, updated_at = now() where tenant_id = $1 and id = $2`, [
    tenant,
    key,
    blobKey,
  ]);
  expectOneRow(r.rowCount, `${blobKey === null ? 'blob_delete' : 'blob_put'} documents ${key}`);
}

/** One row as read back: its version and the columns the verifier compares. */
export interface ObservedRow {
  key: string;
  /** Version: accounts.balance, documents.version, events.payload.v. */
  value: number;
  /** documents only. */
  bodySha?: string | null;
  blobKey?: string | null;
  cols: Record<string, unknown>;
}

/** Reads rows of `keys` with columns reduced to comparable values (body as its sha256). */
export async function readRows(
  db: { query: PoolClient['query'] },
  tenant: string,
  table: LoadTable,
  keys: string[],
  schema = LOAD_SCHEMA,
): Promise<Map<string, ObservedRow>> {
  const out = new Map<string, ObservedRow>();
  if (!keys.length) return out;
  const sql = {
    accounts: `select id::text as key, balance::text as value, name from ${tableIn(schema, 'accounts')} where tenant_id = $1 and id = any($2::uuid[])`,
    documents: `select id::text as key, version as value, title, blob_key,
                       encode(sha256(convert_to(body, 'UTF8')), 'hex') as body_sha
                  from ${tableIn(schema, 'documents')} where tenant_id = $1 and id = any($2::uuid[])`,
    events: `select id::text as key, payload->'v' as value, kind, payload from ${tableIn(schema, 'events')} where tenant_id = $1 and id = any($2::uuid[])`,
  }[table];
  const r = await db.query(sql, [tenant, keys]);
  for (const row of r.rows) {
    const o: ObservedRow = { key: row.key, value: Number(row.value), cols: row };
    if (table === 'documents') {
      o.bodySha = row.body_sha ?? null;
      o.blobKey = row.blob_key ?? null;
    }
    out.set(row.key, o);
  }
  return out;
}

/** Columns of an observed row that differ from what `expected` (a present state) implies. */
export function diffRow(table: LoadTable, expected: RowState, o: ObservedRow): string[] {
  const d: string[] = [];
  const v = expected.value ?? NaN;
  switch (table) {
    case 'accounts':
      if (o.value !== v) d.push('balance');
      if (o.cols.name !== accountName(o.key)) d.push('name');
      break;
    case 'documents':
      if (o.value !== v) d.push('version');
      if (o.cols.title !== documentTitle(o.key, v)) d.push('title');
      if ((o.bodySha ?? null) !== (expected.bodySha ?? null)) d.push('body');
      if ((o.blobKey ?? null) !== (expected.blobKey ?? null)) d.push('blob_key');
      break;
    case 'events': {
      if (o.value !== v) d.push('payload.v');
      const want = eventPayload(o.key, v);
      const got = { ...(o.cols.payload as Record<string, unknown>), v };
      if (o.cols.kind !== 'loadgen.event' || !sameJson(got, want)) d.push('payload');
      break;
    }
  }
  return d;
}

/** The state an observed row represents (for reports). */
export function observedState(table: LoadTable, o: ObservedRow): RowState {
  return table === 'documents' ? { present: true, value: o.value, bodySha: o.bodySha ?? null, blobKey: o.blobKey ?? null } : { present: true, value: o.value };
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(sortKeys(a)) === JSON.stringify(sortKeys(b));
}

function sortKeys(v: any): any {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === 'object')
    return Object.fromEntries(
      Object.keys(v)
        .sort()
        .map((k) => [k, sortKeys(v[k])]),
    );
  return v;
}
