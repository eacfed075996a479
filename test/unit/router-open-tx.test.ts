import { describe, it, expect } from 'vitest';
import { openTransactionSql } from '../../lib/router/open-tx';

describe('openTransactionSql', () => {
  it('opens a write transaction with BEGIN and the route check in one batch', () => {
    expect(openTransactionSql({ unit: 'acme', epoch: 3 }, 'write', undefined)).toBe("begin; call shardctl.open_unit_write('acme', 3)");
    expect(openTransactionSql({ unit: 'acme', epoch: 3 }, 'write', 'repeatable read')).toBe(
      "begin isolation level repeatable read; call shardctl.open_unit_write('acme', 3)",
    );
  });

  it('opens a read read-only, with unit and epoch set and ownership proven', () => {
    expect(openTransactionSql({ unit: 'acme', epoch: 1 }, 'read', 'serializable')).toBe(
      "begin isolation level serializable read only; select set_config('shardctl.unit', 'acme', true), set_config('shardctl.epoch', '1', true), shardctl.assert_readable('acme', 1)",
    );
  });

  it("bounds every statement by the caller's deadline when asked", () => {
    expect(openTransactionSql({ unit: 'acme', epoch: 3 }, 'write', undefined, 1234)).toBe(
      "begin; set local statement_timeout = 1234; call shardctl.open_unit_write('acme', 3)",
    );
    expect(openTransactionSql({ unit: 'acme', epoch: 1 }, 'read', undefined, 50)).toMatch(
      /^begin read only; set local statement_timeout = 50; select set_config/,
    );
    for (const ms of [0, -5, 1.5, Number.NaN])
      expect(() => openTransactionSql({ unit: 'acme', epoch: 1 }, 'write', undefined, ms)).toThrow(/statementTimeoutMs/);
  });

  it('quotes the unit as a literal and refuses an epoch that is not a non-negative integer', () => {
    expect(openTransactionSql({ unit: "o'brien", epoch: 1 }, 'write', undefined)).toBe("begin; call shardctl.open_unit_write('o''brien', 1)");
    for (const epoch of [-1, 1.5, Number.NaN, 2 ** 60]) expect(() => openTransactionSql({ unit: 'acme', epoch }, 'write', undefined)).toThrow(/epoch/);
  });
});
