// The words the Temporal Web UI shows of a move (lib/moves/web-ui.ts) and the shape of the
// activities' heartbeat details (activities/move/context.ts): pure, no stack.
import { describe, it, expect } from 'vitest';
import { moveCurrentDetails, moveStaticDetails, moveStaticSummary, moveWaitingFor } from '../../lib/moves/web-ui';
import { asyncLocalStorage, Context } from '@temporalio/activity';
import { beat, doing, heartbeatDetails } from '../../activities/move/context';
import { rebalanceStaticSummary } from '../../lib/rebalance/start';
import type { MoveInput, MoveStatus } from '../../workflows/messages';
import { initialStatus } from '../../workflows/move-state';

const input: MoveInput = {
  moveId: '',
  unit: 'acme',
  tenant: 'acme',
  target: 'shard-b',
  soakSeconds: 3600,
  approveCutover: 'manual',
  requestedBy: 'alice',
  lagThresholdMs: 1000,
  fenceBudgetMs: 5000,
  rowsPerSecond: 0,
};

function status(o: Partial<MoveStatus> = {}): MoveStatus {
  return {
    ...initialStatus(input),
    moveId: 'acme.e1.x',
    source: 'shard-a',
    phase: 'copy',
    epoch: 1,
    tables: [
      { table: 'public.accounts', rowsCopied: 100, rowsEstimated: 100, done: true },
      { table: 'public.orders', rowsCopied: 0, rowsEstimated: 300, done: false },
    ],
    phaseTimes: { copy: '2026-12-01T20:00:00.000Z' },
    ...o,
  };
}

describe('Web UI text of a move', () => {
  it('the static summary names tenant, source → target and who started it, on one line', () => {
    expect(moveStaticSummary(input, 'shard-a')).toBe('move acme: shard-a → shard-b, started by alice');
    // Unknown at start (a caller that did not read the directory): says where the source comes from.
    expect(moveStaticSummary(input)).toBe('move acme: (source from the directory) → shard-b, started by alice');
    expect(moveStaticSummary(input, 'shard-a')).not.toContain('\n');
  });

  it('the static details say who started it and through which run', () => {
    const d = moveStaticDetails(input, { source: 'shard-a', via: 'drain run rebalance' });
    expect(d).toContain('**source** shard-a');
    expect(d).toContain('**started by** alice (via drain run rebalance)');
    expect(d).toContain('**cutover approval** manual');
    expect(d).toContain('`shardctl move status acme`');
  });

  it('current details show the phase, copy progress and the table being copied', () => {
    const d = moveCurrentDetails(status());
    expect(d.split('\n')).toEqual([
      '**phase** copy since 2026-12-01T20:00:00.000Z',
      '**route** shard-a → shard-b, epoch 1',
      '**copy** 100/400 rows 25%, 1 of 2 tables',
      '**waiting for** copy of table public.orders',
    ]);
  });

  it('a move waiting for approval says which command moves it on, and its blocked reason', () => {
    const st = status({ phase: 'fence', awaitingApproval: true, blockedReason: 'fence: waiting for operator approval of the cutover' });
    expect(moveWaitingFor(st)).toBe('operator approval of the cutover: `shardctl move approve acme` (or `move cancel acme`)');
    const d = moveCurrentDetails(st);
    expect(d).toContain('**blocked** fence: waiting for operator approval of the cutover');
    expect(d).toContain('**lag** 0 bytes (0 s)');
  });

  it('a validation mismatch waits for an operator to fix and resume, or cancel', () => {
    const st = status({ phase: 'validate', paused: true, blockedReason: 'validate: public.orders key (acme,1): column total: source "1" vs target "2"' });
    expect(moveWaitingFor(st)).toMatch(/fix the mismatch, then `shardctl move resume acme`/);
    expect(moveCurrentDetails(st)).toMatch(/^\*\*phase\*\* validate \(paused\)/);
  });

  it('a transient failure shows as blocked, retried with backoff; a cleared one leaves its last error', () => {
    expect(moveWaitingFor(status({ phase: 'catchup', blockedReason: 'catch-up: lag 4.2 s > 1 s' }))).toMatch(/retried with backoff/);
    expect(moveCurrentDetails(status({ phase: 'catchup', lastError: 'catch-up: connection reset' }))).toContain('**last error** catch-up: connection reset');
  });

  it('a rebalance run is summarised by its scope and operator', () => {
    expect(rebalanceStaticSummary({ scope: { kind: 'drain', shard: 'shard-c' }, requestedBy: 'bob' })).toBe('drain shard-c, started by bob');
    expect(rebalanceStaticSummary({ scope: { kind: 'isolate', tenant: 'acme' }, requestedBy: 'bob' })).toBe('isolate acme, started by bob');
    expect(rebalanceStaticSummary({ scope: { kind: 'rebalance' }, requestedBy: 'bob' })).toBe('rebalance the fleet, started by bob');
  });
});

describe('activity heartbeat details', () => {
  it('carry what the activity does next to its latest progress', () => {
    expect(heartbeatDetails({ doing: 'copy table public.orders shard-a → shard-b' })).toEqual({ doing: 'copy table public.orders shard-a → shard-b' });
    expect(heartbeatDetails({ doing: 'copy table public.orders shard-a → shard-b', details: { table: 'public.orders', rowsCopied: 40 } })).toEqual({
      doing: 'copy table public.orders shard-a → shard-b',
      table: 'public.orders',
      rowsCopied: 40,
    });
    expect(heartbeatDetails({ doing: 'x', details: 3 })).toEqual({ doing: 'x', details: 3 });
    expect(heartbeatDetails({ details: { round: 1 } })).toEqual({ round: 1 });
  });
});

describe('beat() inside an activity', () => {
  /** Runs `fn` in a real activity Context whose heartbeats are recorded instead of sent to a worker. */
  function inActivity(fn: () => void): unknown[] {
    const sent: unknown[] = [];
    const noop = () => undefined;
    const log = { trace: noop, debug: noop, info: noop, warn: noop, error: noop, log: noop };
    const ctx = new Context(
      {} as never,
      new Promise<never>(noop),
      new AbortController().signal,
      (d) => sent.push(d),
      undefined,
      log as never,
      {} as never,
      {} as never,
    );
    asyncLocalStorage.run(ctx, fn);
    return sent;
  }

  it("a beat without details (the one-second timer's) repeats the last progress instead of wiping it", () => {
    const sent = inActivity(() => {
      doing('copy table public.orders shard-a → shard-b');
      beat();
      beat({ table: 'public.orders', rowsCopied: 40 });
      beat();
      beat();
    });
    const progress = { doing: 'copy table public.orders shard-a → shard-b', table: 'public.orders', rowsCopied: 40 };
    expect(sent).toEqual([{ doing: 'copy table public.orders shard-a → shard-b' }, progress, progress, progress]);
  });

  it('a new step (doing) starts from no progress', () => {
    const sent = inActivity(() => {
      beat({ round: 1 });
      doing('compare blobs');
      beat();
    });
    expect(sent).toEqual([{ round: 1 }, { doing: 'compare blobs' }]);
  });
});
