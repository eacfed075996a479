#!/usr/bin/env bash
# `npm run demo`: set-up, the stack, a worker, demo tenants, then a real tenant move under live
# traffic with visible progress, ending with `loadgen verify`. Safe to run again: it moves the
# demo tenant on to the next shard each time. It leaves nothing running: the worker and the
# load generator each run in a process group of their own, and every way out of this script
# (done, failed, Ctrl-C, SIGTERM, hang-up) stops those groups, not just a shell around them.
# SHARDCTL_DEMO_DURATION (load, default 60s) and SHARDCTL_DEMO_SOAK (default 10s) shorten it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
sc() { node cli/shardctl.js "$@"; }

STARTED=()   # process-group ids of what this script started in the background
# start_bg LOG CMD...: job control on for this one job, so CMD leads a new process group.
start_bg() {
  local log=$1
  shift
  set -m
  "$@" > "$log" 2>&1 &
  set +m
  STARTED+=("$!")
}
# stop_bg: SIGTERM each group, wait up to 15 s for every member to go, then SIGKILL what is
# left. A polling loop in this shell, not a background watchdog: nothing of its own to outlive it.
stop_bg() {
  [ ${#STARTED[@]} -gt 0 ] || return 0
  local g i alive
  for g in "${STARTED[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
  for i in $(seq 150); do
    alive=0
    for g in "${STARTED[@]}"; do kill -0 -- "-$g" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  # A leader gone may leave members of its group behind.
  for g in "${STARTED[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
  for g in "${STARTED[@]}"; do wait "$g" 2>/dev/null || true; done
  STARTED=()
}
cleanup() {
  set +e
  stop_bg
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

sc dev up
sc shards prepare --demo-schema
sc directory migrate
mkdir -p .dev/logs .dev/demo
start_bg .dev/logs/worker-demo.log node cli/shardctl.js worker
echo "== worker pid $! (log .dev/logs/worker-demo.log)"

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
start_bg .dev/logs/loadgen-demo.log node cli/shardctl.js loadgen --tenants $T,$B --rate 40 --duration "${SHARDCTL_DEMO_DURATION:-60s}" --log "$LOG"
LOADGEN=$!
echo "== loadgen pid $LOADGEN (log .dev/logs/loadgen-demo.log)"
sleep 2
sc move start --tenant $T --to $TO --soak "${SHARDCTL_DEMO_SOAK:-10s}" --yes --actor demo
sc move wait $T --phase done --timeout 5m || { sc move status $T; exit 1; }
sc move status $T
echo "== waiting for loadgen to finish"
wait "$LOADGEN" || true
tail -8 .dev/logs/loadgen-demo.log
echo "== verifying every acknowledged write"
sc loadgen verify --log "$LOG"
sc tenant show $T
echo "== demo done: Temporal Web UI at $(sc dev env --json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).temporal.uiUrl))')"
