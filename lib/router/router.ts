// The router: runs a caller's function inside a fenced transaction on the shard that owns the
// tenant. Routing comes from a cached directory snapshot (NOTIFY, TTL, per-entry refresh on a
// stale-route refusal); correctness never depends on the cache, because every transaction
// carries (unit, epoch) and the shard refuses writes and reads that do not match its fence.
// Fleet reads (scatter) run one read-only statement on many shards; see scatter.ts.
import { setTimeout as sleep } from 'node:timers/promises';
import { openPool } from '../connections';
import type { Pool, PoolClient } from 'pg';
import { Isolation, Mode, openFailure, openTransactionSql } from './open-tx';
import type { Config } from '../config';
import { IncompleteResult, ShardctlError, invalidInput } from '../errors';
import { validateTenantId } from '../ids';
import { DirectoryReader } from './directory-feed';
import { PlacementListener } from '../directory/listen';
import { isConnectionError } from '../directory/db';
import { Grant, assertGrantCovers, assertGrantCoversDataset, grantCoversAll } from './grant';
import { bucketOf, routingKeyBytes } from '../buckets/hash';
import { tenantUnitForRow } from '../buckets/route';
import { bucketUnitName } from '../buckets/units';
import {
  CONNECT_TIMEOUT,
  CONNECTION_LOST,
  isConnectTimeout,
  STALE_BACKOFF,
  FROZEN_BACKOFF,
  STARTUP_BACKOFF,
  backoffDelayMs,
  classifyError,
  nextWaitMs,
} from './retry';

/** SQLSTATE of a statement cancelled (here: by the statement timeout that carries the caller's deadline). */
const QUERY_CANCELED = '57014';
import { Placement, PlacementCache, UnitObservation } from './snapshot';
import { wrapTxClient } from './tx-client';
import { ScatterOptions, ScatterPlan, ScatterResult, ShardTarget, planScatter, runScatter, secretRedactor } from './scatter';
import { validateShardName } from '../ids';
import type { S3Client } from '@aws-sdk/client-s3';
import { s3ClientFor } from '../s3';
import { tenantBlobs, type PutBlobOptions, type TenantBlobs, type TenantBlobsOptions } from '../blobs/fenced';
import { bucketIndexScope } from '../blobs/index-table';
import type { BlobVersion } from '../blobs/index-table';

export type { Mode, Isolation } from './open-tx';

export interface RouterOptions {
  /** Full-refresh interval; default config.limits.routerSnapshotTtlMs. */
  snapshotTtlMs?: number;
  /** Even when the generation is unchanged, reload everything this often (default 10 × TTL). */
  fullReloadMs?: number;
  /** LISTEN for placement announcements (default true). */
  listen?: boolean;
  /** Test hook: load once at create, then never refresh (no TTL, NOTIFY or stale refresh). */
  freezeCache?: boolean;
  /** Directory DSN; default config.directory.dsn. */
  directoryDsn?: string;
  /**
   * Connections per shard pool (default 10). Size it to the caller's concurrency, the number of
   * tenant transactions it runs at once on one shard: a call beyond it waits for a connection.
   */
  poolMax?: number;
  /** Connect timeout for directory and shard connections (default 2000 ms). */
  connectTimeoutMs?: number;
  /**
   * How long `create` keeps trying to load its first snapshot while the directory cannot be
   * reached (refused, reset, timed out, out of connections), with backoff; default
   * config.limits.routerDeadlineMs. Any other failure is thrown at once.
   */
  startupTimeoutMs?: number;
  /** S3 clients of the shards' buckets (blob API); default: one per shard from the config, closed with the router. */
  s3For?: (shard: string) => S3Client;
}

export interface TenantCallOptions {
  /** Total time for all attempts and waits; default config.limits.routerDeadlineMs. */
  deadlineMs?: number;
  /** Stale-route and serialization retries allowed; default config.limits.routerRetryBudget. */
  retryBudget?: number;
  /** Transaction isolation (default read committed; the fence holds at every level). */
  isolation?: Isolation;
  /**
   * withTenant: the value (as text) of the split column of the rows the transaction writes
   * (config.tenant.splitColumns). Required once the tenant is split (`tenant split`): it names the
   * sub-unit `T:<stable_hash(splitKey) mod K>` the transaction is opened for; ignored otherwise.
   */
  splitKey?: string;
}

export interface RouterMetrics {
  snapshotAgeMs: number;
  directoryReachable: boolean;
  listening: boolean;
  generation: number;
  units: number;
  refreshes: number;
  refreshFailures: number;
  notifications: number;
  transactions: number;
  staleRetries: number;
  frozenWaits: number;
  serializationRetries: number;
  /** Attempts retried because the shard's pool gave no connection before its connect timeout. */
  connectRetries: number;
  lastDirectoryError?: string;
}

