// Moving a split tenant's sub-unit (docs/architecture.md, "Splitting a tenant"): its row predicate
// per table is the fence's own sub-unit expression with K a constant, and the applier keeps only
// the moved sub-unit's changes of a stream filtered on the tenant, failing closed when a change
// cannot say its sub-unit or moves a row between sub-units.
import { describe, it, expect } from 'vitest';
import type { ClientBase } from 'pg';
import { ChangeApplier } from '../../lib/cdc/applier';
import { Relation, UNCHANGED_TOAST } from '../../lib/cdc/pgoutput';
import { subUnitVerdict, type SubUnitStream } from '../../lib/cdc/sub-unit-filter';
import { tenantUnitForRow } from '../../lib/buckets/route';
import { splitIndexSql, subUnitClauseSql } from '../../lib/shard/split-sql';
import { splitRowUnitSql } from '../../lib/shard/fence-sql';
import { unitRows, unitRowPredicateSql, validateUnitName, type UnitRowsConfig } from '../../lib/unit-rows';
import type { TenantTable } from '../../lib/shard/tables';
import { splitIdentityProblems } from '../../lib/shard/sub-unit-move';

const WAYS = 4;
const config: UnitRowsConfig = {
  tenant: { column: 'tenant_id', schemas: ['app'], splitColumns: { 'app.orders': 'order_key' } },
  datasets: [],
};

/** The first `n` keys whose rows fall in sub-unit `k` of tenant `t` split WAYS ways. */
function keysIn(t: string, k: number, n: number): string[] {
  const out: string[] = [];
  const splits = new Map([[t, WAYS]]);
  for (let i = 0; out.length < n; i++) if (tenantUnitForRow(t, `o${i}`, splits) === `${t}:${k}`) out.push(`o${i}`);
  return out;
}

describe("a sub-unit's row predicate", () => {
  it('selects the tenant and the sub-unit index by K and k, for the directory K, with the fence expression itself', () => {
    const rows = unitRows(config, 'acme:1', { ways: WAYS });
    expect(rows).toMatchObject({ kind: 'tenant', column: 'tenant_id', value: 'acme', subUnit: { tenant: 'acme', ways: WAYS, index: 1 } });
    expect(rows.tables.subUnit).toEqual({ ways: WAYS, index: 1, columns: { 'app.orders': 'order_key' } });
    expect(rows.tables.blobIndex).toBeUndefined();
    const table = { schema: 'app', name: 'orders', split: { column: 'order_key', ways: WAYS, index: 1 } } as TenantTable;
    const pred = unitRowPredicateSql(rows, 'x', table);
    expect(pred).toBe(`x."tenant_id" = 'acme' and ${splitIndexSql('x."order_key"', '4')} operator(pg_catalog.=) 1`);
    // The fence's expression is the same index, with K read from the fence instead of a constant.
    expect(splitRowUnitSql('tenant_id', 'order_key')('new')).toContain(splitIndexSql('new."order_key"', 'shardctl.split_ways_of(shardctl.checked_unit())'));
    // A table of no sub-unit move adds nothing; a sub-unit's predicate without its table is refused.
    expect(subUnitClauseSql(undefined, 'x')).toBe('');
    expect(() => unitRowPredicateSql(rows, 'x')).toThrow(/per table/);
  });

  it('refuses a sub-unit beyond K, of an unknown split, or of a sub-unit', () => {
    expect(() => unitRows(config, 'acme:4', { ways: WAYS })).toThrow(/split 4 ways/);
    expect(() => unitRows(config, 'acme:1')).toThrow(/split of acme is not known/);
    expect(() => unitRows(config, 'acme:1:0', { ways: WAYS })).toThrow(/one level/);
    expect(() => validateUnitName('acme:1:0')).toThrow(/one level/);
    expect(validateUnitName('acme:1')).toBe('acme:1');
  });
});

const rel: Relation = {
  relationOid: 7,
  schema: 'app',
  name: 'orders',
  replicaIdentity: 'default',
  columns: [
    { name: 'tenant_id', isKey: true, typeOid: 25, typeMod: -1 },
    { name: 'order_key', isKey: true, typeOid: 25, typeMod: -1 },
    { name: 'v', isKey: false, typeOid: 25, typeMod: -1 },
  ],
};
const stream: SubUnitStream = { unit: 'acme:1', tenant: 'acme', tenantColumn: 'tenant_id', ways: WAYS, columns: { 'app.orders': 'order_key' } };

