// The pure parts of the worker's logs and metrics: secret scrubbing, the move context of an
// activity line, the bounded abort-reason label, the listen address, failure counting.
import { describe, it, expect } from 'vitest';
import { Writable } from 'node:stream';
import { createLogger, logFormatFrom, logLevelFrom } from '../../lib/obs/log';
import { createMetrics, cutoverAbortReason, parseListenAddr } from '../../lib/obs/metrics';
import { activityInterceptor, moveContextOf, temporalLogger } from '../../worker/instrument';
import { parseConfig, type Config } from '../../lib/config';

const config: Config = parseConfig({
  temporal: { address: '127.0.0.1:1' },
  directory: { dsn: 'postgres://dir:dir-pw-123@db.example:5432/shardctl' },
  shards: [{ name: 'shard-a', dsn: 'postgres://app:p%40ss-word@a.example/shardctl', bucket: 'bkt-a' }],
  s3: { accessKeyId: 'AKIA', secretAccessKey: 's3-secret-xyz' },
});

function capture() {
  const lines: any[] = [];
  const raw: string[] = [];
  const dest = new Writable({
    write(chunk, _enc, cb) {
      raw.push(String(chunk));
      for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
      cb();
    },
  });
  return { log: createLogger(config, { level: 'debug', destination: dest }), lines, raw };
}

describe('logs', () => {
  it('scrub every DSN password, whole DSNs and the S3 secret from messages and fields', () => {
    const { log, raw } = capture();
    log.error(
      { dsn: config.shards[0].dsn, detail: 'secret s3-secret-xyz' },
      `connect to postgres://dir:dir-pw-123@db.example:5432/shardctl failed; password=hunter2`,
    );
    log.info({ other: 'postgres://x:unknown-pw@h/db' }, 'p@ss-word');
    const text = raw.join('');
    for (const s of ['dir-pw-123', 'p%40ss-word', 'p@ss-word', 's3-secret-xyz', 'hunter2', 'unknown-pw']) expect(text).not.toContain(s);
    expect(text).toContain('***');
  });

  it('reads the level from SHARDCTL_LOG_LEVEL and refuses an unknown one', () => {
    expect(logLevelFrom(undefined, 'info')).toBe('info');
    expect(logLevelFrom('DEBUG', 'info')).toBe('debug');
    expect(() => logLevelFrom('loud', 'info')).toThrow(/SHARDCTL_LOG_LEVEL=loud/);
  });

  it('picks human lines on a terminal and JSON when piped, and refuses an unknown SHARDCTL_LOG_FORMAT', () => {
    expect(logFormatFrom(undefined, true)).toBe('pretty');
    expect(logFormatFrom(undefined, false)).toBe('json');
    expect(logFormatFrom('auto', false)).toBe('json');
    expect(logFormatFrom('JSON', true)).toBe('json');
    expect(logFormatFrom('pretty', false)).toBe('pretty');
    expect(() => logFormatFrom('xml', true)).toThrow(/SHARDCTL_LOG_FORMAT=xml/);
  });

  it("a human line carries the move's context, its fields and its message on one line, scrubbed of secrets", () => {
    const raw: string[] = [];
    const dest = new Writable({
      write(chunk, _enc, cb) {
        raw.push(String(chunk));
        cb();
      },
    });
    const log = createLogger(config, { level: 'debug', destination: dest as any, format: 'pretty', base: { taskQueue: 'q' } });
    const child = log.child({ moveId: 'm.e1.ab', unit: 'acme', phase: 'copy', activity: 'copyTable', attempt: 2, workflowId: 'move-acme' });
    child.info({ rows: 100, table: 'orders' }, 'copy batch committed');
    child.warn({ errType: 'X', err: `connect to ${config.directory.dsn} failed` }, 'activity failed');
    log.info('worker polling');
    const lines = raw
      .join('')
      // eslint-disable-next-line no-control-regex
      .replace(/\x1b\[[0-9;]*m/g, '')
      .split('\n')
      .filter(Boolean);
    expect(lines, lines.join('\n')).toHaveLength(3);
    expect(lines[0]).toMatch(
      /^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] INFO: move=m\.e1\.ab unit=acme phase=copy activity=copyTable attempt=2 copy batch committed \{"rows":100,"table":"orders"\}$/,
    );
    expect(lines[1]).toMatch(
      /WARN: move=m\.e1\.ab unit=acme phase=copy activity=copyTable attempt=2 activity failed err=connect to .*\*\*\*.* failed \{"errType":"X"\}$/,
    );
    expect(lines[1]).not.toContain('dir-pw-123');
    expect(lines[2]).toMatch(/INFO: worker polling$/);
    expect(lines.some((l) => l.startsWith('{'))).toBe(false);
  });

  it("takes the move's context from an activity's input", () => {
    expect(moveContextOf('catchUp', { moveId: 'm.e1.ab', unit: 'acme', source: 'a', target: 'b', phase: 'fence', direction: 'forward' })).toEqual({
      moveId: 'm.e1.ab',
      unit: 'acme',
      phase: 'fence',
      direction: 'forward',
    });
    expect(moveContextOf('planMove', { unit: 'acme', target: 'b' })).toEqual({ moveId: null, unit: 'acme', phase: 'plan' });
    expect(moveContextOf('x', undefined)).toEqual({ moveId: null, unit: null, phase: null });
  });

  it('an activity that fails logs a warning with its context and counts the failure by type', async () => {
    const { log, lines } = capture();
    const metrics = createMetrics({ processMetrics: false });
    const ctx = { info: { activityType: 'copyTable', attempt: 3, workflowExecution: { workflowId: 'move-acme', runId: 'r' } } } as any;
    const inbound = activityInterceptor(log, metrics)(ctx).inbound!;
    const failing = Object.assign(new Error('boom'), { type: 'PreconditionFailed' });
    await expect(inbound.execute!({ args: [{ moveId: 'm', unit: 'acme', phase: 'copy' }], headers: {} }, async () => Promise.reject(failing))).rejects.toBe(
      failing,
    );
    const text = await metrics.registry.metrics();
    expect(text).toContain('shardctl_activity_failures_total{activity="copyTable",type="PreconditionFailed"} 1');
    expect(lines.at(-1)).toMatchObject({
      level: 'warn',
      msg: 'activity failed',
      activity: 'copyTable',
      attempt: 3,
      unit: 'acme',
      moveId: 'm',
      phase: 'copy',
      errType: 'PreconditionFailed',
    });
  });

  it("passes workflow lines from INFO, the SDK's from its own level, and drops the SDK's activity lines", () => {
    const { log, lines } = capture();
    const t = temporalLogger(() => log, 'WARN');
    t.info('move phase', { sdkComponent: 'workflow', phase: 'copy' });
    t.info('worker state', { sdkComponent: 'worker' });
    t.warn('Activity failed', { sdkComponent: 'activity' });
    t.error('core broke', { sdkComponent: 'core' });
    expect(lines.map((l) => l.msg)).toEqual(['move phase', 'core broke']);
  });
});