/**
 * The function run inside a tenant transaction. It must be idempotent per attempt: on a stale
 * route, a frozen unit or a serialization failure the transaction is rolled back and `fn` runs
 * again from scratch (possibly on another shard), so it must not keep side effects outside the
 * transaction, and must not release or keep the client (it is revoked after the call).
 */
export type TenantFn<T> = (tx: PoolClient, route: TenantRoute) => Promise<T>;

/** withKey's function: as TenantFn, with the key's bucket (what its rows carry in the bucket column). */
export type KeyFn<T> = (tx: PoolClient, route: TenantRoute & { bucket: number }) => Promise<T>;

/**
 * Where a tenant transaction runs, and the tenant's blobs there, fenced by the same transaction:
 * a PUT or DELETE passes the shard's write check (and holds the unit's lock) before it touches
 * the bucket, so it is refused exactly when a row write would be (lib/blobs/fenced.ts).
 */
export interface TenantRoute {
  unit: string;
  shard: string;
  epoch: number;
  blobs: TenantBlobs;
}

const ISOLATIONS: ReadonlySet<string> = new Set(['read committed', 'repeatable read', 'serializable']);

export class Router {
  private readonly cache = new PlacementCache();
  /** The raw error of the last failed snapshot load (create retries only a connection failure). */
  private lastLoadError: unknown;
  /** Split tenants (unit → ways), from the directory's shardctl.splits. */
  private readonly splits = new Map<string, number>();
  private readonly pools = new Map<string, Pool>();
  private readonly scatterPools = new Map<string, Pool>();
  private readonly s3s = new Map<string, S3Client>();
  private readonly redact: (text: string) => string;
  /** The directory's shards inventory as last read (fleet reads fall back to it when the directory is down). */
  private knownShards: string[] | undefined;
  private reader: DirectoryReader;
  private listener: PlacementListener | undefined;
  private ttlTimer: NodeJS.Timeout | undefined;
  private fullRefresh: Promise<void> | undefined;
  private ttlCheck: Promise<void> | undefined;
  private readonly unitRefresh = new Map<string, Promise<Placement | undefined>>();
  private lastFreshAt = 0;
  private lastFullLoadAt = 0;
  private closed = false;
  private readonly m = {
    directoryReachable: true,
    refreshes: 0,
    refreshFailures: 0,
    notifications: 0,
    transactions: 0,
    staleRetries: 0,
    frozenWaits: 0,
    serializationRetries: 0,
    connectRetries: 0,
    lastDirectoryError: undefined as string | undefined,
  };
  private readonly ttlMs: number;
  private readonly fullReloadMs: number;
  private readonly connectTimeoutMs: number;

  private constructor(
    private readonly config: Config,
    private readonly opts: RouterOptions,
  ) {
    this.ttlMs = opts.snapshotTtlMs ?? config.limits.routerSnapshotTtlMs;
    this.fullReloadMs = opts.fullReloadMs ?? this.ttlMs * 10;
    this.connectTimeoutMs = opts.connectTimeoutMs ?? 2000;
    this.reader = this.newReader(opts.directoryDsn ?? config.directory.dsn);
    this.redact = secretRedactor([config.directory.dsn, opts.directoryDsn ?? '', ...config.shards.map((s) => s.dsn)]);
  }

  /** Loads the first snapshot (throws DirectoryUnavailable if it cannot), then starts refreshing. */
  static async create(config: Config, opts: RouterOptions = {}): Promise<Router> {
    const r = new Router(config, opts);
    try {
      // Listen before loading, so nothing announced during the load is missed. (The listener
      // never throws: a failed connect is retried in the background.)
      await r.startListener();
      // The first snapshot: a directory that cannot be reached (refused, reset, a connect timeout,
      // too many connections) is tried again until startupTimeoutMs; any other failure (a bad
      // password, a missing grant or schema) is final at once.
      const deadline = Date.now() + (opts.startupTimeoutMs ?? config.limits.routerDeadlineMs);
      for (let attempt = 0; ; attempt++) {
        try {
          await r.refresh();
          break;
        } catch (e) {
          const wait = isConnectionError(r.lastLoadError) ? nextWaitMs(attempt, Date.now(), deadline, STARTUP_BACKOFF) : undefined;
          if (wait === undefined || r.closed) throw e;
          await sleep(wait);
        }
      }
    } catch (e) {
      await r.close();
      throw e;
    }
    if (!opts.freezeCache) {
      r.ttlTimer = setInterval(() => void r.onTtl(), r.ttlMs);
      r.ttlTimer.unref();
    }
    return r;
  }

