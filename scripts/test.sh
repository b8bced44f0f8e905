#!/usr/bin/env bash
# The project's test command (README "test", and .ci/run): setup, native Rust tests, the
# wasm build, then the Node tests (tests/client/, tests/ai/, tests/e2e/, tests/browser/) against the real Worker.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
START="$(now)"
trap 'echo "test.sh: total time $(elapsed "$START")"' EXIT

"$SCRIPTS_DIR/setup.sh"

step "cargo test (native)"
T="$(now)"
cargo test
step "cargo test: $(elapsed "$T")"

# The native fan-out micro-benchmark (bench/fanout.rs), at smoke size: it must keep building
# and running. Its full run is `cargo run --release --example fanout` (BENCHMARKS.md).
step "fan-out micro-benchmark (smoke)"
T="$(now)"
cargo run --quiet --release --example fanout -- --smoke
step "fan-out smoke: $(elapsed "$T")"

T="$(now)"
"$SCRIPTS_DIR/build.sh"

dirs=()
for d in tests/client tests/ai tests/e2e tests/browser; do
  [[ -d "$d" ]] && dirs+=("$d/")
done
if [[ ${#dirs[@]} -eq 0 ]]; then
  warn "no Node test directories: skipping Node tests"
else
  step "node --test ${dirs[*]}"
  T="$(now)"
  rm -rf test-artifacts/e2e && mkdir -p test-artifacts
  # One file at a time: each e2e file runs its own wrangler/workerd and the machine has 2 cores.
  # NODE_TEST_TIMEOUT (ms, default 300000) bounds any single test so CI can never hang.
  node --test --test-concurrency=1 --test-timeout="${NODE_TEST_TIMEOUT:-300000}" "${dirs[@]}"
  step "node tests: $(elapsed "$T")"
fi