describe('metrics', () => {
  it("labels a cutover abort with one of a few reasons, from the cutover's own wording", () => {
    expect(cutoverAbortReason('fence took longer than its budget of 2000 ms; unfenced, will retry')).toBe('budget');
    expect(cutoverAbortReason('final catch-up did not reach 0/1 within the fence budget of 2000 ms')).toBe('budget');
    expect(cutoverAbortReason('target differs from source at the fence: public.events rows 3 vs 2')).toBe('mismatch');
    expect(cutoverAbortReason('lost the race to freeze acme (another attempt froze or took it over): {}')).toBe('lost-freeze');
    expect(cutoverAbortReason('compare failed inside the frozen window: budget exceeded; unfrozen, will retry')).toBe('error');
    expect(cutoverAbortReason('in-flight writers of acme held the fence lock longer than the budget of 150 ms (pid 7 active, open 900 ms)')).toBe('fence-lock');
    expect(
      cutoverAbortReason(
        'in-flight writers of acme held the fence lock longer than the budget of 150 ms; and the directory changed under the move (left frozen, fail closed)',
      ),
    ).toBe('lost-freeze');
    expect(cutoverAbortReason('something new')).toBe('other');
  });

  it('parses listen addresses and refuses bad ones', () => {
    expect(parseListenAddr(':9464')).toEqual({ host: undefined, port: 9464 });
    expect(parseListenAddr('9464')).toEqual({ host: undefined, port: 9464 });
    expect(parseListenAddr('127.0.0.1:0')).toEqual({ host: '127.0.0.1', port: 0 });
    expect(parseListenAddr('[::1]:9464')).toEqual({ host: '::1', port: 9464 });
    expect(() => parseListenAddr('localhost')).toThrow(/invalid metrics address/);
    expect(() => parseListenAddr(':99999')).toThrow(/invalid metrics address/);
  });

  it('drops a per-move series once it is stale or its move is forgotten', async () => {
    const m = createMetrics({ processMetrics: false, staleAfterMs: 50 });
    m.lagBytes.set({ unit: 'a', move_id: 'a.e1.x', direction: 'forward' }, 10);
    m.lagBytes.set({ unit: 'b', move_id: 'b.e1.x', direction: 'forward' }, 20);
    m.forgetMove('a', [m.lagBytes]);
    let text = await m.registry.metrics();
    expect(text).not.toContain('unit="a"');
    expect(text).toContain('shardctl_move_lag_bytes{unit="b",move_id="b.e1.x",direction="forward"} 20');
    await new Promise((r) => setTimeout(r, 80));
    m.prune();
    text = await m.registry.metrics();
    expect(text).not.toContain('unit="b"');
  });
});
