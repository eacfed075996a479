#!/usr/bin/env bash
# `npm run test:chaos -- --seed S --iterations N [--net-iterations M] [--skip-mutations]`
# (nightly): random worker kills (test/chaos/chaos.test.ts, N iterations) and random network
# faults through toxiproxy (test/chaos/network-chaos.test.ts, M iterations, default N; 0 skips
# either), both replayable by seed; then the mutation run that proves docs/testing.md
# (scripts/mutate.ts: each listed one-line mutation must make its named test fail).
set -uo pipefail
cd "$(dirname "$0")/.."
seed="" iterations=5 net_iterations="" mutations=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2 ;;
    --iterations) iterations="$2"; shift 2 ;;
    --net-iterations) net_iterations="$2"; shift 2 ;;
    --skip-mutations) mutations=0; shift ;;
    *) echo "usage: npm run test:chaos -- [--seed S] [--iterations N] [--net-iterations M (default N)] [--skip-mutations]" >&2; exit 2 ;;
  esac
done
[[ "$iterations" =~ ^[0-9]+$ ]] || { echo "--iterations must be a number" >&2; exit 2; }
net_iterations="${net_iterations:-$iterations}"
[[ "$net_iterations" =~ ^[0-9]+$ ]] || { echo "--net-iterations must be a number" >&2; exit 2; }
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
# Only the variants with iterations: a file without a test fails vitest.
files=()
[ "$iterations" -gt 0 ] && files+=(test/chaos/chaos.test.ts)
[ "$net_iterations" -gt 0 ] && files+=(test/chaos/network-chaos.test.ts)
if [ ${#files[@]} -gt 0 ]; then
  CHAOS_SEED="$seed" CHAOS_ITERATIONS="$iterations" CHAOS_NET_ITERATIONS="$net_iterations" \
    npx vitest run --config vitest.chaos.config.ts "${files[@]}" || rc=1
fi
if [ "$mutations" = 1 ]; then
  npx tsx scripts/mutate.ts || rc=1
fi
exit $rc
