// Validation and its baseline over the same tenant rows on both shards:
//  - ours: lib/validate's validateTenant (every row, every column, both directions), as the
//    validate activity runs it; it must find the copy exact, or the bench stops;
//  - baseline: `COPY (SELECT <every column> ... WHERE tenant) TO STDOUT` of each table on both
//    shards at once, read and discarded: the cost of just reading both sides.
import type { Pool } from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { STABLE_TEXT_SETTINGS_SQL } from '../lib/copy';
import { validateTenant } from '../lib/validate';
import type { TenantTable } from '../lib/shard/tables';
import { quoteIdent } from '../lib/shard/tables';
import { timed } from './measure';

export interface ScanSample {
  /** Rows per side. */
  rows: number;
  seconds: number;
}

export interface ValidateContext {
  source: Pool;
  target: Pool;
  tables: TenantTable[];
  tenant: string;
  tenantColumn: string;
}

export async function ourValidation(ctx: ValidateContext): Promise<ScanSample> {
  const { value, seconds } = await timed(() =>
    validateTenant({ source: ctx.source, target: ctx.target, tables: ctx.tables, tenantColumn: ctx.tenantColumn, unit: ctx.tenant }),
  );
  if (!value.ok)
    throw new Error(
      `the bench's copy does not validate: ${JSON.stringify(value.tables.map((t) => [t.table, t.missingCount, t.extraCount, t.differentCount]))}`,
    );
  return { rows: value.tables.reduce((s, t) => s + t.sourceRows, 0), seconds };
}

export async function scanBothSides(ctx: ValidateContext): Promise<ScanSample> {
  let rows = 0;
  const { seconds } = await timed(async () => {
    for (const table of ctx.tables) {
      const sql =
        `copy (select ${table.columns.map((c) => quoteIdent(c.name)).join(', ')} from ${table.qualified}` +
        ` where ${quoteIdent(ctx.tenantColumn)} = '${ctx.tenant}') to stdout`;
      const [a] = await Promise.all([scan(ctx.source, sql), scan(ctx.target, sql)]);
      rows += a;
    }
  });
  return { rows, seconds };
}

async function scan(pool: Pool, sql: string): Promise<number> {
  const c = await pool.connect();
  try {
    await c.query('begin isolation level repeatable read read only');
    await c.query(STABLE_TEXT_SETTINGS_SQL);
    const out = c.query(copyTo(sql));
    await pipeline(out, new Writable({ write: (_chunk, _enc, cb) => cb() }));
    await c.query('commit');
    return out.rowCount;
  } finally {
    c.release();
  }
}
