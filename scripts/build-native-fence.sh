#!/usr/bin/env bash
# Builds the native fence (native/shardctl_fence.c, an optional twin of the plpgsql fence: see
# docs/production.md, "The native fence") against the PostgreSQL server it will be loaded into.
#   scripts/build-native-fence.sh [pg_config] [out-dir]
# Prints the built library's path on its last line. Server headers come from the server's own
# include directory when installed (postgresql-server-dev-N); otherwise Debian's package of the
# server's exact version is downloaded (apt-get download, no root needed) and unpacked into
# .dev/tools/pg-server-dev. Exits non-zero, saying why, when it cannot build.
set -euo pipefail
cd "$(dirname "$0")/.."
pgc="${1:-${SHARDCTL_PG_CONFIG:-}}"
if [ -z "$pgc" ]; then
  for c in "${PG_BIN:-}/pg_config" /usr/lib/postgresql/15/bin/pg_config "$(command -v pg_config || true)"; do
    [ -x "$c" ] && pgc="$c" && break
  done
fi
[ -x "$pgc" ] || { echo "native fence: no pg_config found (set SHARDCTL_PG_CONFIG)" >&2; exit 1; }
version="$("$pgc" --version | awk '{print $2}')"
major="${version%%.*}"
out="${2:-.dev/native}"
src=native/shardctl_fence.c
lib="$out/shardctl_fence.so"
if [ -f "$lib" ] && [ "$lib" -nt "$src" ] && [ -f "$out/built-for" ] && [ "$(cat "$out/built-for")" = "$version" ]; then
  echo "$(cd "$out" && pwd)/shardctl_fence.so"
  exit 0
fi
inc="$("$pgc" --includedir-server)"
if [ ! -f "$inc/postgres.h" ]; then
  local_dev=".dev/tools/pg-server-dev/$major"
  inc="$local_dev/usr/include/postgresql/$major/server"
  if [ ! -f "$inc/postgres.h" ]; then
    command -v apt-get > /dev/null 2>&1 || { echo "native fence: no server headers at $("$pgc" --includedir-server) and no apt-get to fetch postgresql-server-dev-$major" >&2; exit 1; }
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    pkgver="$(dpkg-query -W -f='${Version}' "postgresql-$major" 2> /dev/null || true)"
    echo "native fence: fetching postgresql-server-dev-$major ${pkgver:-(candidate)} (apt-get download)" >&2
    if ! (cd "$tmp" && { { [ -n "$pkgver" ] && timeout 120 apt-get download -q "postgresql-server-dev-$major=$pkgver"; } || timeout 120 apt-get download -q "postgresql-server-dev-$major"; }) > "$tmp/log" 2>&1; then
      echo "native fence: apt-get download postgresql-server-dev-$major failed: $(tail -n 2 "$tmp/log")" >&2
      exit 1
    fi
    mkdir -p "$local_dev"
    dpkg-deb -x "$tmp"/postgresql-server-dev-*.deb "$local_dev"
  fi
fi
mkdir -p "$out"
cc="${CC:-cc}"
"$cc" -O2 -Wall -Wno-declaration-after-statement -fPIC -shared -I "$inc" -o "$lib.tmp" "$src"
mv "$lib.tmp" "$lib"
echo "$version" > "$out/built-for"
echo "$(cd "$out" && pwd)/shardctl_fence.so"
