import { describe, it, expect } from 'vitest';
import { createPublicationSql, quoteIdent, quoteLiteral, validateReplicationName } from '../../lib/cdc/sql';
import { bindRelation, deleteSql, existsSql, settable, TargetTable, updateSql, upsertManySql, upsertSql } from '../../lib/cdc/statements';

describe('quoting', () => {
  it('quotes identifiers and literals so no input can end them', () => {
    expect(quoteIdent('MixedCase')).toBe('"MixedCase"');
    expect(quoteIdent('a"b')).toBe('"a""b"');
    expect(quoteLiteral("it's")).toBe("'it''s'");
    expect(quoteLiteral('a\\b')).toBe("E'a\\\\b'");
    expect(() => quoteIdent('')).toThrow();
    expect(() => quoteLiteral('a\0b')).toThrow();
  });

  it('accepts only derived slot and publication names', () => {
    expect(validateReplicationName('slot', 'shardctl_f_move_acme')).toBe('shardctl_f_move_acme');
    for (const bad of ['', 'Upper', 'a-b', 'x'.repeat(64), "a'b"]) expect(() => validateReplicationName('slot', bad)).toThrow(/invalid slot name/);
  });

  it('builds a row-filtered publication of all four operations', () => {
    const sql = createPublicationSql(
      'shardctl_f_m',
      [
        { schema: 'public', name: 'Orders' },
        { schema: 'app', name: 'items' },
      ],
      'tenant_id',
      'acme',
    );
    expect(sql).toBe(
      `CREATE PUBLICATION "shardctl_f_m" FOR TABLE "public"."Orders" WHERE ("tenant_id" = 'acme'), "app"."items" WHERE ("tenant_id" = 'acme') WITH (publish = 'insert, update, delete, truncate', publish_via_partition_root = true)`,
    );
  });
});

const table: TargetTable = {
  schema: 'public',
  name: 't',
  primaryKey: ['tenant_id', 'id'],
  columns: [
    { name: 'tenant_id', type: 'text', generated: false, identityAlways: false },
    { name: 'id', type: 'bigint', generated: false, identityAlways: false },
    { name: 'Amount', type: 'numeric(12,2)', generated: false, identityAlways: false },
    { name: 'mood', type: 'public.mood', generated: false, identityAlways: false },
    { name: 'double_id', type: 'bigint', generated: true, identityAlways: false },
    { name: 'target_only', type: 'text', generated: false, identityAlways: false },
  ],
};
const source = { schema: 'public', name: 't', columns: [{ name: 'tenant_id' }, { name: 'id' }, { name: 'Amount' }, { name: 'mood' }] };

describe('apply statements', () => {
  it('writes only source columns that are not generated, cast to the target types', () => {
    const plan = bindRelation(source, table);
    expect(plan.writable.map((c) => c.name)).toEqual(['tenant_id', 'id', 'Amount', 'mood']);
    expect(upsertSql(plan, plan.writable)).toBe(
      'INSERT INTO "public"."t" ("tenant_id", "id", "Amount", "mood") VALUES ($1::text, $2::bigint, $3::numeric(12,2), $4::public.mood) ' +
        'ON CONFLICT ("tenant_id", "id") DO UPDATE SET "Amount" = EXCLUDED."Amount", "mood" = EXCLUDED."mood"',
    );
  });

  it('never writes a generated column even if the source publishes it', () => {
    const plan = bindRelation({ ...source, columns: [...source.columns, { name: 'double_id' }] }, table);
    expect(plan.writable.map((c) => c.name)).not.toContain('double_id');
  });

  it('addresses rows by the primary key, parameters after the SET values', () => {
    const plan = bindRelation(source, table);
    const amount = plan.writable.filter((c) => c.name === 'Amount');
    expect(updateSql(plan, amount)).toBe('UPDATE "public"."t" SET "Amount" = $1::numeric(12,2) WHERE "tenant_id" = $2::text AND "id" = $3::bigint');
    expect(deleteSql(plan)).toBe('DELETE FROM "public"."t" WHERE "tenant_id" = $1::text AND "id" = $2::bigint');
    expect(existsSql(plan)).toBe('SELECT 1 FROM "public"."t" WHERE "tenant_id" = $1::text AND "id" = $2::bigint');
  });

  it('batches many rows through one text[] parameter per column, cast element-wise', () => {
    const plan = bindRelation(source, table);
    expect(upsertManySql(plan, plan.writable)).toBe(
      'INSERT INTO "public"."t" ("tenant_id", "id", "Amount", "mood") SELECT u.c1::text, u.c2::bigint, u.c3::numeric(12,2), u.c4::public.mood ' +
        'FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(c1, c2, c3, c4) ' +
        'ON CONFLICT ("tenant_id", "id") DO UPDATE SET "Amount" = EXCLUDED."Amount", "mood" = EXCLUDED."mood"',
    );
  });

  it('does nothing on conflict when every column is part of the key', () => {
    const plan = bindRelation({ schema: 'public', name: 't', columns: [{ name: 'tenant_id' }, { name: 'id' }] }, table);
    expect(upsertSql(plan, plan.writable)).toMatch(/ON CONFLICT \("tenant_id", "id"\) DO NOTHING$/);
  });

  it('overrides identity-always values on insert and never SETs them', () => {
    const t: TargetTable = { ...table, columns: table.columns.map((c) => (c.name === 'id' ? { ...c, identityAlways: true } : c)) };
    const plan = bindRelation(source, t);
    expect(upsertSql(plan, plan.writable)).toContain('OVERRIDING SYSTEM VALUE VALUES');
    expect(settable(plan.writable).map((c) => c.name)).not.toContain('id');
  });

  it('refuses a source column missing on the target and a table without a primary key', () => {
    expect(() => bindRelation({ ...source, columns: [...source.columns, { name: 'extra' }] }, table)).toThrow(/column extra .* not on the target/);
    expect(() => bindRelation(source, { ...table, primaryKey: [] })).toThrow(/no primary key/);
  });
});
