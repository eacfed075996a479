import { describe, it, expect } from 'vitest';
import pino from 'pino';
import { isUnreachable, retryDelayMs, untilReachable } from '../../worker/wait';
import { ShardctlError } from '../../lib/errors';

const log = pino({ level: 'silent' });

describe('worker start-up waits', () => {
  it('backs off 1 s, 2 s, 4 s … capped at 30 s', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 50].map((n) => retryDelayMs(n))).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
  });

  it('waits only for servers that are not reachable: a refused socket, the directory, Temporal; not bad credentials or config', () => {
    expect(isUnreachable(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(isUnreachable(new ShardctlError('DirectoryUnavailable', 'placement directory unreachable'))).toBe(true);
    expect(isUnreachable(Object.assign(new Error('tcp connect error'), { name: 'TransportError' }))).toBe(true);
    expect(isUnreachable(Object.assign(new Error('password authentication failed'), { code: '28P01' }))).toBe(false);
    expect(isUnreachable(new ShardctlError('InvalidInput', 'bad'))).toBe(false);
  });

  it('retries until the attempt succeeds, throws what retrying cannot fix, and stops at the signal', async () => {
    let n = 0;
    const refused = () => Object.assign(new Error('refused'), { code: 'ECONNREFUSED' });
    const signal = new AbortController().signal;
    expect(await untilReachable('x', 'a', async () => (++n < 3 ? Promise.reject(refused()) : 'up'), { log, signal, firstDelayMs: 1 })).toBe('up');
    expect(n).toBe(3);
    await expect(untilReachable('x', 'a', async () => Promise.reject(new Error('no such namespace')), { log, signal, firstDelayMs: 1 })).rejects.toThrow(
      'no such namespace',
    );
    const stop = new AbortController();
    const waiting = untilReachable('x', 'a', async () => Promise.reject(refused()), { log, signal: stop.signal, firstDelayMs: 60_000 });
    setTimeout(() => stop.abort(), 10);
    expect(await waiting).toBeUndefined();
  });
});