  /**
   * Runs `fn` in a transaction on the shard owning `tenantId`, opened (with shardctl.unit/epoch
   * set and, for writes, the fence checked) before anything else. Input and grant are checked before any I/O. Retries stale routes
   * (after refreshing the entry) and serialization failures within the retry budget, and waits
   * out a frozen unit (writes) within the deadline. See TenantFn for the idempotency contract.
   */
  async withTenant<T>(tenantId: string, grant: Grant, mode: Mode, fn: TenantFn<T>, opts: TenantCallOptions = {}): Promise<T> {
    const tenant = validateTenantId(tenantId);
    assertGrantCovers(grant, tenant);
    if (opts.splitKey !== undefined) routingKeyBytes(opts.splitKey); // a key no shard could hash is refused before any I/O
    const started = Date.now();
    const unit = this.unitOfTenantRow(tenant, opts.splitKey);
    try {
      return await this.withUnit(unit, mode, fn, opts);
    } catch (e) {
      // A tenant without a placement may have been split since this router learned its route (the
      // shard refused the old epoch, and the directory no longer names the tenant): learn the split
      // and run on the row's sub-unit, within what is left of the deadline.
      if (unit !== tenant || !(e instanceof ShardctlError) || e.type !== 'NotFound' || this.opts.freezeCache) throw e;
      const ways = await this.reader.loadSplit(tenant).catch((x) => {
        if (x?.code !== '42501') return undefined;
        throw new ShardctlError(
          'PreconditionFailed',
          `tenant ${tenant} has no placement, and this router's role may not read shardctl.splits to tell whether it was split: grant select on shardctl.splits to it (docs/production.md, "Roles")`,
          { tenant },
        );
      });
      if (ways === undefined) throw e;
      this.splits.set(tenant, ways);
      const left = (opts.deadlineMs ?? this.config.limits.routerDeadlineMs) - (Date.now() - started);
      if (left <= 0) throw e;
      return this.withUnit(this.unitOfTenantRow(tenant, opts.splitKey), mode, fn, { ...opts, deadlineMs: left });
    }
  }

  /** The unit a tenant's row routes to: the tenant, or its sub-unit by the split key once the tenant is split. */
  private unitOfTenantRow(tenant: string, splitKey: string | undefined): string {
    const ways = this.splits.get(tenant);
    if (ways === undefined) return tenant;
    if (splitKey === undefined) {
      throw invalidInput(
        `tenant ${tenant} is split ${ways} ways (${tenant}:0 .. ${tenant}:${ways - 1}): pass splitKey, the value of the row's split column (config.tenant.splitColumns)`,
      );
    }
    return tenantUnitForRow(tenant, splitKey, this.splits);
  }

  /**
   * Runs `fn` in a transaction on the shard owning the bucket of `key` in bucketed dataset
   * `dataset` (config.datasets): unit `bucket:<dataset>:<bucket_of(key, B)>`, fenced with that
   * unit's epoch and retried exactly as withTenant (stale route: refresh and retry; frozen: wait).
   * `route.bucket` is the key's bucket, the value of the dataset's bucket column for the key's rows
   * (the shard's CHECK refuses any other). The transaction may write only rows of that bucket.
   */
  async withKey<T>(dataset: string, key: string, grant: Grant, mode: Mode, fn: KeyFn<T>, opts: TenantCallOptions = {}): Promise<T> {
    const ds = this.datasetOf(dataset);
    assertGrantCoversDataset(grant, ds.name);
    const bucket = bucketOf(key, ds.buckets);
    const unit = bucketUnitName(ds.name, bucket, ds.buckets);
    // route.blobs' index methods name the key's blobs in the dataset's index (moved with the bucket).
    const index = { scope: bucketIndexScope(ds, bucket, key), key };
    return this.withUnit(unit, mode, (tx, route) => fn(tx, { ...route, bucket }), opts, index);
  }

  /**
   * Runs `fn` in a transaction on the shard owning bucket `bucket` of dataset `dataset` (unit
   * `bucket:<dataset>:<n>`), fenced and retried exactly as withKey: for work that names a bucket
   * rather than one key, e.g. a job worker claiming a bucket unit's jobs (lib/jobs/queue.ts).
   */
  async withBucket<T>(dataset: string, bucket: number, grant: Grant, mode: Mode, fn: KeyFn<T>, opts: TenantCallOptions = {}): Promise<T> {
    const ds = this.datasetOf(dataset);
    assertGrantCoversDataset(grant, ds.name);
    const unit = bucketUnitName(ds.name, bucket, ds.buckets);
    return this.withUnit(unit, mode, (tx, route) => fn(tx, { ...route, bucket }), opts);
  }

