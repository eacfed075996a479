// The apply dispatcher: source transactions (Begin..Commit) are applied in the replica session role
// inside a target transaction that commits them, whole, together with the applied LSN (DESIGN.md
// §4.3); consecutive small source transactions may share one target transaction (group commit),
// and a full group's COMMIT may be in flight while the next group is built (commitPipelined).
// Invariants: a transaction whose commit is at or before the stored LSN is skipped (redelivery never
// double-applies); unchanged TOAST values are never written; TRUNCATE is refused, never applied;
// a key's changes apply in source order. Changes are batched per table (multi-row upsert, DELETE
// and in-place UPDATE by key, each one statement): a batch ends where its key repeats, and for a
// table whose keys are not independent (target-tables.ts: another unique index, an exclusion
// constraint, a user trigger firing in the replica session, keys whose text is not their value)
// wherever the kind of change or the table changes, which is source order exactly.
import type { ClientBase, QueryResult } from 'pg';
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { from as copyFrom } from 'pg-copy-streams';
import { ShardctlError } from '../errors';
import { compareLsn } from './lsn';
import { Datum, PgoutputMessage, RawTuple, Relation, UNCHANGED_TOAST } from './pgoutput';
import {
  BoundColumn,
  RelationPlan,
  bindRelation,
  deleteManySql,
  deleteSql,
  existsSql,
  settable,
  updateManySql,
  updateSql,
  upsertManySql,
  upsertSql,
  copyInSql,
} from './statements';
import { loadTargetTable } from './target-tables';
import { subUnitVerdict, type SubUnitStream } from './sub-unit-filter';
import { writeAppliedLsn } from './progress';
import { recordTouched, deltaLockSql, deltaTrackingSql, MAX_TRACKED_KEYS_PER_TRANSACTION } from './delta';

export interface ApplyStats {
  transactionsApplied: number;
  /** Redelivered transactions already covered by the stored LSN. */
  transactionsSkipped: number;
  rowsApplied: number;
  /** UPDATEs of rows missing on the target whose unchanged TOAST values we do not have: left to later changes / validation. */
  rowsSkippedIncomplete: number;
  /** Of rowsApplied, INSERTs written by COPY (see InsertsByCopy) rather than by upsert. */
  rowsInsertedByCopy: number;
  /** Changes of other sub-units than the one moved (a sub-unit move's stream carries its tenant's), not applied. */
  rowsDropped: number;
}

/**
 * Which INSERTs may be written by plain COPY instead of an upsert. An INSERT can meet its key on
 * the target only if the copy read the row (a copy batch's snapshot is later than the slot's
 * consistent point, so the stream redelivers what the copy already took): a transaction whose
 * commit record was written after every copy snapshot of the table was taken (its final LSN past
 * the LSN the copy recorded when it found the table done, CopyCheckpoint.doneAtLsn) inserts keys
 * the copy cannot have seen, and a key it deleted earlier in the stream was deleted on the target
 * first (a batch ends where its key repeats). Should a COPY meet a duplicate key all the same, the
 * target transaction is rolled back, the stream is redelivered from the durable position, and the
 * move's stream never uses COPY again in this worker (refuse()): nothing is lost, only speed.
 */
export interface InsertsByCopy {
  /** `schema.table` as the stream names it -> the copy's doneAtLsn. A table absent here: upserts only. */
  safeAfter: Map<string, string>;
  /** The raw session (COPY cannot go through the bounded query wrapper); the same session as the applier's. */
  client: ClientBase;
  /** Client-side bound on one COPY (the server's statement_timeout bounds it there). */
  timeoutMs: number;
  /** Called when a COPY met a key already on the target. */
  refuse: () => void;
}

/** Fewer rows than this go by one upsert statement: COPY's extra round trip costs more than it saves. */
const MIN_COPY_ROWS = 8;

type ChangeMessage = Extract<PgoutputMessage, { tag: 'insert' | 'update' | 'delete' | 'truncate' }>;

/** Changes of one table and kind, sent as one statement (one round trip); inserts by COPY stream more per statement. */
const MAX_BATCH_ROWS = 500;
const MAX_COPY_BATCH_ROWS = 5000;
const MAX_BATCH_BYTES = 4 * 1024 * 1024;
/** insert: an upsert whose key cannot be on the target (InsertsByCopy), written by COPY. */
type BatchKind = 'upsert' | 'insert' | 'delete' | 'update';
interface Batch {
  kind: BatchKind;
  /** update: the columns set (those present, key excluded); upsert, insert: every writable column; delete: none. */
  set: BoundColumn[];
  /** Per row: `set` values, then (delete, update) the key; insert: the tuple's bytes, when it came from the wire. */
  rows: ((string | null)[] | RawTuple)[];
}
/**
 * A table's pending batches; `keys`: every key they hold (a repeat ends them all), except the
 * insert batch's rows from `unkeyedFrom` on, queued by applyInsertNow with the delta untracked:
 * their keys are decoded only if another change of the table is queued (keyAll), which a catch-up
 * of inserts alone never does.
 */
