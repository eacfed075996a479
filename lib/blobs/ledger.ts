// The blob ledger (table shardctl.blob_ledger on each shard): per unit and key, the object shardctl
// last left or saw in that shard's bucket — its ETag and size as listed, the sha256 of its bytes
// when known, and for a copy the source ETag and size it was copied from. A blob sync uses it to
// skip objects unchanged on both sides since the last sync without reading either copy (ETags of
// multipart objects are not content hashes, so "unchanged" means: the same ETag and size as
// recorded), and to tell shardctl's own objects from ones written behind its back: a sync never
// overwrites or deletes those, and retire and rollback clean-up refuse while any exist.
//
// A row with a null etag is a copy in flight (recorded before the copy starts): a sync killed
// mid-copy leaves it, and the next sync treats the object as its own.
import type { Pool, PoolClient } from 'pg';
import { inTransaction } from '../pg';
import type { BlobEntry } from './list';

export interface LedgerEntry {
  key: string;
  /** Null: a copy into this bucket, or a delete from it, was started and not recorded as finished. */
  etag: string | null;
  size: number | null;
  sha256: string | null;
  /** Set for a copy: the source object (ETag, size) it was copied from. */
  srcEtag: string | null;
  srcSize: number | null;
}

export type Ledger = Map<string, LedgerEntry>;

const DDL = `
create schema if not exists shardctl;
create table if not exists shardctl.blob_ledger (
  unit text not null,
  key text not null,
  etag text,
  size bigint,
  sha256 text,
  src_etag text,
  src_size bigint,
  updated_at timestamptz not null default now(),
  primary key (unit, key)
);`;

const ensured = new WeakSet<Pool>();

async function ensureLedgerTable(pool: Pool): Promise<void> {
  if (ensured.has(pool)) return;
  await inTransaction(pool, async (c) => {
    await c.query(`select pg_advisory_xact_lock(hashtext('shardctl.blob_ledger ddl'))`);
    await c.query(DDL);
  });
  ensured.add(pool);
}

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));

/** The unit's ledger without creating the table (read-only sessions: doctor); empty when there is none. */
export async function readLedger(pool: Pool, unit: string): Promise<Ledger> {
  const t = await pool.query(`select to_regclass('shardctl.blob_ledger') is not null as ok`);
  if (!t.rows[0].ok) return new Map();
  const r = await pool.query('select key, etag, size, sha256, src_etag, src_size from shardctl.blob_ledger where unit = $1', [unit]);
  return rowsToLedger(r.rows);
}

/** The units the ledger has rows for (read only: no table, no units). */
export async function ledgerUnits(pool: Pool): Promise<string[]> {
  const t = await pool.query(`select to_regclass('shardctl.blob_ledger') is not null as ok`);
  if (!t.rows[0].ok) return [];
  return (await pool.query('select distinct unit from shardctl.blob_ledger order by 1')).rows.map((r) => r.unit as string);
}

function rowsToLedger(rows: any[]): Ledger {
  return new Map(
    rows.map((row) => [row.key, { key: row.key, etag: row.etag, size: num(row.size), sha256: row.sha256, srcEtag: row.src_etag, srcSize: num(row.src_size) }]),
  );
}

export async function loadLedger(pool: Pool, unit: string): Promise<Ledger> {
  await ensureLedgerTable(pool);
  const r = await pool.query('select key, etag, size, sha256, src_etag, src_size from shardctl.blob_ledger where unit = $1', [unit]);
  return rowsToLedger(r.rows);
}

/** The unit's rows for these keys only (the cutover's bounded delta must not read a whole ledger). */
export async function ledgerEntries(pool: Pool, unit: string, keys: readonly string[]): Promise<Ledger> {
  if (keys.length === 0) return new Map();
  await ensureLedgerTable(pool);
  const r = await pool.query('select key, etag, size, sha256, src_etag, src_size from shardctl.blob_ledger where unit = $1 and key = any($2::text[])', [
    unit,
    keys,
  ]);
  return rowsToLedger(r.rows);
}

const CHUNK = 5000;

async function upsert(pool: Pool | PoolClient, unit: string, entries: readonly LedgerEntry[]): Promise<void> {
  for (let i = 0; i < entries.length; i += CHUNK) {
    const c = entries.slice(i, i + CHUNK);
    await pool.query(
      `insert into shardctl.blob_ledger (unit, key, etag, size, sha256, src_etag, src_size)
       select $1, * from unnest($2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[])
       on conflict (unit, key) do update set etag = excluded.etag, size = excluded.size, sha256 = excluded.sha256,
         src_etag = excluded.src_etag, src_size = excluded.src_size, updated_at = now()`,
      [
        unit,
        c.map((e) => e.key),
        c.map((e) => e.etag),
        c.map((e) => (e.size === null ? null : String(e.size))),
        c.map((e) => e.sha256),
        c.map((e) => e.srcEtag),
        c.map((e) => (e.srcSize === null ? null : String(e.srcSize))),
      ],
    );
  }
}

