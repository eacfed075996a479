// Fleet reads: one read-only statement on many shards, at most `concurrency` at a time, each in
// a READ ONLY transaction whose statement_timeout ends inside the overall deadline. A shard that
// times out, cannot be reached or fails is named with its reason; the router never hands out
// an answer missing a shard as if it were whole. Ordered top-k pushes ORDER BY and LIMIT down
// to every shard and merges the sorted runs (topk.ts), so no shard sends more than k rows.
import { secretStrings } from '../secrets';
import type { FieldDef, Pool, PoolClient, QueryConfig } from 'pg';
import { MissingReason, MissingShard, SQLSTATE, ShardctlError, invalidInput } from '../errors';
import { isConnectionError } from '../directory/db';
import type { Grant } from './grant';
import { OrderKey, OrderSpec, TypedOrderKey, UnsortedRunError, compareKindOf, mergeSortedRuns, orderBySql, parseOrderBy, rowComparator } from './topk';

export interface ScatterOptions {
  /** Every shard (or every shard named in `shards`) needs `{ tenants: '*' }`; `units` needs each unit covered. */
  grant: Grant;
  /** The whole read, every shard included; default config.limits.routerDeadlineMs. */
  deadlineMs?: number;
  /** Shards asked at the same time (default 4). */
  concurrency?: number;
  /** Return what answered, with `complete: false`, instead of throwing IncompleteResult. */
  allowPartial?: boolean;
  /** Result columns to sort by: `"score desc, id"` or keys; each shard sorts, the router merges. */
  orderBy?: OrderSpec;
  /** At most this many rows overall; pushed down to every shard. */
  limit?: number;
  /** Only these shards (default: every shard of the directory's inventory). */
  shards?: readonly string[];
  /** Only the shards owning these units; ownership is checked on each shard in the read itself. */
  units?: readonly string[];
}

export interface ShardTiming {
  shard: string;
  status: 'ok' | MissingReason;
  rows: number;
  /** From the start of the read until this shard's turn came (concurrency). */
  queuedMs: number;
  /** From its turn until its answer, its failure or the deadline. */
  elapsedMs: number;
}

export interface ScatterRow<R> {
  shard: string;
  row: R;
}

export interface ScatterResult<R = Record<string, unknown>> {
  /** True only when every shard asked answered. */
  complete: boolean;
  rows: ScatterRow<R>[];
  /** Column names of the result, in order. */
  fields: string[];
  /** The shards that did not answer and why (empty when complete). */
  missing: MissingShard[];
  shards: ShardTiming[];
  elapsedMs: number;
}

/** A shard to ask, and the units whose ownership its read must prove (units mode). */
export interface ShardTarget {
  shard: string;
  units?: { unit: string; epoch: number }[];
}

export interface ScatterPlan {
  sql: string;
  params: unknown[];
  deadlineMs: number;
  concurrency: number;
  allowPartial: boolean;
  orderBy?: OrderKey[];
  limit?: number;
  shards?: string[];
  units?: string[];
}

export interface ScatterDeps {
  /** The shard's read-only pool, or undefined when the configuration does not list it. */
  pool(shard: string): Pool | undefined;
  /** Removes DSNs and passwords from a message. */
  redact(text: string): string;
}

const MAX_DEADLINE_MS = 86_400_000;
const MAX_CONCURRENCY = 1000;
const MAX_LIMIT = 1_000_000;
const ALIAS = 'shardctl_q';