interface TableBatches {
  plan: RelationPlan;
  batches: Map<string, Batch>;
  keys: Set<string>;
  unkeyedFrom: number | null;
  rows: number;
  bytes: number;
}

// The apply session: replica role skips the fence triggers (deliberately, only here), registered as shardctl's own; an empty
// search_path (as PostgreSQL's own apply worker uses) keeps user functions from being resolved by
// name; and the commit must be durable before the slot is acknowledged, so synchronous_commit=off
// is raised for this transaction. A statement timeout: a statement stuck on the server (a lock,
// a stalled disk) ends there too, not only on our side (the caller bounds each query client-side).
const beginApply = (statementTimeoutMs: number) =>
  [
    'BEGIN',
    ...(statementTimeoutMs > 0 ? [`SET LOCAL statement_timeout = ${Math.trunc(statementTimeoutMs)}`] : []),
    'SET LOCAL session_replication_role = replica',
    "SET LOCAL search_path = ''",
    // Registers the session as shardctl's own: the write-audit guard refuses a replica session named shardctl… otherwise.
    'SELECT shardctl.enter_data_plane()',
    "SET LOCAL datestyle = 'ISO'",
    "SET LOCAL intervalstyle = 'postgres'",
    "SELECT CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'on', true) END",
  ].join('; ');

interface Group {
  lastEnd: string | null;
  txns: number;
  changed: number;
  rows: number;
  incomplete: number;
  copied: number;
  openedAt: number;
}

export class ChangeApplier {
  readonly stats: ApplyStats = {
    transactionsApplied: 0,
    transactionsSkipped: 0,
    rowsApplied: 0,
    rowsSkippedIncomplete: 0,
    rowsInsertedByCopy: 0,
    rowsDropped: 0,
  };
  /** A COPY lost its session (its client-side bound): the session must not be reused. */
  broken = false;
  /** The COPY in flight, if any: resolves to its failure (null: it succeeded). */
  private inflight: Promise<unknown> | null = null;
  private readonly plans = new Map<number, RelationPlan>();
  private readonly statementNames = new Map<string, string>();
  /** `byCopy`: per table, whether this transaction's inserts go by COPY (decided once per table). */
  private tx: { finalLsn: string; skip: boolean; rows: number; incomplete: number; byCopy: Map<RelationPlan, boolean> } | null = null;
  /** Pending batches per table, in the order the tables were first written. */
  private pending = new Map<RelationPlan, TableBatches>();
  /** Batched in-place updates that found no row (counted as applied when queued). */
  private flushMisses = 0;
  /** The open target transaction: the source transactions it holds, not yet durable. */
  /** `changed`: the source transactions among `txns` that changed rows (not only a logical message, e.g. another move's fence marker). */
  private group: Group | null = null;
  /**
   * A group whose COMMIT was sent by commitPipelined() and whose outcome is not read yet: its
   * last COPY, progress row and COMMIT are on the session, ahead of the next group's statements.
   * It counts as applied only once collectCommit() has read all of them succeed, and the next
   * group's COMMIT is never sent before that (should it have failed, the next group's progress
   * row would cover source transactions that were never applied).
   */
  private committing: { done: Promise<void>; group: Group; sent: Promise<void> } | null = null;
  /** Keys written in the open target transaction, per table, for the stream's delta (delta.ts). */
  private touched = new Map<string, Set<string>>();
  private touchedCount = 0;
  /** The delta is tracked (asked at the open target transaction's BEGIN, under the delta lock): off, keys are not collected. */
  private tracking: boolean | 'unknown' = false;
  /** While tracking is unknown (a BEGIN not answered yet): the keys touched, as plan, key, plan, key, …; kept once it is known to be on. */
  private unsure: (RelationPlan | (string | null)[])[] = [];
  private readonly beginSql: string;
  private readonly beginPositionSql: string;

  constructor(
    private readonly client: ClientBase,
    private readonly moveId: string,
    private readonly stream: string,
    /** The stored applied LSN (null: nothing applied yet). */
    public applied: string | null,
    /** Server-side bound on each apply statement (0: the server's own setting). */
    statementTimeoutMs = 0,
    /** Absent: every INSERT is an upsert. */
    private readonly byCopy?: InsertsByCopy,
    /** A split tenant's sub-unit move: only its changes are applied, the other sub-units' dropped (sub-unit-filter.ts). */
    private readonly subUnit?: SubUnitStream,
  ) {
    this.beginPositionSql = beginApply(statementTimeoutMs);
    this.beginSql = `${this.beginPositionSql}; ${deltaLockSql(moveId, stream)}; ${deltaTrackingSql(moveId, stream)}`;
  }

  /** A source transaction is open (between its BEGIN and COMMIT messages). */
  get inTransaction(): boolean {
    return this.tx !== null;
  }