/** Records (or replaces) these keys' rows. */
export async function recordLedger(pool: Pool, unit: string, entries: readonly LedgerEntry[]): Promise<void> {
  if (entries.length === 0) return;
  await ensureLedgerTable(pool);
  await upsert(pool, unit, entries);
}

/** Forgets these keys (deleted by shardctl), or every key of the unit. */
export async function forgetLedger(pool: Pool, unit: string, keys?: readonly string[]): Promise<void> {
  if (keys?.length === 0) return;
  await ensureLedgerTable(pool);
  if (keys) await pool.query('delete from shardctl.blob_ledger where unit = $1 and key = any($2::text[])', [unit, keys]);
  else await pool.query('delete from shardctl.blob_ledger where unit = $1', [unit]);
}

/** Replaces the unit's rows by exactly these (a listing of the bucket as the sync's source saw it). */
export async function replaceLedger(pool: Pool, unit: string, entries: readonly LedgerEntry[]): Promise<void> {
  await ensureLedgerTable(pool);
  await inTransaction(pool, async (c) => {
    await c.query(`select pg_advisory_xact_lock(hashtext('blob_ledger:' || $1))`, [unit]);
    await c.query('delete from shardctl.blob_ledger where unit = $1 and not (key = any($2::text[]))', [unit, entries.map((e) => e.key)]);
    await upsert(c, unit, entries);
  });
}

export type OutOfBandChange = 'written' | 'changed' | 'deleted';

export interface OutOfBandObject {
  key: string;
  change: OutOfBandChange;
}

/**
 * How an object listed in a tracked bucket (its ledger has rows) differs from what shardctl left
 * there: undefined when it is shardctl's own (or a copy in flight), else what happened behind its back.
 */
export function outOfBandChange(listed: Pick<BlobEntry, 'etag' | 'size'> | undefined, row: LedgerEntry | undefined): OutOfBandChange | undefined {
  if (row && row.etag === null) return undefined; // a copy of ours in flight
  if (listed && !row) return 'written';
  if (!listed && row) return 'deleted';
  if (listed && row && (listed.etag !== row.etag || listed.size !== row.size)) return 'changed';
  return undefined;
}

/** Every difference between a tracked bucket's listing of the unit and its ledger, by key. */
export function outOfBandObjects(listing: readonly BlobEntry[], ledger: Ledger): OutOfBandObject[] {
  const out: OutOfBandObject[] = [];
  const listed = new Map(listing.map((e) => [e.key, e]));
  for (const e of listing) {
    const change = outOfBandChange(e, ledger.get(e.key));
    if (change) out.push({ key: e.key, change });
  }
  for (const [key, row] of ledger) if (!listed.has(key) && outOfBandChange(undefined, row)) out.push({ key, change: 'deleted' });
  return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/**
 * Objects of a bucket that none of the ledger reads accounts for: listed but written, or changed
 * since shardctl left them, and gone although every read records them as shardctl left them (a
 * sync marks a key pending before it deletes it and forgets it after, so a sync deleting between
 * the reads never looks like a delete behind its back). Pass the ledger read before the listing and
 * the one read after: a sync that records an object between the two is shardctl's own. `keep`
 * says which keys are compared at all (deletes only; e.g. not blob-index version objects).
 */
export function unaccountedObjects(listing: readonly BlobEntry[], reads: readonly Ledger[], keep: (key: string) => boolean = () => true): OutOfBandObject[] {
  const out: OutOfBandObject[] = [];
  for (const e of listing) {
    const changes = reads.map((l) => outOfBandChange(e, l.get(e.key)));
    if (changes.length && changes.every((c) => c === 'written' || c === 'changed')) out.push({ key: e.key, change: changes[changes.length - 1]! });
  }
  const listed = new Set(listing.map((e) => e.key));
  const [first, ...rest] = reads;
  for (const [key, row] of first ?? new Map<string, LedgerEntry>()) {
    if (listed.has(key) || !keep(key) || outOfBandChange(undefined, row) !== 'deleted') continue;
    if (rest.every((l) => l.get(key)?.etag === row.etag)) out.push({ key, change: 'deleted' });
  }
  return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/**
 * Whether the ledgers prove the destination object `d` holds the source object `e`'s bytes without
 * reading either: `d` is what a sync left there, copied from exactly `e` (or `e` is what a sync
 * copied from exactly `d`, the other way). Returns the sha256 when known (null: equal, hash
 * unknown), or false when the ledgers cannot tell.
 */
export function ledgerSaysEqual(
  e: Pick<BlobEntry, 'etag' | 'size'>,
  d: Pick<BlobEntry, 'etag' | 'size'> | undefined,
  dstRow: LedgerEntry | undefined,
  srcRow: LedgerEntry | undefined,
): string | null | false {
  if (!d || !dstRow || dstRow.etag === null || dstRow.etag !== d.etag || dstRow.size !== d.size) return false;
  if (dstRow.srcEtag === e.etag && dstRow.srcSize === e.size) return dstRow.sha256;
  if (srcRow && srcRow.etag === e.etag && srcRow.size === e.size && srcRow.srcEtag === d.etag && srcRow.srcSize === d.size)
    return srcRow.sha256 ?? dstRow.sha256;
  return false;
}