  /** The configured dataset named `dataset` (config.datasets); InvalidInput when there is none. */
  datasetOf(dataset: string): Readonly<Config['datasets'][number]> {
    const ds = this.config.datasets.find((d) => d.name === dataset);
    if (!ds)
      throw invalidInput(
        `unknown dataset ${JSON.stringify(String(dataset).slice(0, 40))} (config.datasets: ${this.config.datasets.map((d) => d.name).join(', ') || 'none'})`,
      );
    return ds;
  }

  private async withUnit<T>(unit: string, mode: Mode, fn: TenantFn<T>, opts: TenantCallOptions, index?: TenantBlobsOptions['index']): Promise<T> {
    if (mode !== 'read' && mode !== 'write') throw invalidInput(`mode must be 'read' or 'write', got ${JSON.stringify(String(mode))}`);
    const deadlineMs = opts.deadlineMs ?? this.config.limits.routerDeadlineMs;
    const budget = opts.retryBudget ?? this.config.limits.routerRetryBudget;
    if (!(deadlineMs > 0) || !Number.isFinite(deadlineMs)) throw invalidInput(`deadlineMs must be a positive number, got ${deadlineMs}`);
    if (!Number.isInteger(budget) || budget < 0) throw invalidInput(`retryBudget must be a non-negative integer, got ${budget}`);
    if (opts.isolation !== undefined && !ISOLATIONS.has(opts.isolation)) throw invalidInput(`unknown isolation ${JSON.stringify(opts.isolation)}`);
    if (this.closed) throw new ShardctlError('PreconditionFailed', 'router is closed');

    const started = Date.now();
    const deadline = started + deadlineMs;
    let placement = await this.resolve(unit);
    let retries = 0;
    let frozenRounds = 0;
    let unchangedStaleRounds = 0;
    let lastKind: ReturnType<typeof classifyError> | undefined;
    for (;;) {
      let err: unknown;
      try {
        return await this.attempt(placement, mode, fn, opts.isolation, deadline, index);
      } catch (e) {
        err = e;
      }
      const kind = classifyError(err);
      const frozenAtDeadline = () =>
        new ShardctlError(
          'Frozen',
          `tenant ${unit} is frozen for cutover; retry`,
          { tenant: unit, shard: placement.shard, epoch: placement.epoch, waitedMs: Date.now() - started, attempts: frozenRounds },
          true,
        );
      // The deadline ran out inside a retry of a frozen unit (its statement timeout): the reason is the freeze.
      if (frozenRounds > 0 && err instanceof ShardctlError && err.type === 'TimedOut') throw frozenAtDeadline();
      // Or inside a retry after a shard refused the route (the directory could not tell the new one in
      // time): the reason is that refusal, as when the retries run out.
      if (retries > 0 && lastKind === 'stale' && err instanceof ShardctlError && err.type === 'TimedOut') {
        throw new ShardctlError(
          'StaleRoute',
          `tenant ${unit}: shard ${placement.shard} refused epoch ${placement.epoch} and the deadline ran out before a newer route was known (${retries} retries, ${Date.now() - started} ms)`,
          { tenant: unit, shard: placement.shard, epoch: placement.epoch, retries, directoryReachable: this.m.directoryReachable },
          true,
        );
      }
      lastKind = kind;
      if (kind === 'other') throw err;
      if (kind === 'frozen') {
        // Frozen is checked after ownership, so the route is right: wait, do not refresh.
        this.m.frozenWaits++;
        const wait = nextWaitMs(frozenRounds++, Date.now(), deadline, FROZEN_BACKOFF);
        if (wait === undefined) throw frozenAtDeadline();
        await sleep(wait);
        // The listener keeps the cache current: a switch during the wait sends the retry to the new owner.
        placement = this.cache.get(unit) ?? placement;
        continue;
      }
      if (retries >= budget || Date.now() >= deadline) {
        if (kind === 'connect') {
          throw new ShardctlError(
            'Unavailable',
            `tenant ${unit}: no connection to shard ${placement.shard} within the deadline (${retries + 1} attempts, ${Date.now() - started} ms; last: ${(err as Error)?.message ?? err})`,
            { tenant: unit, shard: placement.shard, retries },
            true,
          );
        }
        if (kind === 'stale') {
          throw new ShardctlError(
            'StaleRoute',
            `tenant ${unit}: shard ${placement.shard} refused epoch ${placement.epoch} and no retry is left (${retries} retries, ${Date.now() - started} ms)`,
            { tenant: unit, shard: placement.shard, epoch: placement.epoch, retries, directoryReachable: this.m.directoryReachable },
            true,
          );
        }
        throw err;
      }
      retries++;
      if (kind === 'connect') {
        this.m.connectRetries++;
        await sleep(Math.min(backoffDelayMs(retries - 1, STALE_BACKOFF), Math.max(0, deadline - Date.now())));
        continue;
      }
      if (kind === 'serialization') {
        this.m.serializationRetries++;
        await sleep(Math.min(backoffDelayMs(retries - 1, STALE_BACKOFF), Math.max(0, deadline - Date.now())));
        continue;
      }
      this.m.staleRetries++;
      const before = placement;
      placement = await this.refreshAfterStale(unit, placement);
      if (placement.shard === before.shard && placement.epoch === before.epoch) {
        // The directory has not caught up (or cannot be read): do not hammer the shard.
        await sleep(Math.min(backoffDelayMs(unchangedStaleRounds++, STALE_BACKOFF), Math.max(0, deadline - Date.now())));
      }
    }
  }

