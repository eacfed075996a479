#!/usr/bin/env bash
# `npm test`: set-up (deps, the dev stack), typecheck, the suite (unit, integration, e2e in
# parallel forks), then the crash suite on its own (it kills workers and restarts servers).
# Writes test-results/*.json and ends with one plain line: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh || { echo "0 passed, 1 failed"; exit 1; }
mkdir -p test-results
sc() { node cli/shardctl.js "$@"; }

# Bring the stack up once; stop it at the end only if this run started it.
started=0
keep_stack="${SHARDCTL_KEEP_STACK:-0}"   # read before the export below
if ! sc dev status > /dev/null 2>&1; then started=1; fi
if ! sc dev up; then echo "dev stack failed to start" >&2; echo "0 passed, 1 failed"; exit 1; fi
cleanup() { if [ "$started" = 1 ] && [ "$keep_stack" != 1 ]; then sc dev down > /dev/null 2>&1 || true; fi; }
trap cleanup EXIT

echo "typecheck: tsc --noEmit" >&2
typecheck_failed=0
npx tsc --noEmit -p . || typecheck_failed=1

rm -f test-results/vitest-main.json test-results/vitest-crash.json
export SHARDCTL_KEEP_STACK=1   # the stack is this script's to stop
export SHARDCTL_WORKER_LOG=${SHARDCTL_WORKER_LOG:-ERROR}   # in-process test workers: expected activity retries are not news
npx vitest run --exclude 'test/crash/**' --reporter=default --reporter=json --outputFile.json=test-results/vitest-main.json "$@"
rc_main=$?
rc_crash=0
if [ $# -eq 0 ]; then
  npx vitest run test/crash --no-file-parallelism --reporter=default --reporter=json --outputFile.json=test-results/vitest-crash.json
  rc_crash=$?
  [ -f test-results/crash-report.md ] && { echo "== crash suite report (test-results/crash-report.md)"; cat test-results/crash-report.md; }
  [ -f test-results/crash-restarts-report.md ] && cat test-results/crash-restarts-report.md
fi

node -e '
const fs = require("fs");
let passed = 0, failed = Number(process.argv[1]), total = 0;
for (const f of ["test-results/vitest-main.json", "test-results/vitest-crash.json"]) {
  if (!fs.existsSync(f)) continue;
  const r = JSON.parse(fs.readFileSync(f, "utf8"));
  passed += r.numPassedTests; total += r.numTotalTests;
  // A file that failed to load has no failed test in it but still failed.
  const brokenFiles = (r.testResults || []).filter((s) => s.status === "failed" && !s.assertionResults.some((a) => a.status === "failed")).length;
  failed += r.numFailedTests + brokenFiles;
}
if (total === 0) failed += 1;
console.log(`${passed} passed, ${failed} failed`);
' "$typecheck_failed"
[ $typecheck_failed -eq 0 ] && [ $rc_main -eq 0 ] && [ $rc_crash -eq 0 ]
