// Deletes a unit's rows from one shard in batches: the target's copy on cancel, the source's
// on retire. Children before parents (reverse FK order), because the data-plane role
// (session_replication_role = replica, which also bypasses the fence) disables FK actions too:
// ON DELETE CASCADE would not fire. Each batch is its own short transaction.
import { inTransaction } from '../pg';
import type { Pool } from 'pg';
import type { TenantTable } from '../shard/tables';
import { quoteIdent } from '../shard/tables';
import { subUnitClauseSql } from '../shard/split-sql';
import { validateTenantId } from '../ids';
import { invalidInput } from '../errors';
import { REPLICA_ROLE_SQL, assertCopyable, columnType } from './sql';

export interface DeleteTenantRowsInput {
  pool: Pool;
  /** Parents first, as listTenantTables returns them; deleted in reverse. */
  tables: TenantTable[];
  tenantColumn: string;
  unit: string;
  batchRows: number;
  signal?: AbortSignal;
  onBatch?: (p: { table: string; rowsDeleted: number }) => Promise<void> | void;
}

export async function deleteTenantRows(input: DeleteTenantRowsInput): Promise<{ tables: { table: string; rowsDeleted: number }[]; rowsDeleted: number }> {
  const { pool, tables, tenantColumn, unit, batchRows, signal } = input;
  validateTenantId(unit);
  if (!Number.isInteger(batchRows) || batchRows < 1) throw invalidInput(`batchRows must be a positive integer, got ${batchRows}`);
  for (const t of tables) assertCopyable(t, tenantColumn);

  const out: { table: string; rowsDeleted: number }[] = [];
  for (const table of [...tables].reverse()) {
    const pk = table.primaryKey.map(quoteIdent).join(', ');
    const sql =
      `delete from ${table.qualified} where (${pk}) in (select ${pk} from ${table.qualified}` +
      ` where ${quoteIdent(tenantColumn)} = $1::${columnType(table, tenantColumn)}${subUnitClauseSql(table.split)} limit ${batchRows})`;
    let rowsDeleted = 0;
    for (;;) {
      signal?.throwIfAborted();
      const n = await inTransaction(pool, async (c) => {
        await c.query(REPLICA_ROLE_SQL);
        return (await c.query(sql, [unit])).rowCount ?? 0;
      });
      rowsDeleted += n;
      if (n > 0) await input.onBatch?.({ table: `${table.schema}.${table.name}`, rowsDeleted });
      if (n < batchRows) break;
    }
    out.push({ table: `${table.schema}.${table.name}`, rowsDeleted });
  }
  return { tables: out, rowsDeleted: out.reduce((s, t) => s + t.rowsDeleted, 0) };
}
