import { describe, it, expect } from 'vitest';
import { openTransactionSql } from '../../lib/router/open-tx';

describe('openTransactionSql', () => {
  it('opens a write transaction with BEGIN and the route check in one batch', () => {
    expect(openTransactionSql({ unit: 'acme', epoch: 3 }, 'write', undefined)).toBe("begin; select shardctl.begin_unit_write('acme', 3)");
    expect(openTransactionSql({ unit: 'acme', epoch: 3 }, 'write', 'repeatable read')).toBe(
      "begin isolation level repeatable read; select shardctl.begin_unit_write('acme', 3)",
    );
  });

  it('opens a read read-only, with unit and epoch set and ownership proven', () => {
    expect(openTransactionSql({ unit: 'acme', epoch: 1 }, 'read', 'serializable')).toBe(
      "begin isolation level serializable read only; select set_config('shardctl.unit', 'acme', true), set_config('shardctl.epoch', '1', true), shardctl.assert_readable('acme', 1)",
    );
  });

  it('quotes the unit as a literal and refuses an epoch that is not a non-negative integer', () => {
    expect(openTransactionSql({ unit: "o'brien", epoch: 1 }, 'write', undefined)).toBe("begin; select shardctl.begin_unit_write('o''brien', 1)");
    for (const epoch of [-1, 1.5, Number.NaN, 2 ** 60]) expect(() => openTransactionSql({ unit: 'acme', epoch }, 'write', undefined)).toThrow(/epoch/);
  });
});