  /** A target transaction is open (a source transaction in hand, or a group awaiting commit). */
  get targetTransactionOpen(): boolean {
    return this.group !== null || this.committing !== null;
  }

  /** A group's COMMIT was sent (commitPipelined) and its outcome not read yet. */
  get commitInFlight(): boolean {
    return this.committing !== null;
  }

  /** Source transactions applied in the open target transaction but not yet committed there. */
  get pendingTransactions(): number {
    return this.group?.txns ?? 0;
  }

  /** Rows applied in the open target transaction but not yet committed there. */
  get pendingRows(): number {
    return this.group?.rows ?? 0;
  }

  /** Rows of the group whose COMMIT is in flight (commitPipelined): not in stats yet. */
  get inFlightRows(): number {
    return this.committing?.group.rows ?? 0;
  }

  /** End LSN of the last source transaction in the open target transaction. */
  get pendingEnd(): string | null {
    return this.group?.lastEnd ?? this.committing?.group.lastEnd ?? null;
  }

  get pendingSinceMs(): number {
    return this.group ? Date.now() - this.group.openedAt : 0;
  }

  /** A relation message: the column list may have changed, so the binding is rebuilt on next use. */
  async relationChanged(rel: Relation): Promise<void> {
    // Rows pending under an earlier definition of this relation are written first. A relation this
    // session meets for the first time has none, and a flush is a round trip to the target.
    if (this.plans.has(rel.relationOid)) await this.flush();
    this.plans.delete(rel.relationOid);
  }

  async begin(finalLsn: string): Promise<void> {
    if (this.tx) throw new ShardctlError('Conflict', `pgoutput protocol error: BEGIN ${finalLsn} inside the open transaction ${this.tx.finalLsn}`);
    // The stored LSN is a commit end (or a keepalive position): a commit that starts before it is already applied.
    const upTo = this.group?.lastEnd ?? this.committing?.group.lastEnd ?? this.applied;
    const skip = upTo !== null && compareLsn(finalLsn, upTo) < 0;
    this.tx = { finalLsn, skip, rows: 0, incomplete: 0, byCopy: new Map() };
    if (!skip && !this.group) {
      this.group = { lastEnd: null, txns: 0, changed: 0, rows: 0, incomplete: 0, copied: 0, openedAt: Date.now() }; // before BEGIN: a failed BEGIN still needs a ROLLBACK
      // Not known to be off (an unexpected answer): keys are collected, and recordTouched's own check decides.
      const trackingOf = (r: QueryResult<{ tracking: boolean }> | QueryResult<{ tracking: boolean }>[]) =>
        (Array.isArray(r) ? r[r.length - 1] : r)?.rows?.[0]?.tracking !== false;
      if (this.committing) {
        // The previous group's COMMIT is still on the session: this BEGIN queues behind it, and the
        // group is built meanwhile. Until its answer says whether the delta is tracked, keys are
        // collected; the first statement sent waits for the answer (settle).
        this.tracking = 'unknown';
        // Chained (not queued in the client: node-postgres is dropping its query queue), sent once the COMMIT is answered.
        const begin = () => this.client.query(this.beginSql) as unknown as Promise<QueryResult<{ tracking: boolean }>>;
        const open = this.committing.sent.then(begin).then((r) => {
          this.tracking = trackingOf(r);
          const unsure = this.unsure;
          this.unsure = [];
          for (let i = 0; i < unsure.length; i += 2) this.touch(unsure[i] as RelationPlan, unsure[i + 1] as (string | null)[]);
        });
        this.inflight = open.then(
          () => null,
          (e) => e ?? new Error('BEGIN failed'),
        );
      } else {
        await this.settle();
        this.tracking = trackingOf((await this.client.query(this.beginSql)) as unknown as QueryResult<{ tracking: boolean }>);
      }
    }
  }

  async apply(msg: ChangeMessage): Promise<void> {
    const tx = this.tx;
    if (!tx) throw new ShardctlError('Conflict', `pgoutput protocol error: ${msg.tag} outside a transaction`);
    if (msg.tag === 'truncate') {
      const names = msg.relations.map((r) => `${r.schema}.${r.name}`).join(', ');
      throw new ShardctlError(
        'PreconditionFailed',
        `TRUNCATE of ${names} on the source (transaction at ${tx.finalLsn}) cannot be moved: a TRUNCATE removes every tenant's rows of the table, not only this unit's, so replaying it on the target would be wrong and skipping it would leave the copies different. Restore the source rows and restart the move.`,
        { tables: names, lsn: tx.finalLsn },
      );
    }
    if (tx.skip) return;
    if (this.subUnit && subUnitVerdict(this.subUnit, msg) === 'drop') {
      this.stats.rowsDropped++;
      return;
    }
    const plan = await this.planFor(msg.relation);
    try {
      if (msg.tag === 'insert') await this.queueInsert(plan, msg);
      else if (msg.tag === 'update') await this.applyUpdate(plan, msg.oldTuple, withKeyFromOld(msg.relation, msg.oldTuple, msg.newTuple));
      else await this.applyDelete(plan, msg.oldTuple);
    } catch (e) {
      throw withContext(e, `applying ${msg.tag} on ${plan.display} (source transaction at ${tx.finalLsn})`); // the text only on failure: this runs per row
    }
  }

