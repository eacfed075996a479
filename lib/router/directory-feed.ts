// The router's reads of the directory: a small pool for snapshot / per-unit reads. It never
// writes. (Its LISTEN link is lib/directory/listen.ts.) Failures surface as rejected promises.
import { openPool } from '../connections';
import type { Pool } from 'pg';
import { Placement, PlacementState, UnitObservation, toSafeInt } from './snapshot';
import { listShardNames } from '../directory/shards';

export interface DirectorySnapshot {
  placements: Placement[];
  generation: number;
  /** Split tenants: unit → ways (shardctl.splits; empty on a directory without the table). */
  splits: Map<string, number>;
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
    // Hardened: an idle client dying (directory restart) must not crash the process; the next query fails.
    this.pool = openPool(dsn, {
      max: 2,
      connectionTimeoutMillis: opts.connectTimeoutMs,
      queryTimeoutMs: opts.queryTimeoutMs,
      applicationName: 'shardctl-router',
    });
  }

  /** Every placement and the generation, from one consistent (repeatable read) snapshot. */
  async loadSnapshot(): Promise<DirectorySnapshot> {
    const c = await this.pool.connect();
    let broken: Error | undefined;
    try {
      await c.query('begin isolation level repeatable read read only');
      const g = await c.query('select value from shardctl.generation');
      const u = await c.query('select unit, shard, epoch, state from shardctl.units');
      const splits = await this.querySplits(c, undefined);
      await c.query('commit');
      return { generation: toSafeInt(g.rows[0]?.value) ?? 0, placements: u.rows.map(rowToPlacement), splits };
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

  /** How many ways `unit` is split (undefined: it is not). */
  async loadSplit(unit: string): Promise<number | undefined> {
    return (await this.querySplits(this.pool, unit)).get(unit);
  }

  /**
   * Splits, unit → ways (one unit's, or all). A directory not yet migrated has none. A router role
   * without SELECT on the table (granted before splits existed) loads snapshots without them, so
   * unsplit tenants route as before; asking for one unit's split then fails with 42501, which
   * withTenant turns into the grant to add (a split tenant is never routed without its split).
   */
  private async querySplits(db: Pick<Pool, 'query'>, unit: string | undefined): Promise<Map<string, number>> {
    const can = await db.query(
      `select case when to_regclass('shardctl.splits') is null then 'absent'
                   when has_table_privilege('shardctl.splits', 'select') then 'ok' else 'forbidden' end as s`,
    );
    const state = can.rows[0]?.s;
    if (state === 'absent') return new Map();
    if (state === 'forbidden') {
      if (unit === undefined) return new Map();
      throw Object.assign(new Error('permission denied for table shardctl.splits'), { code: '42501' });
    }
    const r = await db.query(`select unit, ways from shardctl.splits where $1::text is null or unit = $1`, [unit ?? null]);
    return new Map(r.rows.map((x: { unit: string; ways: number | string }) => [x.unit, Number(x.ways)]));
  }

  /** The shards inventory (fleet reads ask every one of them). */
  loadShardNames(): Promise<string[]> {
    return listShardNames(this.pool);
  }

  async currentGeneration(): Promise<number> {
    const r = await this.pool.query('select value from shardctl.generation');
    return toSafeInt(r.rows[0]?.value) ?? 0;
  }

  async end(): Promise<void> {
    await this.pool.end().catch(() => {});
  }
}
