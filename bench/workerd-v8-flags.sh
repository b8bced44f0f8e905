#!/usr/bin/env bash
# workerd with V8 flags, for profiling (bench/README.md, "Naming the code V8 generates"):
#   MINIFLARE_WORKERD_PATH=bench/workerd-v8-flags.sh WORKERD_V8_FLAGS=--perf-basic-prof node bench/perf.mjs …
# miniflare runs `workerd serve … -` with its binary config on stdin; this adds WORKERD_V8_FLAGS
# to that config (bench/workerd-v8-flags.mjs) and execs the real workerd on it, same pid and
# descriptors (the control fd 3 included).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORKERD="${WORKERD_BIN:-$HERE/../node_modules/@cloudflare/workerd-linux-64/bin/workerd}"
config="$(mktemp -t workerd-config.XXXXXX)"
node "$HERE/workerd-v8-flags.mjs" > "$config"
# Held open on fd 9 and deleted now: workerd reads it as /dev/fd/9, and nothing is left behind.
exec 9<"$config"
rm -f "$config"
args=()
for a in "$@"; do
  if [[ "$a" == "-" ]]; then args+=(/dev/fd/9); else args+=("$a"); fi
done
exec "$WORKERD" "${args[@]}"
