// A vitest reporter that writes what the JSON reporter leaves out: the run's end state
// (passed | failed | interrupted) and its unhandled errors. The file is named by
// SHARDCTL_RUN_END_FILE; scripts/test-summary.ts judges it beside the JSON report.
import fs from 'node:fs';
import path from 'node:path';

export default class RunEndReporter {
  onTestRunEnd(_modules: unknown, errors: ReadonlyArray<unknown>, reason: string) {
    const file = process.env.SHARDCTL_RUN_END_FILE;
    if (!file) return;
    const unhandledErrors = errors.map((e: any) => ({ message: String(e?.message ?? e?.stack ?? e) }));
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, JSON.stringify({ reason, unhandledErrors }));
  }
}
