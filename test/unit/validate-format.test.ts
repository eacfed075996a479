import { describe, it, expect } from 'vitest';
import { formatMismatch } from '../../lib/validate/format';
import type { TableValidation } from '../../lib/validate/compare';

const clean = (over: Partial<TableValidation> = {}): TableValidation => ({
  table: 'public.documents',
  sourceRows: 3,
  targetRows: 3,
  missing: [],
  extra: [],
  different: [],
  missingCount: 0,
  extraCount: 0,
  differentCount: 0,
  ...over,
});

describe('formatMismatch', () => {
  it('gives one line per mismatch naming table, key, column and both values', () => {
    const r = clean({
      different: [{ key: ['acme', '1f0e'], column: 'body', source: 'abc…', target: 'abd…' }],
      differentCount: 1,
    });
    expect(formatMismatch(r).split('\n')).toEqual([
      'public.documents: 0 missing on target, 0 extra on target, 1 different values (source 3 rows, target 3 rows)',
      'public.documents key (acme, 1f0e) column body: source "abc…" vs target "abd…"',
    ]);
  });

  it('says which direction a row is out of and shows NULL and control characters unambiguously', () => {
    const r = clean({
      targetRows: 3,
      missing: [['acme', 'm1']],
      extra: [['acme', 'x1']],
      different: [{ key: ['acme', 'k'], column: 'v', source: null, target: 'a\n"b"' }],
      missingCount: 1,
      extraCount: 1,
      differentCount: 7,
    });
    expect(formatMismatch(r).split('\n')).toEqual([
      'public.documents: 1 missing on target, 1 extra on target, 7 different values (source 3 rows, target 3 rows; first 3 shown)',
      'public.documents key (acme, m1) missing on target (present on source)',
      'public.documents key (acme, x1) extra on target (absent on source)',
      'public.documents key (acme, k) column v: source NULL vs target "a\\n\\"b\\""',
    ]);
  });

  it('summarises matching tables of a tenant report in one line each', () => {
    expect(formatMismatch({ ok: true, unit: 'acme', tables: [clean(), clean({ table: 'public.events', sourceRows: 0, targetRows: 0 })] })).toBe(
      'public.documents: 3 rows match\npublic.events: 0 rows match',
    );
  });
});