  /**
   * Writes a new version of a tenant's blob through the blob index (lib/blobs/index-table.ts): a
   * new immutable object in the owner's bucket, its sha256 recorded in the index row this
   * transaction commits. The write counts only once that row commits; a refused or failed attempt
   * leaves at most an unreferenced object for `shardctl blobs gc`. Retried like withTenant (each
   * attempt under a fresh version key).
   */
  putBlob(tenantId: string, grant: Grant, name: string, body: Uint8Array | string, opts: TenantCallOptions & PutBlobOptions = {}): Promise<BlobVersion> {
    return this.withTenant(tenantId, grant, 'write', (_tx, route) => route.blobs.write(name, body, opts), opts);
  }

  /** The bytes of the blob's current version, resolved through the index (undefined when it has no row). */
  getBlob(tenantId: string, grant: Grant, name: string, opts: TenantCallOptions = {}): Promise<Buffer | undefined> {
    return this.withTenant(tenantId, grant, 'read', (_tx, route) => route.blobs.read(name), opts);
  }

  /** Deletes the blob from the index (fenced like a row write); its objects are left for `shardctl blobs gc`. */
  deleteBlob(tenantId: string, grant: Grant, name: string, opts: TenantCallOptions = {}): Promise<{ deleted: boolean }> {
    return this.withTenant(tenantId, grant, 'write', async (_tx, route) => ({ deleted: await route.blobs.unlink(name) }), opts);
  }

  /**
   * Runs one read-only statement on every shard of the directory (or `shards`, or the owners of
   * `units`), at most `concurrency` at a time, each in a READ ONLY transaction whose statement
   * timeout ends inside `deadlineMs`. Rows come back tagged with their shard; with `orderBy`
   * (and `limit`) every shard sorts and limits and the router merges, so the answer is the
   * fleet-wide top-k. A write is refused (Forbidden), whatever allowPartial says. When a shard
   * times out, is unreachable or fails, this throws IncompleteResult naming each missing shard
   * and why, unless `allowPartial`: then the result says `complete: false` with the same list.
   * In units mode each shard first proves it owns its units at the cached epoch; a stale route
   * refreshes them and asks again within the deadline and the retry budget.
   */
  async scatter<R = Record<string, unknown>>(sql: string, params: readonly unknown[], opts: ScatterOptions): Promise<ScatterResult<R>> {
    const plan = planScatter(sql, params, opts, this.config.limits.routerDeadlineMs);
    for (const s of plan.shards ?? []) validateShardName(s);
    for (const u of plan.units ?? []) assertGrantCovers(opts.grant, validateTenantId(u));
    if (!plan.units && !grantCoversAll(opts.grant)) {
      throw new ShardctlError('Forbidden', "a fleet read sees every tenant of the shards it asks: it needs the grant { tenants: '*' }, or name the units");
    }
    if (this.closed) throw new ShardctlError('PreconditionFailed', 'router is closed');
    const started = Date.now();
    const budget = this.config.limits.routerRetryBudget;
    for (let retries = 0; ; retries++) {
      const targets = await this.scatterTargets(plan, started + plan.deadlineMs);
      const result = await runScatter(plan, targets, started, { pool: (s) => this.scatterPoolFor(s), redact: this.redact });
      const stale = new Set(result.missing.filter((m) => m.reason === 'stale-route').map((m) => m.shard));
      if (stale.size > 0 && !this.opts.freezeCache && retries < budget && Date.now() < started + plan.deadlineMs) {
        this.m.staleRetries++;
        const units = targets.filter((t) => stale.has(t.shard)).flatMap((t) => t.units ?? []);
        // Unreachable directory: the cached routes stay and the next round backs off.
        await Promise.all(units.map((u) => this.refreshUnit(u.unit).catch(() => undefined)));
        await sleep(Math.min(backoffDelayMs(retries, STALE_BACKOFF), Math.max(0, started + plan.deadlineMs - Date.now())));
        continue;
      }
      if (!result.complete && !plan.allowPartial) {
        throw new IncompleteResult(
          result.missing,
          result.shards.filter((t) => t.status === 'ok').map((t) => t.shard),
        );
      }
      return result as ScatterResult<R>;
    }
  }