/** Validates a scatter call before any I/O; bad input throws InvalidInput with one line. */
export function planScatter(sql: unknown, params: unknown, opts: ScatterOptions, defaultDeadlineMs: number): ScatterPlan {
  if (typeof sql !== 'string') throw invalidInput('the statement must be a string');
  // Trailing semicolons would break the subquery the pushdown wraps around the statement.
  const text = sql.replace(/[\s;]+$/, '').trim();
  if (!text) throw invalidInput('the statement is empty');
  if (!Array.isArray(params)) throw invalidInput('params must be an array');
  const deadlineMs = opts.deadlineMs ?? defaultDeadlineMs;
  if (typeof deadlineMs !== 'number' || !(deadlineMs > 0) || deadlineMs > MAX_DEADLINE_MS) {
    throw invalidInput(`deadlineMs must be a positive number of milliseconds up to ${MAX_DEADLINE_MS}, got ${String(deadlineMs)}`);
  }
  const concurrency = opts.concurrency ?? 4;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_CONCURRENCY) {
    throw invalidInput(`concurrency must be an integer from 1 to ${MAX_CONCURRENCY}, got ${String(concurrency)}`);
  }
  if (opts.limit !== undefined && (!Number.isInteger(opts.limit) || opts.limit < 1 || opts.limit > MAX_LIMIT)) {
    throw invalidInput(`limit must be an integer from 1 to ${MAX_LIMIT}, got ${String(opts.limit)}`);
  }
  if (opts.shards !== undefined && opts.units !== undefined) throw invalidInput('give shards or units, not both');
  for (const [name, list] of [
    ['shards', opts.shards],
    ['units', opts.units],
  ] as const) {
    if (list !== undefined && (!Array.isArray(list) || list.length === 0)) throw invalidInput(`${name}, when given, must be a non-empty array`);
  }
  return {
    sql: text,
    params: [...params],
    deadlineMs,
    concurrency,
    allowPartial: !!opts.allowPartial,
    orderBy: opts.orderBy === undefined ? undefined : parseOrderBy(opts.orderBy),
    limit: opts.limit,
    shards: opts.shards && [...new Set(opts.shards)],
    units: opts.units && [...new Set(opts.units)],
  };
}

type Answer =
  | { ok: true; rows: Record<string, unknown>[]; fields: FieldDef[]; keys?: TypedOrderKey[] }
  | { ok: false; reason: MissingReason; message: string; code?: string }
  | { ok: false; fatal: ShardctlError };

/** One shard's connection for one read; abandoning it (the deadline passed) destroys it. */
class Lease {
  private client: PoolClient | undefined;
  private released = false;
  abandoned = false;

  async connect(pool: Pool): Promise<PoolClient> {
    const c = await pool.connect();
    this.client = c;
    if (this.abandoned) {
      this.release(new Error('abandoned'));
      throw new Error('abandoned at the deadline');
    }
    return c;
  }

  /** Returns the connection to its pool, or destroys it when `broken`. */
  release(broken?: Error): void {
    if (!this.client || this.released) return;
    this.released = true;
    this.client.release(broken);
  }

  abandon(): void {
    this.abandoned = true;
    this.release(new Error('shardctl scatter: abandoned at the deadline'));
  }
}

/** The server-side limit for the next statement: a little before the deadline, so the shard's own timeout answers first. */
function statementTimeoutMs(deadline: number): number {
  const remaining = deadline - Date.now();
  return Math.max(1, Math.floor(remaining - Math.min(200, remaining / 10)));
}

function extended(text: string, values: unknown[]): QueryConfig {
  // The extended protocol takes exactly one statement: `commit; delete ...` cannot leave the
  // read-only transaction, it is a syntax error.
  return { text, values, queryMode: 'extended' } as QueryConfig;
}

function shardStatement(plan: ScatterPlan, keys: TypedOrderKey[] | undefined, collatable: boolean[]): string {
  if (!plan.orderBy && plan.limit === undefined) return plan.sql;
  const order = keys ? ` order by ${orderBySql(keys, collatable, ALIAS)}` : '';
  const limit = plan.limit === undefined ? '' : ` limit ${plan.limit}`;
  // The newline ends a trailing `--` comment of the caller's statement.
  return `select * from (${plan.sql}\n) as ${ALIAS}${order}${limit}`;
}

/** Which merge comparison each order column needs, from the shard's own result types. */
function typeOrderKeys(orderBy: OrderKey[], fields: FieldDef[]): { keys: TypedOrderKey[]; collatable: boolean[] } {
  const keys: TypedOrderKey[] = [];
  const collatable: boolean[] = [];
  for (const k of orderBy) {
    const f = fields.find((x) => x.name === k.column);
    if (!f) throw invalidInput(`order-by column ${JSON.stringify(k.column)} is not in the result (columns: ${fields.map((x) => x.name).join(', ')})`);
    const kind = compareKindOf(f.dataTypeID);
    if (!kind) {
      throw invalidInput(
        `order-by column ${JSON.stringify(k.column)} has a type (oid ${f.dataTypeID}) the merge cannot compare: cast it in the statement to a number, text, boolean or timestamp`,
      );
    }
    keys.push({ column: k.column, descending: !!k.descending, kind: kind.kind });
    collatable.push(kind.collatable);
  }
  return { keys, collatable };
}

