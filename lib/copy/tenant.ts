// Copies all of a unit's tenant tables, COPY_TABLE_LANES at a time in the order listTenantTables
// returns (parents first), each from its own checkpoint; and estimates row counts for status and ETA.
import type { Pool } from 'pg';
import type { TenantTable } from '../shard/tables';
import { quoteIdent } from '../shard/tables';
import { subUnitClauseSql } from '../shard/split-sql';
import { validateTenantId } from '../ids';
import { columnType } from './sql';
import { CopyTableInput, CopyTableResult, copyTenantTable, validateCopyInput } from './table';
import { COPY_TABLE_LANES, inLanes } from './lanes';

export interface CopyTenantInput extends Omit<CopyTableInput, 'table'> {
  /** Parents first (foreign-key order); results come back in this order. */
  tables: TenantTable[];
  /** Tables copied at once (default COPY_TABLE_LANES; 1 when throttled). */
  lanes?: number;
}

export async function copyTenant(input: CopyTenantInput): Promise<{ tables: CopyTableResult[]; rowsCopied: number; done: true }> {
  const { tables, lanes, ...rest } = input;
  // Refuse a bad input before touching anything rather than after the first tables.
  for (const table of tables) validateCopyInput({ ...rest, table });
  const out: CopyTableResult[] = new Array(tables.length);
  await inLanes([...tables.keys()], rest.rowsPerSecond ? 1 : (lanes ?? COPY_TABLE_LANES), async (i) => {
    out[i] = await copyTenantTable({ ...rest, table: tables[i] });
  });
  return { tables: out, rowsCopied: out.reduce((s, t) => s + t.rowsCopied, 0), done: true };
}

/** The unit's row count in one table (exact; tenant-sized, served by the primary key index). */
export async function estimateRows(source: Pool, table: TenantTable, tenantColumn: string, unit: string): Promise<number> {
  validateTenantId(unit);
  const r = await source.query(
    `select count(*)::bigint as n from ${table.qualified} where ${quoteIdent(tenantColumn)} = $1::${columnType(table, tenantColumn)}${subUnitClauseSql(table.split)}`,
    [unit],
  );
  return Number(r.rows[0].n);
}