  /** The cached placement of a unit (no I/O). */
  lookup(unit: string): Placement | undefined {
    return this.cache.get(unit);
  }

  /** Reloads the whole snapshot now; throws DirectoryUnavailable (and keeps the old one) on failure. */
  refresh(): Promise<void> {
    if (this.opts.freezeCache && this.lastFullLoadAt > 0) return Promise.resolve();
    this.fullRefresh ??= this.loadFullSnapshot().finally(() => {
      this.fullRefresh = undefined;
    });
    return this.fullRefresh;
  }

  /**
   * Points the router at another directory endpoint (failover to a new primary; tests use it
   * to make the directory unreachable). The cached snapshot is kept and keeps routing.
   */
  async setDirectoryDsn(dsn: string): Promise<void> {
    const old = this.reader;
    this.reader = this.newReader(dsn);
    await old.end();
    await this.listener?.stop();
    this.listener = undefined;
    await this.startListener();
    void this.refresh().catch(() => {}); // callers may await refresh() to join this load
  }

  metrics(): RouterMetrics {
    return {
      snapshotAgeMs: this.lastFreshAt ? Date.now() - this.lastFreshAt : Number.POSITIVE_INFINITY,
      directoryReachable: this.m.directoryReachable,
      listening: this.listener?.listening ?? false,
      generation: this.cache.generation,
      units: this.cache.size,
      refreshes: this.m.refreshes,
      refreshFailures: this.m.refreshFailures,
      notifications: this.m.notifications,
      transactions: this.m.transactions,
      staleRetries: this.m.staleRetries,
      frozenWaits: this.m.frozenWaits,
      serializationRetries: this.m.serializationRetries,
      connectRetries: this.m.connectRetries,
      lastDirectoryError: this.m.lastDirectoryError,
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.ttlTimer) clearInterval(this.ttlTimer);
    this.ttlTimer = undefined;
    await this.listener?.stop();
    this.listener = undefined;
    await this.reader.end();
    const pools = [...this.pools.values(), ...this.scatterPools.values()];
    this.pools.clear();
    this.scatterPools.clear();
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    for (const c of this.s3s.values()) c.destroy();
    this.s3s.clear();
  }

  // ---- one attempt ------------------------------------------------------------------------

  private async attempt<T>(
    p: Placement,
    mode: Mode,
    fn: TenantFn<T>,
    isolation: Isolation | undefined,
    deadline: number,
    index?: TenantBlobsOptions['index'],
  ): Promise<T> {
    let client: PoolClient;
    try {
      client = await this.poolFor(p.shard).connect();
    } catch (e: any) {
      // node-postgres gives no code for it: marked so the loop retries it in time.
      if (isConnectTimeout(e)) throw Object.assign(new Error(`shard ${p.shard}: ${e.message}`, { cause: e }), { code: CONNECT_TIMEOUT });
      throw e;
    }
    this.m.transactions++;
    const tx = wrapTxClient(client);
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the route's lazy getter below
    const self = this;
    const tenantColumn = this.config.tenant.column;
    let broken: Error | undefined;
    let commitSent = false;
    try {
      // BEGIN and the route check in one round trip (a simple-query batch): nothing of fn's runs
      // on a shard that does not own the unit at our epoch, and no write goes without the epoch.
      // Every statement ends by the caller's deadline (at least 1 ms: the deadline may just have passed).
      await client.query(openTransactionSql(p, mode, isolation, Math.max(1, Math.ceil(deadline - Date.now())))).catch((e: unknown) => {
        throw openFailure(e, p.shard);
      });
      // The blob helper is built on first use: most transactions never touch it. A bucket unit's
      // objects live under datasets/<dataset>/<n>/ (its index calls name the key's blobs under withKey only).
      let blobs: TenantBlobs | undefined;
      const route: TenantRoute = {
        unit: p.unit,
        shard: p.shard,
        epoch: p.epoch,
        get blobs() {
          return (blobs ??= tenantBlobs(tx.client, p.unit, self.bucketOf(p.shard), { tenantColumn, index }));
        },
      };
      const result = await fn(tx.client, route);
      commitSent = true;
      const done = await client.query('commit');
      if (done.command === 'ROLLBACK') throw this.abortedAtCommit(p.unit, tx.firstError());
      return result;
    } catch (err: any) {
      if (err?.code === QUERY_CANCELED && Date.now() >= deadline - 1) {
        await client.query('rollback').catch((e: Error) => {
          broken = e;
        });
        throw new ShardctlError(
          'TimedOut',
          `tenant ${p.unit}: a statement on ${p.shard} ran past the call's deadline and was cancelled (rolled back)`,
          {
            tenant: p.unit,
            shard: p.shard,
          },
          true,
        );
      }
      await client.query('rollback').catch((e: Error) => {
        broken = e;
      });
      // The transaction's own connection broke (its ROLLBACK failed too) before COMMIT was sent:
      // the server rolled the transaction back, so the loop may run fn again on a new connection.
      // A break at COMMIT stays as it is (unknown); a connection error of something else fn called
      // (its own connection alive) is fn's to handle and reaches the caller unchanged.
      if (!commitSent && broken && isConnectionError(err)) {
        throw Object.assign(new Error(`shard ${p.shard}: the connection broke before commit (${err?.message ?? err}); nothing was committed`, { cause: err }), {
          code: CONNECTION_LOST,
        });
      }
      throw err;
    } finally {
      tx.revoke();
      client.release(broken);
    }
  }