  /**
   * apply() for the bulk of a catch-up after the copy, synchronously (no promise per row): an
   * INSERT from the wire, written by COPY, joining the pending insert batch of the only table
   * pending (its plan bound and this transaction's COPY decision taken), with nothing to send
   * first. Queues exactly what apply() would; returns false, doing nothing, for anything else.
   */
  applyInsertNow(msg: ChangeMessage): boolean {
    const tx = this.tx;
    // A sub-unit's stream goes through apply(), which tells its rows from the other sub-units'.
    if (!tx || tx.skip || msg.tag !== 'insert' || this.pending.size !== 1 || this.subUnit) return false;
    const raw = msg.raw;
    if (!raw || raw.hasUnchanged) return false;
    const plan = this.plans.get(msg.relation.relationOid);
    if (!plan || this.insertsByCopy(tx, plan) !== true) return false;
    const t = this.pending.get(plan);
    const size = raw.buf.length;
    if (!t || t.batches.size !== 1 || t.rows >= MAX_COPY_BATCH_ROWS || t.bytes + size > MAX_BATCH_BYTES) return false;
    const b = t.batches.get('insert');
    if (!b) return false;
    if (this.tracking === false) {
      // The key is not decoded (keyAll does, should another change of the table follow). Its
      // batch is the table's only one, so any later change of this key joins a later batch or
      // ends this one; an insert cannot repeat a key with nothing removing it in between.
      if (raw.lacksAny(plan.pkSrc)) return false; // apply() refuses it, with the reason
      t.unkeyedFrom ??= b.rows.length;
    } else {
      const key = raw.datumsAt(plan.pkSrc);
      for (const v of key) if (typeof v !== 'string') return false; // apply() refuses it, with the reason
      const keyText = key.length === 1 ? (key[0] as string) : key.join('\u0000');
      if (t.keys.has(keyText)) return false;
      this.touch(plan, key as string[]);
      t.keys.add(keyText);
    }
    b.rows.push(raw);
    t.rows++;
    t.bytes += size;
    tx.rows++;
    return true;
  }

  /**
   * Ends a source transaction. Its changes stay in the open target transaction, which may carry
   * further source transactions (group commit) until commitPending() makes them durable together
   * with the last commit's end LSN. Returns false when the transaction was skipped as already applied.
   */
  async commit(endLsn: string): Promise<boolean> {
    const tx = this.tx;
    if (!tx) throw new ShardctlError('Conflict', `pgoutput protocol error: COMMIT ${endLsn} without BEGIN`);
    this.tx = null;
    if (tx.skip) {
      this.stats.transactionsSkipped++;
      return false;
    }
    const g = this.group!;
    const upTo = g.lastEnd ?? this.committing?.group.lastEnd ?? this.applied;
    if (upTo !== null && compareLsn(endLsn, upTo) <= 0) {
      throw new ShardctlError('Conflict', `commit ${endLsn} is not after the applied position ${upTo}: the stream went backwards`); // cannot happen given the BEGIN check
    }
    g.lastEnd = endLsn;
    g.txns++;
    if (tx.rows + tx.incomplete > 0) g.changed++;
    g.rows += tx.rows;
    g.incomplete += tx.incomplete;
    return true;
  }

  /** Commits the open target transaction with its progress row. Returns true if anything was committed. */
  async commitPending(): Promise<boolean> {
    if (this.tx) throw new Error('commitPending inside a source transaction');
    const g = this.group;
    if (!g) {
      const collected = this.committing !== null;
      await this.collectCommit();
      return collected;
    }
    if (g.lastEnd === null) {
      await this.collectCommit();
      await this.rollback();
      return false;
    }
    await this.flush();
    await this.settle();
    await this.collectCommit();
    g.rows -= this.flushMisses;
    g.incomplete += this.flushMisses;
    this.flushMisses = 0;
    if (this.tracking) await recordTouched(this.client, this.moveId, this.stream, this.touched, this.touchedCount > MAX_TRACKED_KEYS_PER_TRANSACTION);
    await writeAppliedLsn(this.client, this.moveId, this.stream, g.lastEnd, 'commit');
    await this.client.query('COMMIT');
    this.group = null;
    this.dropTouched();
    this.committed(g);
    return true;
  }

