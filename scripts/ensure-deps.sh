#!/usr/bin/env bash
# Installs what is missing: node_modules (npm ci when absent or older than the lockfile).
# The Temporal CLI and moto are installed by `shardctl dev up` into .dev/tools on demand;
# toxiproxy (go install, 1.5-3 min on a cold Go module cache) only by what needs it: the
# network-fault tests (test/helpers/proxy.ts) and `shardctl dev up --with-proxies`.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=node_modules/.shardctl-installed
if [ ! -d node_modules ] || [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
  echo "deps: npm ci" >&2
  npm ci --no-audit --no-fund --loglevel=error >&2
  touch "$stamp"
fi