  /**
   * COMMIT of an aborted transaction answers ROLLBACK without an error: fn caught an error and
   * went on. Surface the cause so nothing looks committed that was not; retriable causes
   * (stale, frozen, serialization) are rethrown as they are, so the loop retries them.
   */
  private abortedAtCommit(unit: string, cause: unknown): unknown {
    if (cause && classifyError(cause) !== 'other') return cause;
    const msg = cause instanceof Error ? cause.message : 'unknown error';
    return new ShardctlError(
      'Conflict',
      `transaction for tenant ${unit} was rolled back at commit: an error inside the callback was caught and not rethrown (${msg}); nothing was committed`,
      { tenant: unit, code: (cause as { code?: unknown })?.code },
    );
  }

  private bucketOf(shard: string): { shard: string; s3: S3Client; bucket: string } {
    const sc = this.config.shards.find((s) => s.name === shard);
    if (!sc) throw new ShardctlError('ConfigError', `the directory places units on shard ${shard}, which this router's configuration does not list`, { shard });
    let s3 = this.opts.s3For?.(shard) ?? this.s3s.get(shard);
    if (!s3) this.s3s.set(shard, (s3 = s3ClientFor(this.config, shard)));
    return { shard, s3, bucket: sc.bucket };
  }

  private poolFor(shard: string): Pool {
    let pool = this.pools.get(shard);
    if (pool) return pool;
    const sc = this.config.shards.find((s) => s.name === shard);
    if (!sc) {
      throw new ShardctlError('ConfigError', `the directory places units on shard ${shard}, which this router's configuration does not list`, { shard });
    }
    // Hardened (lib/connections): a connection dying, idle or checked out, is noticed by the next query.
    pool = openPool(sc.dsn, { max: this.opts.poolMax ?? 10, connectionTimeoutMillis: this.connectTimeoutMs, applicationName: 'shardctl-router' });
    this.pools.set(shard, pool);
    return pool;
  }

  /** A shard's pool for fleet reads: sessions that default to read-only, apart from tenant traffic. */
  private scatterPoolFor(shard: string): Pool | undefined {
    let pool = this.scatterPools.get(shard);
    if (pool) return pool;
    const sc = this.config.shards.find((s) => s.name === shard);
    if (!sc) return undefined;
    pool = openPool(sc.dsn, {
      max: this.opts.poolMax ?? 10,
      connectionTimeoutMillis: this.connectTimeoutMs,
      applicationName: 'shardctl-scatter',
      readOnly: true,
    });
    this.scatterPools.set(shard, pool);
    return pool;
  }

  /** The shards a fleet read asks: the named ones, the owners of its units, or the directory's inventory. */
  private async scatterTargets(plan: ScatterPlan, deadline: number): Promise<ShardTarget[]> {
    if (plan.shards) return [...plan.shards].sort().map((shard) => ({ shard }));
    if (plan.units) {
      const byShard = new Map<string, { unit: string; epoch: number }[]>();
      for (const u of plan.units) {
        const p = await this.resolve(u);
        byShard.set(p.shard, [...(byShard.get(p.shard) ?? []), { unit: u, epoch: p.epoch }]);
      }
      return [...byShard.keys()].sort().map((shard) => ({ shard, units: byShard.get(shard) }));
    }
    try {
      const names = await withDeadline(this.reader.loadShardNames(), deadline);
      this.m.directoryReachable = true;
      this.knownShards = names;
    } catch (e) {
      this.directoryFailed(e);
      if (!this.knownShards) {
        throw new ShardctlError(
          'DirectoryUnavailable',
          `cannot read the shards inventory for a fleet read: ${this.redact((e as Error).message)}`,
          undefined,
          true,
        );
      }
    }
    return this.knownShards.map((shard) => ({ shard }));
  }