  /**
   * commitPending() without waiting for the target: the group's last COPY, its progress row and
   * COMMIT are sent (in that order, on the one session) and the next group is built, and its
   * statements queued behind them, while the target writes and flushes this one. Exactly-once is
   * kept by order: the session runs them one after another, and the next group's COMMIT is sent
   * only once this one's outcome was read and every part succeeded (collectCommit, here and in
   * commitPending, recordPosition, rollback). Returns true if a group was sent; `applied` moves
   * when the previous one is collected.
   */
  async commitPipelined(): Promise<boolean> {
    if (this.tx) throw new Error('commitPipelined inside a source transaction');
    const g = this.group;
    if (!g || g.lastEnd === null || this.tracking !== false) return this.commitPending(); // a tracked group's keys are recorded at commit: as before
    await this.flush();
    await this.collectCommit(); // before this group's COMMIT can be sent: the previous one's outcome
    const last = this.inflight ?? Promise.resolve(null);
    this.inflight = null;
    g.rows -= this.flushMisses;
    g.incomplete += this.flushMisses;
    this.flushMisses = 0;
    const end = g.lastEnd;
    // One after another on the session: the last COPY, the progress row (not after a failed COPY:
    // the transaction is aborted), then COMMIT, which ends the transaction either way.
    const progress = last.then((failed) => {
      if (failed) throw failed;
      return writeAppliedLsn(this.client, this.moveId, this.stream, end, 'commit');
    });
    const sendCommit = () => this.client.query('COMMIT') as Promise<QueryResult>;
    const commit = progress.then(sendCommit, sendCommit);
    const done = Promise.allSettled([progress, commit]).then(([p, c]) => {
      if (p.status === 'rejected') throw p.reason;
      if (c.status === 'rejected') throw c.reason;
      // An aborted transaction answers COMMIT with ROLLBACK, not an error.
      if (c.value?.command !== 'COMMIT') {
        throw new ShardctlError('Unavailable', `the target did not commit the group ending at ${end} (it answered ${c.value?.command})`, { lsn: end }, true);
      }
    });
    done.catch(() => {}); // read by collectCommit
    const sent = commit.then(
      () => undefined,
      () => undefined,
    );
    this.committing = { done, group: g, sent };
    this.group = null;
    this.dropTouched();
    return true;
  }

  /** Reads the outcome of the group commitPipelined() sent (throws its failure): it is applied from here on. */
  private async collectCommit(): Promise<void> {
    const c = this.committing;
    if (!c) return;
    this.committing = null;
    await c.done;
    this.committed(c.group);
  }

  private committed(g: Group): void {
    this.applied = g.lastEnd;
    this.stats.transactionsApplied += g.changed;
    this.stats.rowsApplied += g.rows;
    this.stats.rowsSkippedIncomplete += g.incomplete;
    this.stats.rowsInsertedByCopy += g.copied;
  }

  private dropTouched(): void {
    this.touched = new Map();
    this.touchedCount = 0;
    this.unsure = [];
  }

  /** Discards the open target transaction: everything since the last durable commit is redelivered later. */
  async rollback(): Promise<void> {
    const open = this.group !== null || this.committing !== null;
    this.tx = null;
    this.group = null;
    this.pending = new Map();
    this.flushMisses = 0;
    this.dropTouched();
    await this.collectCommit().catch(() => {}); // a group sent before: applied if it committed, else redelivered
    await this.settle().catch(() => {}); // its failure is what is being rolled back
    if (open) await this.client.query('ROLLBACK');
  }

  /**
   * Records a stream position the walsender vouched for (a keepalive received with no transaction
   * open: every commit before it was delivered and applied). Keeps lag honest and lets the slot
   * advance while the unit is idle but the source is busy with other tenants.
   */
  async recordPosition(lsn: string): Promise<boolean> {
    if (this.tx || this.group) throw new Error('recordPosition with a transaction open');
    await this.collectCommit();
    if (this.applied !== null && compareLsn(lsn, this.applied) <= 0) return false;
    await this.settle();
    await this.client.query(this.beginPositionSql);
    try {
      await writeAppliedLsn(this.client, this.moveId, this.stream, lsn, 'keepalive');
      await this.client.query('COMMIT');
    } catch (e) {
      await this.client.query('ROLLBACK').catch(() => {});
      throw e;
    }
    this.applied = lsn;
    return true;
  }

  private async planFor(rel: Relation): Promise<RelationPlan> {
    let plan = this.plans.get(rel.relationOid);
    if (!plan) {
      await this.settle();
      plan = bindRelation(rel, await loadTargetTable(this.client, { schema: rel.schema, name: rel.name }));
      this.plans.set(rel.relationOid, plan);
    }
    return plan;
  }

  private async exec(text: string, values: unknown[]): Promise<QueryResult> {
    let name = this.statementNames.get(text);
    if (!name) {
      name = `shardctl_cdc_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`;
      this.statementNames.set(text, name);
    }
    await this.settle();
    return this.client.query({ name, text, values });
  }

  /**
   * Waits for the COPY in flight (copyIn), rethrowing its failure. Every use of the session comes
   * here first: the statements keep their order on the session anyway, and a COPY's failure is
   * reported as itself, not as the aborted transaction the next statement would meet.
   */
  private async settle(): Promise<void> {
    const p = this.inflight;
    if (!p) return;
    this.inflight = null;
    const failed = await p;
    if (failed) throw failed;
  }

