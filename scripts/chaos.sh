#!/usr/bin/env bash
# `npm run test:chaos -- --seed S --iterations N`: random fault points and timings, replayable by seed.
set -euo pipefail
cd "$(dirname "$0")/.."
seed="" iterations=5
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2 ;;
    --iterations) iterations="$2"; shift 2 ;;
    *) echo "usage: npm run test:chaos -- [--seed S] [--iterations N]" >&2; exit 2 ;;
  esac
done
[[ "$iterations" =~ ^[0-9]+$ ]] || { echo "--iterations must be a number" >&2; exit 2; }
[ -z "$seed" ] && seed=$(( $(date +%s) % 1000000 ))
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "--seed must be a number" >&2; exit 2; }
bash scripts/ensure-deps.sh
CHAOS_SEED="$seed" CHAOS_ITERATIONS="$iterations" npx vitest run --config vitest.chaos.config.ts