  // ---- routing state ----------------------------------------------------------------------

  private async resolve(unit: string): Promise<Placement> {
    const cached = this.cache.get(unit);
    if (cached) return cached;
    const fresh = this.opts.freezeCache ? undefined : await this.refreshUnit(unit);
    if (!fresh) throw new ShardctlError('NotFound', `tenant ${unit} has no placement in the directory`, { tenant: unit });
    return fresh;
  }

  private async refreshAfterStale(unit: string, current: Placement): Promise<Placement> {
    if (this.opts.freezeCache) return current;
    let fresh: Placement | undefined;
    try {
      fresh = await this.refreshUnit(unit);
    } catch {
      return current; // directory unreachable: the retry loop backs off and gives up in budget
    }
    if (!fresh) throw new ShardctlError('NotFound', `tenant ${unit} no longer has a placement in the directory`, { tenant: unit });
    return fresh;
  }

  /** Re-reads one unit (single-flight per unit); throws DirectoryUnavailable on failure. */
  private refreshUnit(unit: string): Promise<Placement | undefined> {
    const inflight = this.unitRefresh.get(unit);
    if (inflight) return inflight;
    const p = (async () => {
      let o: UnitObservation;
      try {
        o = await this.reader.loadUnit(unit);
      } catch (e) {
        this.directoryFailed(e);
        throw new ShardctlError('DirectoryUnavailable', `cannot read the placement of ${unit}: ${(e as Error).message}`, { tenant: unit }, true);
      }
      this.m.directoryReachable = true;
      this.cache.observe(o);
      return this.cache.get(unit);
    })().finally(() => this.unitRefresh.delete(unit));
    this.unitRefresh.set(unit, p);
    return p;
  }

  private async loadFullSnapshot(): Promise<void> {
    try {
      const snap = await this.reader.loadSnapshot();
      this.cache.replaceAll(snap.placements, snap.generation);
      // A split is never undone: the map only grows.
      for (const [unit, ways] of snap.splits ?? []) this.splits.set(unit, ways);
      this.lastFreshAt = this.lastFullLoadAt = Date.now();
      this.m.refreshes++;
      this.m.directoryReachable = true;
    } catch (e) {
      this.directoryFailed(e);
      this.lastLoadError = e;
      throw new ShardctlError('DirectoryUnavailable', `cannot load the directory snapshot: ${(e as Error).message}`, undefined, true);
    }
  }

  /** TTL tick: a cheap generation probe; a full reload only when something changed (or rarely). */
  private onTtl(): void {
    if (this.ttlCheck || this.closed) return;
    this.ttlCheck = (async () => {
      const needFull = Date.now() - this.lastFullLoadAt >= this.fullReloadMs;
      if (!needFull) {
        let gen: number;
        try {
          gen = await this.reader.currentGeneration();
        } catch (e) {
          this.directoryFailed(e);
          return;
        }
        this.m.directoryReachable = true;
        if (gen === this.cache.generation) {
          this.lastFreshAt = Date.now();
          return;
        }
      }
      await this.refresh().catch(() => {});
    })().finally(() => {
      this.ttlCheck = undefined;
    });
  }

  private directoryFailed(e: unknown): void {
    this.m.directoryReachable = false;
    this.m.refreshFailures++;
    this.m.lastDirectoryError = (e as Error)?.message ?? String(e);
  }

  private newReader(dsn: string): DirectoryReader {
    return new DirectoryReader(dsn, { connectTimeoutMs: this.connectTimeoutMs, queryTimeoutMs: Math.max(5000, this.connectTimeoutMs) });
  }

  private async startListener(): Promise<void> {
    if (this.opts.freezeCache || this.opts.listen === false || this.closed) return;
    let first = true;
    const listener = new PlacementListener(
      this.reader.dsn,
      {
        onNotification: (o) => {
          this.m.notifications++;
          if (o) this.cache.observe(o);
          else void this.refresh().catch(() => {});
        },
        onConnected: () => {
          this.m.directoryReachable = true;
          // After a reconnect, announcements may have been missed: reload. (The first connect
          // is followed by create's own load.)
          if (!first) void this.refresh().catch(() => {});
          first = false;
        },
        onDisconnected: (err) => {
          // Not a refresh failure by itself; the TTL probe keeps counting those.
          this.m.directoryReachable = false;
          if (err) this.m.lastDirectoryError = err.message;
        },
      },
      { connectTimeoutMs: this.connectTimeoutMs },
    );
    this.listener = listener;
    await listener.start();
  }
}

function withDeadline<T>(p: Promise<T>, deadline: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('no answer before the deadline')), Math.max(0, deadline - Date.now()));
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}
