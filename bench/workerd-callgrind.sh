#!/usr/bin/env bash
# workerd under valgrind's callgrind, for counting instructions (`node bench/instructions.mjs`,
# which sets MINIFLARE_WORKERD_PATH to this file and CALLGRIND_DIR). Instrumentation starts off:
# until instructions.mjs switches it on for the measured window (`callgrind_control -i on`),
# the runtime runs uninstrumented, several times faster than counted. --smc-check: V8 writes
# the code it runs (the JIT), and valgrind must see each rewrite. CALLGRIND_OPTIONS adds options
# of callgrind's (instructions.mjs --cache-sim: `--cache-sim=yes`).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORKERD="${WORKERD_BIN:-$(cd "$HERE/.." && node -p "require('workerd').default")}"
: "${CALLGRIND_DIR:?set by bench/instructions.mjs}"
exec valgrind --tool=callgrind --instr-atstart=no --smc-check=all-non-file \
  --callgrind-out-file="$CALLGRIND_DIR/callgrind.out.%p" --log-file="$CALLGRIND_DIR/valgrind.%p.log" \
  ${CALLGRIND_OPTIONS:-} "$WORKERD" "$@"
