#!/usr/bin/env bash
# `npm run test:chaos -- --seed S --iterations N [--skip-mutations]` (nightly): random fault
# points and timings, replayable by seed; then the mutation run that proves docs/testing.md
# (scripts/mutate.ts: each listed one-line mutation must make its named test fail).
set -uo pipefail
cd "$(dirname "$0")/.."
seed="" iterations=5 mutations=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2 ;;
    --iterations) iterations="$2"; shift 2 ;;
    --skip-mutations) mutations=0; shift ;;
    *) echo "usage: npm run test:chaos -- [--seed S] [--iterations N] [--skip-mutations]" >&2; exit 2 ;;
  esac
done
[[ "$iterations" =~ ^[0-9]+$ ]] || { echo "--iterations must be a number" >&2; exit 2; }
[ -z "$seed" ] && seed=$(( $(date +%s) % 1000000 ))
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "--seed must be a number" >&2; exit 2; }
bash scripts/ensure-deps.sh || exit 1
sc() { node cli/shardctl.js "$@"; }
# One stack for both runs; stopped at the end only if this run started it.
started=0
keep_stack="${SHARDCTL_KEEP_STACK:-0}"
if ! sc dev status > /dev/null 2>&1; then started=1; fi
cleanup() { if [ "$started" = 1 ] && [ "$keep_stack" != 1 ]; then sc dev down > /dev/null 2>&1 || true; fi; }
trap cleanup EXIT
sc dev up || exit 1
export SHARDCTL_KEEP_STACK=1
rc=0
CHAOS_SEED="$seed" CHAOS_ITERATIONS="$iterations" npx vitest run --config vitest.chaos.config.ts || rc=1
if [ "$mutations" = 1 ]; then
  npx tsx scripts/mutate.ts || rc=1
fi
exit $rc