  /** Notes a key this transaction writes (or may write), for the stream's delta. */
  private touch(plan: RelationPlan, key: (string | null)[]): void {
    // Past the bound only the overflow is recorded (the cutover then compares the whole unit).
    if (this.tracking === 'unknown') {
      this.unsure.push(plan, key);
      return;
    }
    if (!this.tracking || ++this.touchedCount > MAX_TRACKED_KEYS_PER_TRANSACTION) return;
    let set = this.touched.get(plan.display);
    if (!set) this.touched.set(plan.display, (set = new Set()));
    set.add(JSON.stringify(key));
  }

  /**
   * A new row: by COPY when its key cannot be on the target (InsertsByCopy), else as an upsert.
   * By COPY, a row from the wire stays bytes (only its key is decoded): copyBatch writes it as is.
   */
  private async queueInsert(plan: RelationPlan, msg: Extract<ChangeMessage, { tag: 'insert' }>): Promise<void> {
    if (!this.insertsByCopy(this.tx!, plan)) return this.queueUpsert(plan, msg.newTuple);
    const raw = msg.raw;
    if (raw && !raw.hasUnchanged) {
      const key = values(plan, plan.pk, raw.datumsAt(plan.pkSrc), 'insert key', true);
      return this.enqueue(plan, 'insert', plan.writable, raw, key);
    }
    const row = msg.newTuple;
    const key = values(plan, plan.pk, row, 'insert key');
    await this.enqueue(plan, 'insert', plan.writable, values(plan, plan.writable, row, 'insert'), key);
  }

  /** Whether the transaction's inserts into `plan` go by COPY (see InsertsByCopy), decided once per table. */
  private insertsByCopy(tx: NonNullable<ChangeApplier['tx']>, plan: RelationPlan): boolean {
    let byCopy = tx.byCopy.get(plan);
    if (byCopy === undefined) {
      const after = plan.copyable ? this.byCopy?.safeAfter.get(plan.display) : undefined;
      tx.byCopy.set(plan, (byCopy = after !== undefined && compareLsn(tx.finalLsn, after) > 0));
    }
    return byCopy;
  }

  /** A full row, written by key. */
  private async queueUpsert(plan: RelationPlan, row: Datum[]): Promise<void> {
    const key = values(plan, plan.pk, row, 'upsert key');
    await this.enqueue(plan, 'upsert', plan.writable, values(plan, plan.writable, row, 'upsert'), key);
  }

  /**
   * Adds one change to its table's batch of that kind. First ends what source order requires:
   * the table's batches when they hold the key already (or are full); and, unless both the table
   * and every other pending one have independent keys, every other table's batches and this
   * table's batch of another kind (or of other columns).
   */
  private async enqueue(plan: RelationPlan, kind: BatchKind, set: BoundColumn[], vals: (string | null)[] | RawTuple, key: (string | null)[]): Promise<void> {
    // Key values are never null (values() refuses) and text never holds NUL: joined on NUL, equal keys give equal text.
    const keyText = key.length === 1 ? (key[0] as string) : key.join('\u0000');
    if (this.tracking) this.touch(plan, key);
    const batchId = kind === 'update' ? `update:${set.map((c) => c.name).join(',')}` : kind;
    let size = kind === 'upsert' || kind === 'insert' ? 0 : keyText.length;
    if (vals instanceof RawTuple) size += vals.buf.length;
    else for (const v of vals) size += v?.length ?? 0;
    let independent = plan.independentKeys;
    for (const p of this.pending.keys()) independent &&= p.independentKeys;
    if (!independent) {
      for (const p of [...this.pending.keys()]) if (p !== plan) await this.flushTable(p);
    }
    const maxRows = kind === 'insert' ? MAX_COPY_BATCH_ROWS : MAX_BATCH_ROWS;
    let t = this.pending.get(plan);
    if (t) {
      let otherKind = false;
      for (const id of t.batches.keys()) otherKind ||= id !== batchId;
      const full = t.rows >= maxRows || t.bytes + size > MAX_BATCH_BYTES || (otherKind && !independent);
      if (!full) keyAll(t); // only batches that go on need every key
      if (t.keys.has(keyText) || full) {
        await this.flushTable(plan);
        t = undefined;
      }
    }
    if (!t) this.pending.set(plan, (t = { plan, batches: new Map(), keys: new Set(), unkeyedFrom: null, rows: 0, bytes: 0 }));
    let b = t.batches.get(batchId);
    if (!b) t.batches.set(batchId, (b = { kind, set, rows: [] }));
    b.rows.push(kind === 'upsert' || kind === 'insert' || vals instanceof RawTuple ? vals : [...vals, ...key]);
    t.keys.add(keyText);
    t.rows++;
    t.bytes += size;
    this.tx!.rows++;
  }

  /** Sends every pending batch (tables in the order they were first written). */
  private async flush(): Promise<void> {
    for (const p of [...this.pending.keys()]) await this.flushTable(p);
  }