async function askShard(pool: Pool, target: ShardTarget, plan: ScatterPlan, deadline: number, lease: Lease, redact: (s: string) => string): Promise<Answer> {
  let client: PoolClient | undefined;
  try {
    client = await lease.connect(pool);
    // Repeatable read: the ownership check, the type probe and the read see one snapshot.
    await client.query(`begin transaction isolation level repeatable read read only; set local statement_timeout = ${statementTimeoutMs(deadline)}`);
    if (target.units?.length) {
      // A moved unit is refused here (SC421), so a stale route never reads the old copy.
      await client.query(
        extended(`select shardctl.assert_readable(u, e) from unnest($1::text[], $2::bigint[]) as t(u, e)`, [
          target.units.map((u) => u.unit),
          target.units.map((u) => u.epoch),
        ]),
      );
    }
    let typed: { keys: TypedOrderKey[]; collatable: boolean[] } | undefined;
    if (plan.orderBy) {
      const probe = await client.query(extended(`select * from (${plan.sql}\n) as ${ALIAS} limit 0`, plan.params));
      typed = typeOrderKeys(plan.orderBy, probe.fields);
      await client.query(`set local statement_timeout = ${statementTimeoutMs(deadline)}`);
    }
    const r = await client.query(extended(shardStatement(plan, typed?.keys, typed?.collatable ?? []), plan.params));
    await client.query('rollback');
    // Nothing a statement left in the session (an advisory lock, a setting) outlives the read.
    await client.query('discard all');
    lease.release();
    return { ok: true, rows: r.rows, fields: r.fields, keys: typed?.keys };
  } catch (e) {
    let broken: Error | undefined = isConnectionError(e) ? (e as Error) : undefined;
    if (client && !broken && !lease.abandoned) {
      await client
        .query('rollback')
        .then(() => client!.query('discard all'))
        .catch((err: Error) => {
          broken = err;
        });
    }
    lease.release(broken);
    return classify(e, target.shard, redact);
  }
}

function firstLine(e: unknown): string {
  return String((e as Error)?.message ?? e).split('\n')[0];
}

function classify(e: unknown, shard: string, redact: (s: string) => string): Answer {
  if (e instanceof ShardctlError) return { ok: false, fatal: e };
  const code = typeof (e as { code?: unknown })?.code === 'string' ? (e as { code: string }).code : undefined;
  const message = redact(firstLine(e));
  if (code === '25006') {
    return {
      ok: false,
      fatal: new ShardctlError(
        'Forbidden',
        `fleet reads run in a READ ONLY transaction: the statement tried to write and ${shard} refused it (${message}); nothing was changed`,
        { shard, code },
      ),
    };
  }
  if (code === '42601')
    return { ok: false, fatal: new ShardctlError('InvalidInput', `the statement is not one valid SQL statement (${message})`, { shard, code }) };
  if (code === '57014') return { ok: false, reason: 'timeout', message: `no answer before the deadline (${message})`, code };
  if (code === SQLSTATE.staleRoute) return { ok: false, reason: 'stale-route', message, code };
  if (isConnectionError(e)) return { ok: false, reason: 'unreachable', message, code };
  return { ok: false, reason: 'error', message, code };
}

/**
 * Asks every target within the deadline and merges what answered. Never throws for a shard's
 * failure (it is in `missing`); throws at once for the caller's mistakes that every shard would
 * share (a write, invalid SQL, an order-by column that is not in the result).
 */
