// Validation of a live source: a row written between catch-up and the comparison differs for a
// moment without being wrong. A mismatch counts only if it persists, identical, across rounds
// separated by a catch-up; the exact check happens under the fence (fingerprints), where the
// source cannot change. Pure.
import type { TenantValidation, TableValidation } from './compare';

function sigs(t: TableValidation): Map<string, 'missing' | 'extra' | number> {
  const m = new Map<string, 'missing' | 'extra' | number>();
  t.missing.forEach((k) => m.set(`${t.table}|m|${JSON.stringify(k)}`, 'missing'));
  t.extra.forEach((k) => m.set(`${t.table}|x|${JSON.stringify(k)}`, 'extra'));
  t.different.forEach((d, i) => m.set(`${t.table}|d|${JSON.stringify(d.key)}|${d.column}|${d.source}|${d.target}`, i));
  return m;
}

/** Keeps, in `latest`, only the mismatches that `previous` reported identically. */
export function persistentMismatches(previous: TenantValidation, latest: TenantValidation): TenantValidation {
  const prev = new Set(previous.tables.flatMap((t) => [...sigs(t).keys()]));
  const tables = latest.tables.map((t) => {
    const keep = [...sigs(t).entries()].filter(([s]) => prev.has(s));
    const missing = t.missing.filter((k) => prev.has(`${t.table}|m|${JSON.stringify(k)}`));
    const extra = t.extra.filter((k) => prev.has(`${t.table}|x|${JSON.stringify(k)}`));
    const different = t.different.filter((_, i) => keep.some(([, v]) => v === i));
    return { ...t, missing, extra, different, missingCount: missing.length, extraCount: extra.length, differentCount: different.length };
  });
  const ok = tables.every((t) => t.missingCount + t.extraCount + t.differentCount === 0);
  return { ...latest, ok, tables };
}
