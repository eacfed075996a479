import { describe, it, expect } from 'vitest';
import type { TenantTable } from '../../lib/shard/tables';
import { chunkSql, rangeColumns, rangesFrom, rowHashExpression } from '../../lib/validate/chunks';

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

  it('covers every key with ranges (a, b] that meet at each boundary, open at both ends', () => {
    expect(rangesFrom([])).toEqual([{ after: null, upTo: null }]);
    expect(rangesFrom([['10'], ['20']])).toEqual([
      { after: null, upTo: ['10'] },
      { after: ['10'], upTo: ['20'] },
      { after: ['20'], upTo: null },
    ]);
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
