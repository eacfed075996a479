// The router's two links to the directory: a small pool for snapshot / per-unit reads, and a
// dedicated LISTEN client on `shardctl_placement` that reconnects with backoff. Neither ever
// writes. Failures surface as rejected promises or listener state; the router decides.
import { hardenPool } from '../pg';
import { Client, Pool } from 'pg';
import { Placement, PlacementState, UnitObservation, parsePlacementNotification, toSafeInt } from './snapshot';
import { backoffDelayMs } from './retry';

export const PLACEMENT_CHANNEL = 'shardctl_placement';

export interface DirectorySnapshot {
  placements: Placement[];
  generation: number;
}

function rowToPlacement(r: { unit: string; shard: string; epoch: string | number; state: string }): Placement {
  const epoch = toSafeInt(r.epoch);
  if (epoch === undefined) throw new Error(`directory returned a non-integer epoch for unit ${r.unit}`);
  return { unit: r.unit, shard: r.shard, epoch, state: r.state as PlacementState };
}

export class DirectoryReader {
  private readonly pool: Pool;

  constructor(
    readonly dsn: string,
    opts: { connectTimeoutMs: number; queryTimeoutMs: number },
  ) {
    this.pool = new Pool({
      connectionString: dsn,
      max: 2,
      connectionTimeoutMillis: opts.connectTimeoutMs,
      query_timeout: opts.queryTimeoutMs,
      idleTimeoutMillis: 30_000,
      application_name: 'shardctl-router',
    });
    // An idle client dying (directory restart) must not crash the process; the next query fails.
    hardenPool(this.pool);
  }

  /** Every placement and the generation, from one consistent (repeatable read) snapshot. */
  async loadSnapshot(): Promise<DirectorySnapshot> {
    const c = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await c.query('begin isolation level repeatable read read only');
      const g = await c.query('select value from shardctl.generation');
      const u = await c.query('select unit, shard, epoch, state from shardctl.units');
      await c.query('commit');
      return { generation: toSafeInt(g.rows[0]?.value) ?? 0, placements: u.rows.map(rowToPlacement) };
    } catch (e) {
      broken = e as Error;
      await c.query('rollback').catch(() => {});
      throw e;
    } finally {
      c.release(broken);
    }
  }

  /** One unit's placement (undefined when absent) with the generation, in one statement. */
  async loadUnit(unit: string): Promise<UnitObservation> {
    const r = await this.pool.query(
      `select g.value as generation, u.unit, u.shard, u.epoch, u.state
         from shardctl.generation g left join shardctl.units u on u.unit = $1`,
      [unit],
    );
    const row = r.rows[0];
    const generation = toSafeInt(row?.generation) ?? 0;
    return { unit, generation, placement: row?.unit ? rowToPlacement(row) : undefined };
  }

  async currentGeneration(): Promise<number> {
    const r = await this.pool.query('select value from shardctl.generation');
    return toSafeInt(r.rows[0]?.value) ?? 0;
  }

  async end(): Promise<void> {
    await this.pool.end().catch(() => {});
  }
}

export interface ListenerHooks {
  /** A parsed announcement, or undefined when the payload was malformed. */
  onNotification(o: UnitObservation | undefined): void;
  /** Called after every successful (re)connect: notifications may have been missed before it. */
  onConnected(): void;
  onDisconnected(err: Error | undefined): void;
}

/** LISTEN on the placement channel on a dedicated connection, reconnecting until stopped. */
export class PlacementListener {
  private client: Client | undefined;
  private stopped = false;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  listening = false;

  constructor(
    private readonly dsn: string,
    private readonly hooks: ListenerHooks,
    private readonly opts: { connectTimeoutMs: number; maxReconnectDelayMs?: number },
  ) {}

  /** Resolves after the first connection attempt, whether it succeeded or not. */
  async start(): Promise<void> {
    await this.connect();
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const client = new Client({
      connectionString: this.dsn,
      connectionTimeoutMillis: this.opts.connectTimeoutMs,
      keepAlive: true,
      application_name: 'shardctl-router-listen',
    });
    let done = false;
    const lost = (err?: Error) => {
      if (done) return;
      done = true;
      this.listening = false;
      if (this.client === client) this.client = undefined;
      client.end().catch(() => {});
      if (this.stopped) return;
      this.hooks.onDisconnected(err);
      this.scheduleReconnect();
    };
    client.on('error', (e) => lost(e));
    client.on('end', () => lost());
    client.on('notification', (msg) => {
      if (msg.channel === PLACEMENT_CHANNEL) this.hooks.onNotification(parsePlacementNotification(msg.payload));
    });
    try {
      await client.connect();
      await client.query(`listen ${PLACEMENT_CHANNEL}`);
    } catch (e) {
      lost(e as Error);
      return;
    }
    if (this.stopped) {
      done = true;
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    this.failures = 0;
    this.listening = true;
    this.hooks.onConnected();
  }

  private scheduleReconnect(): void {
    if (this.stopped || this.timer) return;
    const delay = backoffDelayMs(this.failures++, { baseMs: 100, capMs: this.opts.maxReconnectDelayMs ?? 5000 });
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.connect();
    }, delay);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.listening = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const c = this.client;
    this.client = undefined;
    if (c) await c.end().catch(() => {});
  }
}
