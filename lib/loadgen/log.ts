// The loadgen outcome log: one JSON object per line, appended synchronously so a record is in
// the file before the writer moves on. Per key, file order is commit order (one writer owns a
// key at a time and logs an outcome only after it is known); `seq` is per run and informational.
import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import { invalidInput } from '../errors';

export const LOAD_TABLES = ['accounts', 'documents', 'events'] as const;
export type LoadTable = (typeof LOAD_TABLES)[number];
export type LogOp = 'insert' | 'update' | 'delete' | 'blob_put' | 'blob_delete';
/** 'pending' is an intent written before the op when intents are on; its outcome follows. */
export type LogStatus = 'ack' | 'refused' | 'unknown' | 'pending';

/** How seed and loadgen write objects: 'direct' (the key the row names) or 'index' (through shardctl.blob_index). */
export type BlobWrites = 'direct' | 'index';

/** `v` as a BlobWrites (undefined: 'direct'), or a clear refusal naming `what` (the option or flag). */
export function blobWritesOf(v: unknown, what = 'blobWrites'): BlobWrites {
  if (v === undefined || v === 'direct' || v === 'index') return (v ?? 'direct') as BlobWrites;
  throw invalidInput(`${what} must be direct or index, got ${JSON.stringify(String(v).slice(0, 40))}`);
}

export interface LogRecord {
  seq: number;
  ts: string;
  tenant: string;
  table: LoadTable;
  /** The row's id (uuid); for blob_put, the document's id. */
  key: string;
  op: LogOp;
  /** Row version after the op (insert/update), sha256 of the object (blob_put), null (delete, blob_delete). */
  value: number | string | null;
  status: LogStatus;
  error?: string;
  errorType?: string;
  /** documents: sha256 (hex) of body after the op, null when body is null. */
  bodySha?: string | null;
  /** blob_put: the object key, `tenants/<id>/docs/<uuid>`, also written to documents.blob_key;
   *  blob_delete: the key the row named (cleared in the row, then deleted from the bucket). */
  blobKey?: string;
  /** blob_put over a document that had an object: the object it replaces (which stays, immutable). */
  replaces?: string;
  /** blob_put through the index over a document that had a name: a new version of that same name (blobKey). */
  overwrites?: true;
  /** blob_delete, ack: whether the object was deleted from the bucket after the row committed. */
  objectDeleted?: boolean | 'unknown';
  /** blob_put / blob_delete through the blob index (loadgen `blobWrites: 'index'`): the object is the
   *  index's current version of the name under blobKey, written (or unlinked) in the row's own transaction. */
  indexed?: true;
  run?: string;
  slot?: number;
  latencyMs?: number;
  /** The shard the transaction ran on, when known. */
  shard?: string;
  /** The unit the transaction was opened for, when the router says (a split tenant's sub-unit `T:k`). */
  unit?: string;
}

export class LogWriter {
  readonly run = randomBytes(4).toString('hex');
  private seq = 0;
  private fd: number | undefined;

  constructor(readonly file: string) {
    this.fd = fs.openSync(file, 'a');
  }

  append(rec: Omit<LogRecord, 'seq' | 'ts' | 'run'>): LogRecord {
    if (this.fd === undefined) throw new Error(`loadgen log ${this.file} is closed`);
    const full: LogRecord = { seq: ++this.seq, ts: new Date().toISOString(), run: this.run, ...rec };
    fs.writeSync(this.fd, JSON.stringify(full) + '\n');
    return full;
  }

  close(): void {
    if (this.fd !== undefined) fs.closeSync(this.fd);
    this.fd = undefined;
  }
}

/** Parses a log; a torn last line (writer killed mid-write) is skipped, any other bad line throws. */
export function parseLog(text: string, source = 'log'): LogRecord[] {
  const lines = text.split('\n');
  const out: LogRecord[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    let rec: any;
    try {
      rec = JSON.parse(line);
    } catch {
      if (i >= lines.length - 2 && !text.endsWith('\n')) break;
      throw new Error(`${source}:${i + 1}: not JSON`);
    }
    if (typeof rec?.tenant !== 'string' || typeof rec?.key !== 'string' || typeof rec?.op !== 'string' || typeof rec?.status !== 'string') {
      throw new Error(`${source}:${i + 1}: not a loadgen record`);
    }
    if (!(LOAD_TABLES as readonly string[]).includes(rec.table)) throw new Error(`${source}:${i + 1}: unknown table ${rec.table}`);
    out.push(rec as LogRecord);
  }
  return out;
}

export function readLog(file: string): LogRecord[] {
  return parseLog(fs.readFileSync(file, 'utf8'), file);
}
