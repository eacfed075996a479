// A write is 'refused' only when it certainly did not commit; otherwise it is 'unknown'.
import { describe, it, expect } from 'vitest';
import { classifyFailure, errorTypeOf } from '../../lib/loadgen/classify';
import { ShardctlError } from '../../lib/errors';

const pgError = (code: string, message = 'x') => Object.assign(new Error(message), { code, severity: 'ERROR' });

describe('classifyFailure', () => {
  it('refuses every failure before COMMIT was sent, whatever it is', () => {
    expect(classifyFailure(pgError('SC421'), false)).toBe('refused');
    expect(classifyFailure(new Error('Connection terminated unexpectedly'), false)).toBe('refused');
    expect(classifyFailure(new ShardctlError('Frozen', 'frozen', {}, true), false)).toBe('refused');
  });

  it('calls a connection lost during COMMIT unknown', () => {
    expect(classifyFailure(new Error('Connection terminated unexpectedly'), true)).toBe('unknown');
    expect(classifyFailure(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }), true)).toBe('unknown');
    expect(classifyFailure(pgError('57P01', 'terminating connection due to administrator command'), true)).toBe('unknown');
  });

  it('calls a server-reported rollback at COMMIT refused', () => {
    expect(classifyFailure(pgError('40001'), true)).toBe('refused');
    expect(classifyFailure(pgError('23505'), true)).toBe('refused');
  });
});

describe('errorTypeOf', () => {
  it('names fence refusals, typed errors and connection loss', () => {
    expect(errorTypeOf(pgError('SC421'))).toBe('StaleRoute');
    expect(errorTypeOf(pgError('SC423'))).toBe('Frozen');
    expect(errorTypeOf(new ShardctlError('Forbidden', 'no'))).toBe('Forbidden');
    expect(errorTypeOf(new Error('Connection terminated unexpectedly'))).toBe('ConnectionLost');
    expect(errorTypeOf(pgError('42P01'))).toBe('SQLSTATE_42P01');
    expect(errorTypeOf(new ShardctlError('Conflict', 'gone', { loadgenRowMissing: true }))).toBe('RowMissing');
  });
});