  private async flushTable(plan: RelationPlan): Promise<void> {
    const t = this.pending.get(plan);
    if (!t) return;
    this.pending.delete(plan);
    // The batches hold distinct keys, so their order does not matter.
    for (const b of t.batches.values()) {
      try {
        if (b.kind === 'insert' && b.rows.length >= MIN_COPY_ROWS) {
          await this.settle();
          this.copyIn(plan, b);
          continue;
        }
        const rows = b.rows.map((r) => (r instanceof RawTuple ? values(plan, b.set, r.datums(), 'insert') : r));
        const columns = (width: number) => Array.from({ length: width }, (_, i) => rows.map((r) => r[i]));
        if (b.kind === 'upsert' || b.kind === 'insert') {
          if (rows.length === 1) await this.exec(upsertSql(plan, b.set), rows[0]);
          else await this.exec(upsertManySql(plan, b.set), columns(b.set.length));
        } else if (b.kind === 'delete') {
          if (rows.length === 1) await this.exec(deleteSql(plan), rows[0]);
          else await this.exec(deleteManySql(plan), columns(plan.pk.length));
        } else {
          const r =
            rows.length === 1
              ? await this.exec(updateSql(plan, b.set), rows[0])
              : await this.exec(updateManySql(plan, b.set), columns(b.set.length + plan.pk.length));
          this.flushMisses += b.rows.length - (r.rowCount ?? 0);
        }
      } catch (e) {
        throw withContext(e, `applying ${b.rows.length} ${b.kind}s on ${plan.display} (source transaction at ${this.tx?.finalLsn ?? 'a committed group'})`);
      }
    }
  }

  /**
   * Starts writing an insert batch by COPY (text format: the same input functions as the upserts'
   * casts) and returns: the next batch is built while the target writes this one; settle() waits
   * for it (at most one in flight).
   */
  private copyIn(plan: RelationPlan, b: Batch): void {
    const group = this.group!;
    const what = `applying ${b.rows.length} inserts on ${plan.display} (source transaction at ${this.tx?.finalLsn ?? 'a committed group'})`;
    const op = this.copyBatch(plan, b).then((n) => {
      group.copied += n;
    });
    this.inflight = op.then(
      () => null,
      (e) => withContext(e, what) ?? new Error(what),
    );
  }

