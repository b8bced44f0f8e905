#!/usr/bin/env bash
# workerd with V8 flags, for profiling (`node bench/perf.mjs --jit-names`, which sets both
# variables; bench/README.md, perf.mjs):
#   MINIFLARE_WORKERD_PATH=bench/workerd-v8-flags.sh WORKERD_V8_FLAGS='--perf-basic-prof …' node bench/….mjs
# miniflare runs `workerd serve … -` with its binary config on stdin; this adds WORKERD_V8_FLAGS
# to that config (bench/workerd-v8-flags.mjs) and execs the real workerd on it, same pid and
# descriptors (the control fd 3 included).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The binary miniflare itself runs: the `workerd` package's (whichever platform's it installed).
WORKERD="${WORKERD_BIN:-$(cd "$HERE/.." && node -p "require('workerd').default")}"
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