describe("the applier's sub-unit filter", () => {
  const [mine, mine2] = keysIn('acme', 1, 2);
  const [theirs] = keysIn('acme', 2, 1);

  it('keeps the moved sub-unit and drops the others, by the hash the router and the fence use', () => {
    expect(subUnitVerdict(stream, { tag: 'insert', relation: rel, newTuple: ['acme', mine, 'x'] })).toBe('keep');
    expect(subUnitVerdict(stream, { tag: 'insert', relation: rel, newTuple: ['acme', theirs, 'x'] })).toBe('drop');
    expect(subUnitVerdict(stream, { tag: 'delete', relation: rel, oldKind: 'K', oldTuple: ['acme', theirs, null] })).toBe('drop');
    expect(subUnitVerdict(stream, { tag: 'delete', relation: rel, oldKind: 'K', oldTuple: ['acme', mine, null] })).toBe('keep');
    // A key change within the sub-unit is kept; the split column left unchanged (TOAST) comes from the old key.
    expect(subUnitVerdict(stream, { tag: 'update', relation: rel, oldKind: 'K', oldTuple: ['acme', mine, null], newTuple: ['acme', mine2, 'y'] })).toBe('keep');
    expect(
      subUnitVerdict(stream, { tag: 'update', relation: rel, oldKind: 'K', oldTuple: ['acme', theirs, null], newTuple: ['acme', UNCHANGED_TOAST, 'y'] }),
    ).toBe('drop');
  });

  it('fails closed: a row moved between sub-units, a change without its split column, another tenant, a table with no split column', () => {
    expect(() =>
      subUnitVerdict(stream, { tag: 'update', relation: rel, oldKind: 'K', oldTuple: ['acme', theirs, null], newTuple: ['acme', mine, 'y'] }),
    ).toThrow(/cannot change sub-unit/);
    expect(() =>
      subUnitVerdict(stream, { tag: 'update', relation: rel, oldKind: 'K', oldTuple: ['acme', mine, null], newTuple: ['acme', theirs, 'y'] }),
    ).toThrow(/from acme:1 to acme:2/);
    expect(() => subUnitVerdict(stream, { tag: 'delete', relation: rel, oldKind: 'K', oldTuple: ['acme', null, null] })).toThrow(
      /does not carry its split column/,
    );
    expect(() => subUnitVerdict(stream, { tag: 'update', relation: rel, oldKind: null, oldTuple: null, newTuple: ['acme', UNCHANGED_TOAST, 'y'] })).toThrow(
      /unchanged TOAST/,
    );
    expect(() => subUnitVerdict(stream, { tag: 'insert', relation: rel, newTuple: ['other', mine, 'x'] })).toThrow(/tenant other/);
    expect(() => subUnitVerdict(stream, { tag: 'insert', relation: { ...rel, name: 'lines' }, newTuple: ['acme', mine, 'x'] })).toThrow(/no split column/);
  });

  it("applies only the moved sub-unit: the other sub-units' changes of the tenant never reach the target", async () => {
    const log: { text: string; values?: unknown[] }[] = [];
    const client = {
      async query(q: any, values?: unknown[]) {
        const text: string = typeof q === 'string' ? q : q.text;
        log.push({ text, values: typeof q === 'string' ? values : q.values });
        if (text.includes('to_regclass')) {
          const cols = [
            { name: 'tenant_id', type: 'text', generated: false, identity_always: false, pk_pos: 0 },
            { name: 'order_key', type: 'text', generated: false, identity_always: false, pk_pos: 1 },
            { name: 'v', type: 'text', generated: false, identity_always: false, pk_pos: null },
          ];
          return { rows: [{ oid: '42', cols, independent: false, copyable: true }], rowCount: 1 };
        }
        return { rows: [], rowCount: 1 };
      },
    } as unknown as ClientBase;
    const a = new ChangeApplier(client, 'm1', 'forward', null, 0, undefined, stream);
    await a.begin('0/100');
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', mine, 'a'] });
    await a.apply({ tag: 'insert', relation: rel, newTuple: ['acme', theirs, 'b'] });
    await a.apply({ tag: 'delete', relation: rel, oldKind: 'K', oldTuple: ['acme', theirs, null] });
    await a.commit('0/180');
    await a.commitPending();
    const writes = log.filter((l) => /^(INSERT|UPDATE|DELETE)/.test(l.text));
    expect(writes).toHaveLength(1);
    expect(JSON.stringify(writes[0].values)).toContain(mine);
    expect(JSON.stringify(writes.map((w) => w.values))).not.toContain(theirs);
    expect(a.stats).toMatchObject({ rowsApplied: 1, rowsDropped: 2 });
  });
});

describe("a sub-unit move's replica identity", () => {
  const table = (pk: string[], ri: TenantTable['replicaIdentity']) =>
    ({
      schema: 'app',
      name: 'orders',
      primaryKey: pk,
      replicaIdentity: ri,
      columns: [{ name: 'order_key', type: 'text', generated: false, notNull: true }],
      split: { column: 'order_key', ways: WAYS, index: 1 },
    }) as TenantTable;

  it('requires the split column in the primary key (or REPLICA IDENTITY FULL), so a DELETE says its sub-unit', () => {
    expect(splitIdentityProblems(table(['tenant_id', 'order_key'], 'default'))).toEqual([]);
    expect(splitIdentityProblems(table(['tenant_id', 'id'], 'full'))).toEqual([]);
    expect(splitIdentityProblems(table(['tenant_id', 'id'], 'default'))[0]).toMatch(
      /split column order_key is not in its replica identity \(primary key \(tenant_id, id\)\)/,
    );
    expect(splitIdentityProblems(table(['tenant_id', 'order_key'], 'index'))[0]).toMatch(/REPLICA IDENTITY FULL/);
    expect(splitIdentityProblems({ ...table(['tenant_id'], 'default'), split: undefined })).toEqual([]);
  });

  it('requires the split column NOT NULL: a NULL row is in no sub-unit, so no move would carry it', () => {
    const nullable = { ...table(['tenant_id', 'id'], 'full'), columns: [{ name: 'order_key', type: 'text', generated: false, notNull: false }] };
    expect(splitIdentityProblems(nullable)[0]).toMatch(/split column order_key may be NULL/);
    expect(splitIdentityProblems({ ...nullable, columns: [{ ...nullable.columns[0], notNull: true }] })).toEqual([]);
  });
});
