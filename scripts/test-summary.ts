// The one line `npm test` ends with ("N passed, N failed, N skipped") and the reasons behind
// every failure that is not a failed test. `summarize` is pure: it judges parsed reports (the
// CLI at the bottom reads the files). Anything short of a complete, clean run counts as a failure:
// a step that exited non-zero, a run that wrote no report, `success: false`, unhandled errors,
// a file that failed to load, a run that was interrupted.
import fs from 'node:fs';

/** The parts of vitest's JSON report this judges (vitest 3 `--reporter=json`). */
export interface VitestJsonReport {
  numTotalTests: number;
  numPassedTests: number;
  numFailedTests: number;
  numPendingTests?: number;
  numTodoTests?: number;
  success: boolean;
  testResults?: { name: string; status: string; message?: string; assertionResults: { status: string }[] }[];
}

/** What scripts/run-end-reporter.ts writes: what the JSON reporter leaves out. */
export interface RunEndReport {
  reason: 'passed' | 'failed' | 'interrupted' | string;
  unhandledErrors: { message: string }[];
}

/** One step of the run: a vitest run (with its reports, null when missing) or a plain command. */
export interface StepResult {
  name: string;
  exitCode: number;
  /** Only for vitest runs; undefined for a plain command such as the typecheck. */
  vitest?: { json: VitestJsonReport | null; runEnd: RunEndReport | null };
}

export interface Summary {
  passed: number;
  failed: number;
  skipped: number;
  /** Each failure that is not a failed test, for a human to read before the last line. */
  problems: string[];
}

export function summarize(steps: StepResult[]): Summary {
  const s: Summary = { passed: 0, failed: 0, skipped: 0, problems: [] };
  const problem = (msg: string) => {
    s.failed += 1;
    s.problems.push(msg);
  };
  if (steps.length === 0) problem('no step ran');
  for (const step of steps) {
    if (!step.vitest) {
      if (step.exitCode !== 0) problem(`${step.name}: exited ${step.exitCode}`);
      continue;
    }
    const before = s.failed;
    const { json, runEnd } = step.vitest;
    if (!json) {
      problem(`${step.name}: vitest wrote no JSON report (exit ${step.exitCode}); the run died`);
      continue;
    }
    s.passed += json.numPassedTests;
    s.failed += json.numFailedTests;
    s.skipped += (json.numPendingTests ?? 0) + (json.numTodoTests ?? 0);
    if (json.numTotalTests === 0) problem(`${step.name}: no test ran`);
    for (const f of json.testResults ?? []) {
      // A file that failed to load (or whose hooks failed) has no failed test in it but still failed.
      if (f.status === 'failed' && !f.assertionResults.some((a) => a.status === 'failed')) {
        problem(`${step.name}: ${f.name} failed outside any test: ${(f.message ?? '').split('\n')[0]}`);
      }
    }
    if (!runEnd) problem(`${step.name}: no run-end report (unhandled errors unknown)`);
    else {
      for (const e of runEnd.unhandledErrors) problem(`${step.name}: unhandled error: ${e.message.split('\n')[0]}`);
      if (runEnd.reason === 'interrupted') problem(`${step.name}: the run was interrupted`);
    }
    // Whatever the reasons above missed (a suite-level failure, a teardown error after the
    // reports were written, a crash on exit) still leaves its mark here: never let it read as 0.
    if (s.failed === before && (!json.success || (runEnd && runEnd.reason !== 'passed') || step.exitCode !== 0)) {
      problem(`${step.name}: failed with no failed test (success=${json.success}, reason=${runEnd?.reason ?? '?'}, exit ${step.exitCode})`);
    }
  }
  return s;
}

export function summaryLine(s: Summary): string {
  return `${s.passed} passed, ${s.failed} failed${s.skipped ? `, ${s.skipped} skipped` : ''}`;
}

/** CLI: `tsx scripts/test-summary.ts name=exit[:json[:runEnd]] ...`; prints problems, then the line. */
function main(argv: string[]): number {
  const readJson = (f: string | undefined) => {
    if (!f || !fs.existsSync(f)) return null;
    try {
      return JSON.parse(fs.readFileSync(f, 'utf8'));
    } catch {
      return null; // a half-written report is no report
    }
  };
  const steps: StepResult[] = argv.map((arg) => {
    const [head, json, runEnd] = arg.split(':');
    const [name, code] = head.split('=');
    const exitCode = Number(code);
    return json === undefined ? { name, exitCode } : { name, exitCode, vitest: { json: readJson(json), runEnd: readJson(runEnd) } };
  });
  const s = summarize(steps);
  for (const p of s.problems) process.stdout.write(`FAILED: ${p}\n`);
  process.stdout.write(`${summaryLine(s)}\n`);
  return s.failed === 0 ? 0 : 1;
}

if (require.main === module) process.exitCode = main(process.argv.slice(2));
