// persistentMismatches (lib/validate/settle.ts): validation of a live source counts a mismatch
// only if it persists identically across rounds, and its verdict must still fail on a
// persisting missing row, extra row or differing value — each on its own.
import { describe, it, expect } from 'vitest';
import { persistentMismatches } from '../../lib/validate/settle';
import type { TenantValidation, TableValidation } from '../../lib/validate';

function table(o: Partial<TableValidation> = {}): TableValidation {
  const t = { table: 'public.events', sourceRows: 3, targetRows: 3, missing: [], extra: [], different: [], ...o } as TableValidation;
  return { ...t, missingCount: t.missing.length, extraCount: t.extra.length, differentCount: t.different.length, ...o };
}
const report = (...tables: TableValidation[]): TenantValidation => ({
  unit: 't1',
  tables,
  ok: tables.every((t) => t.missingCount + t.extraCount + t.differentCount === 0),
});
const diff = (target: string) => ({ key: ['t1', '7'], column: 'kind', source: 'a', target });

describe('persistentMismatches', () => {
  it('fails the verdict on a missing row seen in both rounds', () => {
    const r = report(table({ missing: [['t1', '1']] }));
    const out = persistentMismatches(r, r);
    expect(out.ok).toBe(false);
    expect(out.tables[0]).toMatchObject({ missing: [['t1', '1']], missingCount: 1, extraCount: 0, differentCount: 0 });
  });

  it('fails the verdict on an extra row seen in both rounds', () => {
    const r = report(table({ extra: [['t1', '9']] }));
    const out = persistentMismatches(r, r);
    expect(out.ok).toBe(false);
    expect(out.tables[0]).toMatchObject({ extra: [['t1', '9']], extraCount: 1, missingCount: 0, differentCount: 0 });
  });

  it('fails the verdict on a value that differs identically in both rounds', () => {
    const r = report(table({ different: [diff('b')] }));
    const out = persistentMismatches(r, r);
    expect(out.ok).toBe(false);
    expect(out.tables[0].different).toEqual([diff('b')]);
  });

  it('drops what only the latest round saw (a write in flight), and passes', () => {
    const clean = report(table());
    const out = persistentMismatches(clean, report(table({ missing: [['t1', '4']], extra: [['t1', '5']], different: [diff('b')] })));
    expect(out.ok).toBe(true);
    expect(out.tables[0]).toMatchObject({ missing: [], extra: [], different: [], missingCount: 0, extraCount: 0, differentCount: 0 });
  });

  it('drops a difference whose target value changed between rounds (still converging)', () => {
    const out = persistentMismatches(report(table({ different: [diff('b')] })), report(table({ different: [diff('c')] })));
    expect(out.ok).toBe(true);
  });

  it('keeps a mismatch per table: the same key in another table is a different mismatch', () => {
    const prev = report(table({ missing: [['t1', '1']] }), table({ table: 'public.docs' }));
    const out = persistentMismatches(prev, report(table(), table({ table: 'public.docs', missing: [['t1', '1']] })));
    expect(out.ok).toBe(true);
  });
});
