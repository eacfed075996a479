#!/usr/bin/env bash
# `npm test`: set-up (deps, stack via vitest global setup), typecheck, then the whole suite.
# Prints vitest's report, writes test-results/vitest.json, and ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh || exit 1
mkdir -p test-results
echo "typecheck: tsc --noEmit" >&2
if ! npx tsc --noEmit -p .; then echo "typecheck failed" >&2; echo "0 passed, 1 failed"; exit 1; fi
npx vitest run --reporter=default --reporter=json --outputFile.json=test-results/vitest.json "$@"
rc=$?
node -e '
const fs = require("fs");
let r; try { r = JSON.parse(fs.readFileSync("test-results/vitest.json", "utf8")); } catch { console.log("0 passed, 1 failed"); process.exit(0); }
const failed = r.numFailedTests + (r.numFailedTestSuites || 0) - (r.testResults || []).filter(s => s.status === "failed" && s.assertionResults.some(a => a.status === "failed")).length;
console.log(`${r.numPassedTests} passed, ${Math.max(failed, r.numFailedTests)} failed` + (r.numPendingTests ? `, ${r.numPendingTests} skipped` : ""));
'
if [ $rc -eq 0 ] && ! node -e 'const r=require("./test-results/vitest.json"); process.exit(r.numTotalTests>0?0:1)'; then echo "no test ran" >&2; exit 1; fi
exit $rc
