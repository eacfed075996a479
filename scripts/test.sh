#!/usr/bin/env bash
# `npm test`: set-up (deps), typecheck, the unit tier (no stack), then the dev stack, the
# integration and e2e tiers (parallel forks), then the crash suite on its own (it kills
# workers and restarts servers). Writes test-results/*.json and ends with one plain line,
# "N passed, N failed[, N skipped]", judged by scripts/test-summary.ts: a run that died
# without its report, success:false, unhandled errors or a non-zero exit all count as failed.
# `npm test -- <vitest args>` runs just those (the stack comes up only if they need it).
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh || { echo "0 passed, 1 failed"; exit 1; }
mkdir -p test-results
sc() { node cli/shardctl.js "$@"; }
# Reports of an earlier run must never stand in for this one's.
rm -f test-results/vitest-*.json test-results/crash-report.md test-results/crash-restarts-report.md test-results/crash-pause-report.md test-results/network-report.md

export SHARDCTL_WORKER_LOG=${SHARDCTL_WORKER_LOG:-ERROR}   # in-process test workers: expected activity retries are not news
steps=()
# run_vitest NAME ARGS...: one vitest run with its JSON and run-end reports; records NAME=exit:json:runEnd.
run_vitest() {
  local name="$1"; shift
  local json="test-results/vitest-$name.json" runend="test-results/vitest-$name-run-end.json"
  SHARDCTL_RUN_END_FILE="$runend" npx vitest run --reporter=default --reporter=json --outputFile.json="$json" \
    --reporter=./scripts/run-end-reporter.ts "$@"
  steps+=("$name=$?:$json:$runend")
}

echo "typecheck: tsc --noEmit" >&2
npx tsc --noEmit -p .
steps+=("typecheck=$?")
echo "lint: eslint, prettier --check" >&2
npx eslint .
steps+=("lint=$?")
npx prettier --check . > /dev/null || { echo "format: these files are not formatted (npm run format):" >&2; npx prettier --list-different . >&2; false; }
steps+=("format=$?")

if [ $# -gt 0 ]; then
  run_vitest selected "$@"
else
  run_vitest unit --project unit
  # Bring the stack up once; stop it at the end only if this run started it.
  started=0
  keep_stack="${SHARDCTL_KEEP_STACK:-0}"   # read before the export below
  if ! sc dev status > /dev/null 2>&1; then started=1; fi
  cleanup() { if [ "$started" = 1 ] && [ "$keep_stack" != 1 ]; then sc dev down > /dev/null 2>&1 || true; fi; }
  trap cleanup EXIT
  if sc dev up; then
    export SHARDCTL_KEEP_STACK=1   # the stack is this script's to stop
    # Stack files in $forks processes at once (default 3: the files wait on servers and timers as
    # much as they compute). Three took the tier from ~15 to ~13 min on a fresh clone (2026-12-05);
    # with the dev stack's 400 connections a shard peaked at 160 (sampled every 15 s, load 14-18).
    forks="${SHARDCTL_TEST_FORKS:-3}"
    run_vitest main --project stack --poolOptions.forks.maxForks "$forks" --exclude 'test/crash/**'
    # The crash suite, in three runs. First every file but network and restarts (faults, pause,
    # rebalance-kill: their faults stay inside their own workers and tenants), two at a time, the matrix's cases three at a time
    # (--maxConcurrency; faults.test.ts is describe.concurrent). Then the network file on its own
    # (its cases three at a time, its whole-move case alone: 200 ms links make it load-sensitive).
    # Then restarts.test.ts alone, last: it restarts the shared servers under everyone.
    run_vitest crash --project stack --poolOptions.forks.maxForks 2 --maxConcurrency 3 --exclude test/crash/network.test.ts --exclude test/crash/restarts.test.ts test/crash
    run_vitest crash-network --project stack --no-file-parallelism --maxConcurrency 3 test/crash/network.test.ts
    run_vitest crash-restarts --project stack --no-file-parallelism test/crash/restarts.test.ts
    [ -f test-results/crash-report.md ] && { echo "== crash suite report (test-results/crash-report.md)"; cat test-results/crash-report.md; }
    [ -f test-results/crash-restarts-report.md ] && cat test-results/crash-restarts-report.md
    [ -f test-results/crash-pause-report.md ] && cat test-results/crash-pause-report.md
    [ -f test-results/network-report.md ] && { echo "== network-fault report (test-results/network-report.md)"; cat test-results/network-report.md; }
  else
    echo "dev stack failed to start" >&2
    steps+=("dev-stack=1")
  fi
fi

npx tsx scripts/test-summary.ts "${steps[@]}"
