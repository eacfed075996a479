#!/usr/bin/env bash
# Installs what is missing: node_modules (npm ci when absent or older than the lockfile), and,
# where it can, Debian's Chromium for the Web UI browser test (test/e2e/webui.test.ts) and
# Debian's promtool for the alert-rule tests (test/unit/ops-promtool.test.ts).
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

# Chromium: installed once, only as root with apt-get, bounded by a timeout; a failed install
# never fails the run (the Web UI test then skips, saying no Chromium was found) and is not
# tried again for a day (.dev/chromium-install-failed). SHARDCTL_CHROMIUM names a binary of
# your own; SHARDCTL_SKIP_CHROMIUM_INSTALL=1 skips the attempt.
ensure_chromium() {
  local c
  for c in "${SHARDCTL_CHROMIUM:-}" chromium chromium-browser; do
    [ -n "$c" ] && command -v "$c" > /dev/null 2>&1 && return 0
  done
  [ "${SHARDCTL_SKIP_CHROMIUM_INSTALL:-0}" = 1 ] && return 0
  local how="apt-get install --no-install-recommends -y chromium"
  if [ "$(id -u)" != 0 ]; then
    echo "deps: no Chromium for the Web UI test; installing it needs root: sudo $how (or set SHARDCTL_CHROMIUM=/path/to/chromium); the test skips until then" >&2
    return 0
  fi
  if ! command -v apt-get > /dev/null 2>&1; then
    echo "deps: no Chromium for the Web UI test and no apt-get here: install a Chromium and set SHARDCTL_CHROMIUM=/path/to/chromium; the test skips until then" >&2
    return 0
  fi
  local failed=.dev/chromium-install-failed
  if [ -f "$failed" ] && [ -n "$(find "$failed" -mmin -1440 2> /dev/null)" ]; then
    echo "deps: no Chromium; the install failed less than a day ago ($failed: $(tail -n 1 "$failed")); remove it to try again. The Web UI test skips" >&2
    return 0
  fi
  mkdir -p .dev
  local log=.dev/chromium-install.log
  echo "deps: installing Chromium for the Web UI test ($how, up to ${SHARDCTL_CHROMIUM_INSTALL_TIMEOUT:-600}s; log $log)" >&2
  # Another apt run (a second checkout's npm test) holds the dpkg lock: wait for it, within the bound.
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 -q)
  local rc=0
  timeout "${SHARDCTL_CHROMIUM_INSTALL_TIMEOUT:-600}" bash -c '"$@" install --no-install-recommends -y chromium || { "$@" update && "$@" install --no-install-recommends -y chromium; }' _ "${apt[@]}" > "$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ] && command -v chromium > /dev/null 2>&1; then
    echo "deps: Chromium installed: $(chromium --version 2> /dev/null || command -v chromium)" >&2
    rm -f "$failed"
  else
    local why
    why="$(grep -E '^(E:|Err:)' "$log" | tail -n 1 || true)"
    [ "$rc" = 124 ] && why="timed out after ${SHARDCTL_CHROMIUM_INSTALL_TIMEOUT:-600}s${why:+ ($why)}"
    why="${why:-apt-get exited $rc, see $log}"
    echo "$(date -u +%FT%TZ) $why" > "$failed"
    echo "deps: Chromium install failed: $why; the Web UI test skips (not a failure of this run)" >&2
  fi
  return 0
}
ensure_chromium || true

# promtool: only the binary, extracted from Debian's prometheus package into .dev/tools/promtool
# (`apt-get download` + `dpkg-deb -x`: nothing installed system-wide, no daemon started, no port
# bound; root not needed unless the package lists must be refreshed). Bounded by a timeout; a
# failure never fails the run (the promtool tests then skip, saying why) and is not retried for a
# day (.dev/promtool-install-failed). SHARDCTL_PROMTOOL names a binary of your own; a `promtool`
# on PATH is used as is; SHARDCTL_SKIP_PROMTOOL_INSTALL=1 skips the attempt.
ensure_promtool() {
  local dest=.dev/tools/promtool/promtool
  [ -n "${SHARDCTL_PROMTOOL:-}" ] && return 0
  [ -x "$dest" ] && return 0
  command -v promtool > /dev/null 2>&1 && return 0
  [ "${SHARDCTL_SKIP_PROMTOOL_INSTALL:-0}" = 1 ] && return 0
  if ! command -v apt-get > /dev/null 2>&1 || ! command -v dpkg-deb > /dev/null 2>&1; then
    echo "deps: no promtool for the alert-rule tests and no apt-get/dpkg-deb here: set SHARDCTL_PROMTOOL=/path/to/promtool (Prometheus' release tarball has one); those tests skip until then" >&2
    return 0
  fi
  local failed=.dev/promtool-install-failed
  if [ -f "$failed" ] && [ -n "$(find "$failed" -mmin -1440 2> /dev/null)" ]; then
    echo "deps: no promtool; extracting it failed less than a day ago ($failed: $(tail -n 1 "$failed")); remove it to try again. The alert-rule tests skip" >&2
    return 0
  fi
  mkdir -p .dev/tools/promtool
  local log=.dev/promtool-install.log work
  work="$(mktemp -d .dev/tools/promtool/extract.XXXXXX)"
  echo "deps: extracting promtool from Debian's prometheus package into $dest (apt-get download + dpkg-deb -x, up to ${SHARDCTL_PROMTOOL_INSTALL_TIMEOUT:-300}s; log $log)" >&2
  local rc=0
  # An `apt-get update` (root only) when the lists are too old to name a downloadable version.
  timeout "${SHARDCTL_PROMTOOL_INSTALL_TIMEOUT:-300}" bash -c '
    cd "$1" || exit 1
    apt=(env DEBIAN_FRONTEND=noninteractive apt-get -q)
    "${apt[@]}" download prometheus || { [ "$(id -u)" = 0 ] && "${apt[@]}" -o DPkg::Lock::Timeout=120 update && "${apt[@]}" download prometheus; } || exit 1
    dpkg-deb -x prometheus_*.deb x && test -x x/usr/bin/promtool' _ "$work" > "$log" 2>&1 || rc=$?
  if [ "$rc" = 0 ] && mv "$work/x/usr/bin/promtool" "$dest" && "$dest" --version > /dev/null 2>&1; then
    echo "deps: promtool extracted: $("$dest" --version 2>&1 | head -n 1)" >&2
    rm -f "$failed"
  else
    rm -f "$dest"
    local why
    why="$(grep -E '^(E:|Err:)' "$log" | tail -n 1 || true)"
    [ "$rc" = 124 ] && why="timed out after ${SHARDCTL_PROMTOOL_INSTALL_TIMEOUT:-300}s${why:+ ($why)}"
    why="${why:-apt-get download or dpkg-deb exited $rc, see $log}"
    echo "$(date -u +%FT%TZ) $why" > "$failed"
    echo "deps: promtool extraction failed: $why; the alert-rule tests skip (not a failure of this run)" >&2
  fi
  rm -rf "$work"
  return 0
}
ensure_promtool || true
