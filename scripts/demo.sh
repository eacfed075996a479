#!/usr/bin/env bash
# `npm run demo`: set-up, the stack, a worker, demo tenants, then a real tenant move under live
# traffic with visible progress, ending with `loadgen verify`. Safe to run again: it moves the
# demo tenant on to the next shard each time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
sc() { node cli/shardctl.js "$@"; }

sc dev up
sc shards prepare --demo-schema
mkdir -p .dev/logs .dev/demo
sc worker > .dev/logs/worker-demo.log 2>&1 &
WORKER=$!
LOADGEN=
cleanup() { [ -n "$LOADGEN" ] && kill "$LOADGEN" 2>/dev/null || true; kill "$WORKER" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

T=acme
B=globex
for t in $T $B; do
  if ! sc tenant show $t --json > /dev/null 2>&1; then
    sc tenant create $t --shard shard-a --actor demo
    sc seed $t --rows 2000 --blobs 20
  fi
done
FROM=$(sc tenant show $T --json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).shard))')
case "$FROM" in shard-a) TO=shard-b ;; shard-b) TO=shard-c ;; *) TO=shard-a ;; esac
echo "== moving $T from $FROM to $TO while loadgen writes to $T and $B"

LOG=.dev/demo/loadgen-$(date +%s).jsonl
sc loadgen --tenants $T,$B --rate 40 --duration 60s --log "$LOG" > .dev/logs/loadgen-demo.log 2>&1 &
LOADGEN=$!
sleep 2
sc move start --tenant $T --to $TO --soak 10s --actor demo
sc move wait $T --phase done --timeout 5m || { sc move status $T; exit 1; }
sc move status $T
wait "$LOADGEN" || true
LOADGEN=
cat .dev/logs/loadgen-demo.log | tail -8
echo "== verifying every acknowledged write"
sc loadgen verify --log "$LOG"
sc tenant show $T
echo "== demo done: Temporal Web UI at $(sc dev env --json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).temporal.uiUrl))')"
