// Copies all of a unit's tenant tables, parents before children (the order listTenantTables
// returns), each from its own checkpoint; and estimates row counts for status and ETA.
import type { Pool } from 'pg';
import type { TenantTable } from '../shard/tables';
import { quoteIdent } from '../shard/tables';
import { validateTenantId } from '../ids';
import { columnType } from './sql';
import { CopyTableInput, CopyTableResult, copyTenantTable, validateCopyInput } from './table';

export interface CopyTenantInput extends Omit<CopyTableInput, 'table'> {
  /** Parents first (foreign-key order). */
  tables: TenantTable[];
}

export async function copyTenant(input: CopyTenantInput): Promise<{ tables: CopyTableResult[]; rowsCopied: number; done: true }> {
  const { tables, ...rest } = input;
  // Refuse a bad input before touching anything rather than after the first tables.
  for (const table of tables) validateCopyInput({ ...rest, table });
  const out: CopyTableResult[] = [];
  for (const table of tables) out.push(await copyTenantTable({ ...rest, table }));
  return { tables: out, rowsCopied: out.reduce((s, t) => s + t.rowsCopied, 0), done: true };
}

/** The unit's row count in one table (exact; tenant-sized, served by the primary key index). */
export async function estimateRows(source: Pool, table: TenantTable, tenantColumn: string, unit: string): Promise<number> {
  validateTenantId(unit);
  const r = await source.query(
    `select count(*)::bigint as n from ${table.qualified} where ${quoteIdent(tenantColumn)} = $1::${columnType(table, tenantColumn)}`,
    [unit],
  );
  return Number(r.rows[0].n);
}
