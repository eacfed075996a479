import { describe, it, expect } from 'vitest';
import type { TenantTable } from '../../lib/shard/tables';
import { chunkSql, fitsRangeColumns, gapsOf, rangeColumns, rowHashExpression, withEqual } from '../../lib/validate/chunks';
import { keyComparator } from '../../lib/validate/keys';

const tableOf = (cols: [string, string][], primaryKey: string[]): TenantTable => ({
  schema: 's',
  name: 't',
  qualified: '"s"."t"',
  columns: cols.map(([name, type]) => ({ name, type, generated: false, notNull: true })),
  primaryKey,
  replicaIdentity: 'default',
  references: [],
});

describe('chunked validation SQL', () => {
  it('splits only keys led by the tenant column whose other columns are integers or uuids', () => {
    const cols: [string, string][] = [
      ['tenant_id', 'text'],
      ['id', 'bigint'],
      ['u', 'uuid'],
      ['k', 'text'],
      ['n', 'integer'],
    ];
    expect(rangeColumns(tableOf(cols, ['tenant_id', 'id', 'u']), 'tenant_id')?.map((k) => k.name)).toEqual(['id', 'u']);
    expect(rangeColumns(tableOf(cols, ['tenant_id', 'id', 'k']), 'tenant_id')).toBeNull();
    expect(rangeColumns(tableOf(cols, ['id', 'tenant_id']), 'tenant_id')).toBeNull();
    expect(rangeColumns(tableOf(cols, ['tenant_id']), 'tenant_id')).toBeNull();
  });

  it('leaves to compare exactly the keys no equal range covers: (a, b] ranges meeting at each end, open at both ends', () => {
    expect(gapsOf([])).toEqual([{ after: null, upTo: null }]);
    expect(gapsOf([{ after: null, upTo: null }])).toEqual([]);
    expect(gapsOf([{ after: null, upTo: ['10'] }])).toEqual([{ after: ['10'], upTo: null }]);
    expect(
      gapsOf([
        { after: ['10'], upTo: ['20'] },
        { after: ['30'], upTo: null },
      ]),
    ).toEqual([
      { after: null, upTo: ['10'] },
      { after: ['20'], upTo: ['30'] },
    ]);
  });

  it('records a range found equal in key order, merged with the ranges it meets, wherever it falls', () => {
    const cmp = keyComparator([{ name: 'id', type: 'bigint', order: 'int' }]);
    // Compared in order: one range however many chunks.
    let eq = withEqual([], { after: null, upTo: ['10'] }, cmp);
    eq = withEqual(eq, { after: ['10'], upTo: ['20'] }, cmp);
    expect(eq).toEqual([{ after: null, upTo: ['20'] }]);
    // (20, 30] differed and is left out.
    eq = withEqual(eq, { after: ['30'], upTo: ['40'] }, cmp);
    eq = withEqual(eq, { after: ['40'], upTo: null }, cmp);
    expect(eq).toEqual([
      { after: null, upTo: ['20'] },
      { after: ['30'], upTo: null },
    ]);
    expect(gapsOf(eq)).toEqual([{ after: ['20'], upTo: ['30'] }]);
    // A later round finds the gap equal: everything is.
    eq = withEqual(eq, { after: ['20'], upTo: ['30'] }, cmp);
    expect(eq).toEqual([{ after: null, upTo: null }]);
    // A range before every recorded one, by number (100 > 9 only as a number).
    const late = withEqual([{ after: ['100'], upTo: null }], { after: ['9'], upTo: ['50'] }, cmp);
    expect(late).toEqual([
      { after: ['9'], upTo: ['50'] },
      { after: ['100'], upTo: null },
    ]);
    expect(gapsOf(late)).toEqual([
      { after: null, upTo: ['9'] },
      { after: ['50'], upTo: ['100'] },
    ]);
  });

  it('resumes only from ranges shaped like the table key (a record from another key is ignored)', () => {
    const id = { name: 'id', type: 'bigint', order: 'int' as const };
    expect(fitsRangeColumns([{ after: null, upTo: ['1'] }], [id])).toBe(true);
    expect(fitsRangeColumns([{ after: null, upTo: ['1', '2'] }], [id])).toBe(false);
    expect(fitsRangeColumns([{ after: null, upTo: null }], null)).toBe(true);
    expect(fitsRangeColumns([{ after: null, upTo: ['1'] }], null)).toBe(false);
  });

  it('hashes every column by name in byte order, each under its own seed, whatever the catalog order', () => {
    const a = tableOf(
      [
        ['tenant_id', 'text'],
        ['b', 'int'],
        ['a', 'text'],
      ],
      ['tenant_id', 'b'],
    );
    const b = tableOf(
      [
        ['a', 'text'],
        ['tenant_id', 'text'],
        ['b', 'int'],
      ],
      ['tenant_id', 'b'],
    );
    expect(rowHashExpression(a, 'r')).toBe(rowHashExpression(b, 'r'));
    expect(rowHashExpression(a, 'r')).toContain(`hashtextextended((r."a"::text) collate "C", 1), -1)`);
  });

  it('binds the range bounds as parameters cast to the key types', () => {
    const t = tableOf(
      [
        ['tenant_id', 'text'],
        ['id', 'bigint'],
        ['n', 'integer'],
        ['v', 'text'],
      ],
      ['tenant_id', 'id', 'n'],
    );
    const sql = chunkSql(t, 'tenant_id', 'u1', rangeColumns(t, 'tenant_id'));
    const q = sql.hash({ after: ['1', '2'], upTo: ['3', '4'] });
    expect(q.values).toEqual(['u1', '1', '2', '3', '4']);
    expect(q.text).toContain(`(r."id", r."n") > ($2::bigint, $3::integer) and (r."id", r."n") <= ($4::bigint, $5::integer)`);
    expect(sql.boundary(null, 999).text).toContain('order by r."id", r."n" offset 999 limit 1');
  });
});