  private async copyBatch(plan: RelationPlan, b: Batch): Promise<number> {
    const by = this.byCopy!;
    const into = by.client.query(copyFrom(copyInSql(plan, b.set)));
    const done = pipeline(Readable.from([copyData(b)]), into);
    const bound = new AbortController();
    const timedOut = sleep(by.timeoutMs, 'timeout' as const, { signal: bound.signal, ref: false }).catch(() => 'done' as const);
    try {
      if ((await Promise.race([done.then(() => 'done' as const), timedOut])) === 'timeout') {
        this.broken = true;
        done.catch(() => {});
        (by.client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
        throw new ShardctlError(
          'Unavailable',
          `the target did not answer a COPY of ${b.rows.length} rows within ${by.timeoutMs} ms: the session is given up`,
          {
            timeoutMs: by.timeoutMs,
          },
          true,
        );
      }
    } catch (e: any) {
      if (e?.code === '23505') {
        by.refuse();
        throw new ShardctlError(
          'Unavailable',
          `an insert of ${plan.display} met a key already on the target (${e.message}); nothing of this target transaction is kept, and this stream is applied by upserts from now on`,
          { table: plan.display },
          true,
        );
      }
      throw e;
    } finally {
      bound.abort();
    }
    if (into.rowCount !== b.rows.length) throw new Error(`COPY into ${plan.display} wrote ${into.rowCount} rows of ${b.rows.length}`);
    return b.rows.length;
  }

  private async applyDelete(plan: RelationPlan, old: Datum[]): Promise<void> {
    await this.enqueue(plan, 'delete', [], [], values(plan, plan.pk, old, 'delete key'));
  }

  private async applyUpdate(plan: RelationPlan, old: Datum[] | null, row: Datum[]): Promise<void> {
    const newKey = values(plan, plan.pk, row, 'update key');
    const oldKey = old ? values(plan, plan.pk, old, 'update old key') : newKey;
    const present = plan.writable.filter((c) => row[c.src] !== UNCHANGED_TOAST);
    const complete = present.length === plan.writable.length;
    const keyChanged = oldKey.some((v, i) => v !== newKey[i]);
    if (complete && !keyChanged) return this.queueUpsert(plan, row);
    const setInPlace = settable(present).filter((c) => !c.isPk);
    if (!keyChanged && setInPlace.length > 0) {
      // Some TOAST values are absent: the row can only be changed in place, never created.
      return this.enqueue(plan, 'update', setInPlace, values(plan, setInPlace, row, 'update'), newKey);
    }
    this.touch(plan, oldKey);
    this.touch(plan, newKey);
    await this.flush(); // everything below reads or writes rows directly: earlier changes must be in
    if (keyChanged) {
      if ((await this.exec(existsSql(plan), newKey)).rowCount! > 0) {
        // The target already holds a later state at the new key (the copy ran after this change).
        await this.exec(deleteSql(plan), oldKey);
      } else {
        const set = settable(present);
        const r = await this.exec(updateSql(plan, set), [...values(plan, set, row, 'update'), ...oldKey]);
        if (r.rowCount! > 0) {
          this.tx!.rows++;
          return;
        }
      }
    }
    await this.updateInPlace(plan, row, newKey, present, complete);
  }

  private async updateInPlace(plan: RelationPlan, row: Datum[], key: (string | null)[], present: BoundColumn[], complete: boolean): Promise<void> {
    if (complete) {
      await this.exec(upsertSql(plan, plan.writable), values(plan, plan.writable, row, 'update'));
      this.tx!.rows++;
      return;
    }
    // Some TOAST values are absent: we can only change the row in place, never create it.
    const set = settable(present).filter((c) => !c.isPk);
    const r = set.length ? await this.exec(updateSql(plan, set), [...values(plan, set, row, 'update'), ...key]) : await this.exec(existsSql(plan), key);
    if (r.rowCount! > 0) this.tx!.rows++;
    else this.tx!.incomplete++;
  }
}

/** Adds to `t.keys` the keys of the insert rows applyInsertNow queued without them. */
function keyAll(t: TableBatches): void {
  if (t.unkeyedFrom === null) return;
  const rows = t.batches.get('insert')!.rows;
  const pkSrc = t.plan.pkSrc;
  for (let i = t.unkeyedFrom; i < rows.length; i++) {
    const key = (rows[i] as RawTuple).datumsAt(pkSrc) as string[];
    t.keys.add(key.length === 1 ? key[0] : key.join('\u0000'));
  }
  t.unkeyedFrom = null;
}

/** The values of `cols` from a tuple (`byPosition`: the tuple holds exactly those, in that order). */
function values(plan: RelationPlan, cols: BoundColumn[], tuple: Datum[], what: string, byPosition = false): (string | null)[] {
  return cols.map((c, i) => {
    const v = tuple[byPosition ? i : c.src];
    if (v === UNCHANGED_TOAST) {
      throw new ShardctlError('PreconditionFailed', `${what} of ${plan.display} lacks the value of ${c.name} (unchanged TOAST)`, {
        table: plan.display,
        column: c.name,
      });
    }
    if (v === null && c.isPk) {
      throw new ShardctlError(
        'PreconditionFailed',
        `${what} of ${plan.display} carries no value for key column ${c.name}: the source's replica identity must be the primary key (or FULL)`,
        { table: plan.display, column: c.name },
      );
    }
    return v ?? null;
  });
}

/**
 * A key column stored out of line and left unchanged arrives as 'u' in the new tuple; PostgreSQL
 * then logs the old key (detoasted) precisely so the row can be found: take the value from there.
 */
function withKeyFromOld(rel: Relation, old: Datum[] | null, row: Datum[]): Datum[] {
  if (!old) return row;
  return row.map((v, i) => (v === UNCHANGED_TOAST && rel.columns[i]?.isKey && typeof old[i] === 'string' ? old[i] : v));
}

/** An insert batch's rows in COPY's text format, `b.set` in order: bytes from the wire are written as they came. */
function copyData(b: Batch): Buffer {
  const src = b.set.map((c) => c.src);
  const lines: (string | null)[] = new Array(b.rows.length);
  let bound = 0;
  for (let i = 0; i < b.rows.length; i++) {
    const r = b.rows[i];
    if (r instanceof RawTuple) {
      lines[i] = null;
      bound += r.copyLineBound;
    } else {
      const line = r.map(copyText).join('\t') + '\n';
      lines[i] = line;
      bound += Buffer.byteLength(line);
    }
  }
  const out = Buffer.allocUnsafe(bound);
  let pos = 0;
  for (let i = 0; i < b.rows.length; i++) {
    const r = b.rows[i];
    if (r instanceof RawTuple) pos = r.writeCopyLine(out, pos, src);
    else pos += out.write(lines[i]!, pos);
  }
  return out.subarray(0, pos);
}

/** A value in COPY's text format: \N for NULL; backslash, newline, carriage return and tab escaped. */
function copyText(v: string | null): string {
  if (v === null) return '\\N';
  return /[\\\n\r\t]/.test(v) ? v.replace(/[\\\n\r\t]/g, (c) => COPY_ESCAPES[c]) : v;
}
const COPY_ESCAPES: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** Prefixes a database error with what was being applied, keeping its SQLSTATE for callers. */
function withContext(e: any, what: string): unknown {
  if (e && typeof e.code === 'string' && !(e instanceof ShardctlError) && !String(e.message).startsWith('applying ')) {
    e.message = `${what}: ${e.message}`;
  }
  return e;
}