export async function runScatter(plan: ScatterPlan, targets: ShardTarget[], started: number, deps: ScatterDeps): Promise<ScatterResult> {
  const deadline = started + plan.deadlineMs;
  const answers = new Map<string, Answer>();
  const timings = new Map<string, ShardTiming>();
  const inFlight = new Set<Lease>();
  const queue = [...targets];
  let fatal: ShardctlError | undefined;
  let onFatal: (e: ShardctlError) => void = () => {};
  const fatalSeen = new Promise<never>((_, reject) => (onFatal = reject));
  fatalSeen.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const deadlinePassed = new Promise<'deadline'>((resolve) => (timer = setTimeout(() => resolve('deadline'), Math.max(0, deadline - Date.now()))));

  const settle = (shard: string, answer: Answer, startedAt: number) => {
    answers.set(shard, answer);
    const rows = answer.ok ? answer.rows.length : 0;
    timings.set(shard, {
      shard,
      status: answer.ok ? 'ok' : 'reason' in answer ? answer.reason : 'error',
      rows,
      queuedMs: startedAt - started,
      elapsedMs: Date.now() - startedAt,
    });
  };

  const lane = async () => {
    for (let t = queue.shift(); t && !fatal; t = queue.shift()) {
      const startedAt = Date.now();
      const pool = deps.pool(t.shard);
      if (!pool) {
        settle(t.shard, { ok: false, reason: 'not-configured', message: `the configuration has no connection for shard ${t.shard}` }, startedAt);
        continue;
      }
      if (startedAt >= deadline) {
        settle(
          t.shard,
          { ok: false, reason: 'timeout', message: `not started: the deadline (${plan.deadlineMs} ms) passed while other shards were asked` },
          startedAt,
        );
        continue;
      }
      const lease = new Lease();
      inFlight.add(lease);
      const answer = await Promise.race([askShard(pool, t, plan, deadline, lease, deps.redact), deadlinePassed]);
      inFlight.delete(lease);
      if (answer === 'deadline') {
        lease.abandon();
        settle(t.shard, { ok: false, reason: 'timeout', message: `no answer within the deadline (${plan.deadlineMs} ms)` }, startedAt);
        continue;
      }
      if (!answer.ok && 'fatal' in answer) {
        fatal ??= answer.fatal;
        onFatal(answer.fatal);
        return;
      }
      settle(t.shard, answer, startedAt);
    }
  };

  try {
    await Promise.race([Promise.all(Array.from({ length: Math.min(plan.concurrency, targets.length) }, lane)), fatalSeen]);
  } finally {
    clearTimeout(timer);
    // A fatal answer stops the read: the other shards' connections go, nothing waits for them.
    for (const l of inFlight) l.abandon();
  }
  return mergeAnswers(plan, targets, answers, timings, started);
}

function mergeAnswers(
  plan: ScatterPlan,
  targets: ShardTarget[],
  answers: Map<string, Answer>,
  timings: Map<string, ShardTiming>,
  started: number,
): ScatterResult {
  const missing: MissingShard[] = [];
  const ok: { shard: string; rows: Record<string, unknown>[]; fields: FieldDef[]; keys?: TypedOrderKey[] }[] = [];
  for (const t of targets) {
    const a = answers.get(t.shard)!;
    if (a.ok) ok.push({ shard: t.shard, ...a });
    else if ('reason' in a) missing.push({ shard: t.shard, reason: a.reason, message: a.message, ...(a.code ? { code: a.code } : {}) });
  }
  // Every shard must sort the order columns the same way, or the merge would be wrong.
  const keys = ok[0]?.keys;
  for (const a of keys ? ok.slice(1) : []) {
    const bad = a.keys!.find((k, i) => k.kind !== keys![i].kind);
    if (bad)
      throw new ShardctlError(
        'PreconditionFailed',
        `order-by column ${bad.column} has another type on ${a.shard} than on ${ok[0].shard}: cast it in the statement`,
      );
  }
  let rows: ScatterRow<Record<string, unknown>>[];
  if (keys) {
    const cmp = rowComparator(keys);
    try {
      rows = mergeSortedRuns(
        ok.map((a) => a.rows),
        cmp,
        plan.limit,
      ).map(({ run, item }) => ({ shard: ok[run].shard, row: item }));
    } catch (e) {
      if (!(e instanceof UnsortedRunError)) throw e;
      throw new ShardctlError(
        'PreconditionFailed',
        `${ok[e.run].shard} returned rows out of the merge's order at row ${e.index}: cast the order-by columns in the statement`,
      );
    }
  } else {
    rows = ok.flatMap((a) => a.rows.map((row) => ({ shard: a.shard, row }))).slice(0, plan.limit);
  }
  return {
    complete: missing.length === 0,
    rows,
    fields: ok[0]?.fields.map((f) => f.name) ?? [],
    missing,
    shards: targets.map((t) => timings.get(t.shard)!),
    elapsedMs: Date.now() - started,
  };
}

/** Removes every DSN and password of `dsns` (and any `password=` pair) from a message. */
export function secretRedactor(dsns: readonly string[]): (text: string) => string {
  const secrets = secretStrings(dsns);
  const list = [...secrets].sort((a, b) => b.length - a.length);
  return (text) => {
    let out = text;
    for (const s of list) out = out.split(s).join('***');
    return out.replace(/(password\s*=\s*)\S+/gi, '$1***').replace(/(postgres(?:ql)?:\/\/[^:@/\s]*:)[^@\s]+@/gi, '$1***@');
  };
}
