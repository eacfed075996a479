// The summary line `npm test` ends with: anything short of a complete, clean run is a failure.
import { describe, it, expect } from 'vitest';
import { summarize, summaryLine, VitestJsonReport, StepResult } from '../../scripts/test-summary';

function report(o: Partial<VitestJsonReport> = {}): VitestJsonReport {
  return {
    numTotalTests: 3,
    numPassedTests: 3,
    numFailedTests: 0,
    numPendingTests: 0,
    numTodoTests: 0,
    success: true,
    testResults: [{ name: 'a.test.ts', status: 'passed', message: '', assertionResults: [{ status: 'passed' }, { status: 'passed' }, { status: 'passed' }] }],
    ...o,
  };
}
const clean = { reason: 'passed', unhandledErrors: [] };
const vitestStep = (json: VitestJsonReport | null, runEnd: any = clean, exitCode = 0): StepResult => ({ name: 'main', exitCode, vitest: { json, runEnd } });

describe('test summary', () => {
  it('a clean run reads as all passed', () => {
    const s = summarize([{ name: 'typecheck', exitCode: 0 }, vitestStep(report())]);
    expect(summaryLine(s)).toBe('3 passed, 0 failed');
    expect(s.problems).toEqual([]);
  });

  it('a run that wrote no JSON report counts as a failure', () => {
    const s = summarize([vitestStep(report()), { name: 'crash', exitCode: 137, vitest: { json: null, runEnd: null } }]);
    expect(s.failed).toBe(1);
    expect(s.problems[0]).toMatch(/crash: vitest wrote no JSON report \(exit 137\)/);
    expect(summaryLine(s)).toBe('3 passed, 1 failed');
  });

  it('success:false with no failed test counts as a failure', () => {
    const s = summarize([vitestStep(report({ success: false }), { reason: 'failed', unhandledErrors: [] }, 1)]);
    expect(s.failed).toBe(1);
    expect(s.problems[0]).toMatch(/failed with no failed test \(success=false/);
  });

  it('each unhandled error counts as a failure even when every test passed', () => {
    const runEnd = { reason: 'failed', unhandledErrors: [{ message: 'ECONNRESET\n at x' }, { message: 'boom' }] };
    const s = summarize([vitestStep(report(), runEnd, 1)]);
    expect(s.failed).toBe(2);
    expect(s.problems).toEqual(['main: unhandled error: ECONNRESET', 'main: unhandled error: boom']);
  });

  it('a missing run-end report counts as a failure (unhandled errors unknown)', () => {
    const s = summarize([vitestStep(report(), null)]);
    expect(s.failed).toBe(1);
    expect(s.problems[0]).toMatch(/no run-end report/);
  });

  it('a non-zero exit after clean reports (a teardown error) counts as a failure', () => {
    const s = summarize([vitestStep(report(), clean, 1)]);
    expect(s.failed).toBe(1);
    expect(s.problems[0]).toMatch(/exit 1/);
  });

  it('an interrupted run counts as a failure', () => {
    const s = summarize([vitestStep(report(), { reason: 'interrupted', unhandledErrors: [] }, 130)]);
    expect(s.failed).toBeGreaterThanOrEqual(1);
    expect(s.problems.join('\n')).toMatch(/interrupted/);
  });

  it('a file that failed to load counts once, beside its failed tests elsewhere', () => {
    const json = report({
      numTotalTests: 2,
      numPassedTests: 1,
      numFailedTests: 1,
      success: false,
      testResults: [
        { name: 'broken.test.ts', status: 'failed', message: 'Cannot find module x', assertionResults: [] },
        { name: 'b.test.ts', status: 'failed', message: '', assertionResults: [{ status: 'passed' }, { status: 'failed' }] },
      ],
    });
    const s = summarize([vitestStep(json, { reason: 'failed', unhandledErrors: [] }, 1)]);
    expect(s.failed).toBe(2);
    expect(s.problems).toEqual(['main: broken.test.ts failed outside any test: Cannot find module x']);
  });

  it('skipped and todo tests are shown', () => {
    const s = summarize([vitestStep(report({ numTotalTests: 5, numPassedTests: 3, numPendingTests: 1, numTodoTests: 1 }))]);
    expect(summaryLine(s)).toBe('3 passed, 0 failed, 2 skipped');
  });

  it('a run with no test at all, or no step at all, is a failure', () => {
    expect(summarize([vitestStep(report({ numTotalTests: 0, numPassedTests: 0, testResults: [] }))]).failed).toBe(1);
    expect(summarize([]).failed).toBe(1);
  });

  it('a failed plain step (the typecheck) counts as a failure', () => {
    const s = summarize([{ name: 'typecheck', exitCode: 2 }, vitestStep(report())]);
    expect(summaryLine(s)).toBe('3 passed, 1 failed');
    expect(s.problems).toEqual(['typecheck: exited 2']);
  });
});
