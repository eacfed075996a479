// Operator-facing lines for a validation report: one precise line per mismatch (table, key,
// column, both values), so a blocked move says exactly what differs. Pure.
import type { Key } from './merge';
import type { TableValidation, TenantValidation } from './compare';

export function formatKey(key: Key): string {
  return `(${key.join(', ')})`;
}

export function formatValue(v: string | null): string {
  return v === null ? 'NULL' : JSON.stringify(v);
}

function tableLines(r: TableValidation): string[] {
  const out: string[] = [];
  const shown = r.missing.length + r.extra.length + r.different.length;
  const total = r.missingCount + r.extraCount + r.differentCount;
  if (total === 0) return [`${r.table}: ${r.sourceRows} rows match`];
  out.push(
    `${r.table}: ${r.missingCount} missing on target, ${r.extraCount} extra on target, ${r.differentCount} different values` +
      ` (source ${r.sourceRows} rows, target ${r.targetRows} rows${shown < total ? `; first ${shown} shown` : ''})`,
  );
  for (const k of r.missing) out.push(`${r.table} key ${formatKey(k)} missing on target (present on source)`);
  for (const k of r.extra) out.push(`${r.table} key ${formatKey(k)} extra on target (absent on source)`);
  for (const d of r.different) {
    out.push(`${r.table} key ${formatKey(d.key)} column ${d.column}: source ${formatValue(d.source)} vs target ${formatValue(d.target)}`);
  }
  return out;
}

/** Human lines for one table's report or a whole tenant's; matching tables get one summary line. */
export function formatMismatch(report: TableValidation | TenantValidation): string {
  const tables = 'tables' in report ? report.tables : [report];
  return tables.flatMap(tableLines).join('\n');
}
