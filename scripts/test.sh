#!/usr/bin/env bash
# The project's test command (README "test", and .ci/run): setup, then the gates, cheapest
# first so a broken change fails in seconds rather than after the long steps: Chromium present,
# rustfmt, clippy (native and wasm32, warnings denied), native Rust tests (with a PostgreSQL of
# their own, scripts/pg.sh, stopped at exit), the Worker's production
# build, its bundle size and proof it holds no dev code, the dev build, then the Node tests (tests/client/, tests/ai/, tests/e2e/, tests/survival/,
# tests/browser/) against the real Worker.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
START="$(now)"
# The Postgres cluster this command starts (below) is stopped however the command ends; INT and
# TERM become exits so the EXIT trap runs for them too.
export PG_DIR="${PG_DIR:-target/pg}"
trap '"$SCRIPTS_DIR/pg.sh" stop || true; echo "test.sh: total time $(elapsed "$START")"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$SCRIPTS_DIR/setup.sh"

# The browser tests never skip: a missing Chromium fails the test command here, at once.
CHROMIUM="${CHROMIUM_BIN:-/usr/bin/chromium}"
[[ -x "$CHROMIUM" ]] || die "no Chromium at $CHROMIUM: the browser tests (tests/browser/) need it and never skip. Install it (apt-get install chromium; scripts/setup.sh does when run as root) or point CHROMIUM_BIN at one."
step "chromium: $CHROMIUM"

step "cargo fmt --check"
cargo fmt --check || die "cargo fmt --check: run cargo fmt"

# Native clippy never sees src/edge (wasm32 only), so the wasm32 target is linted too: the
# production build, the embedding path (no standalone fetch handler, docs/EMBEDDING.md), and the
# dev build's features (its code is compiled in no other build).
T="$(now)"
step "cargo clippy (native, all targets, -D warnings)"
cargo clippy --quiet --all-targets -- -D warnings
step "cargo clippy (wasm32-unknown-unknown, -D warnings)"
cargo clippy --quiet --target wasm32-unknown-unknown -- -D warnings
step "cargo clippy (wasm32-unknown-unknown, --no-default-features, -D warnings)"
cargo clippy --quiet --target wasm32-unknown-unknown --no-default-features -- -D warnings
step "cargo clippy (wasm32-unknown-unknown, the dev build's features, -D warnings)"
cargo clippy --quiet --target wasm32-unknown-unknown --features dev,test-faults,heap-stats -- -D warnings
step "cargo clippy (the embedding example, examples/embed/, wasm32, -D warnings)"
cargo clippy --quiet -p rindle-embed-example --target wasm32-unknown-unknown -- -D warnings
step "clippy: $(elapsed "$T")"

# Broken intra-doc links (a renamed item, a link to a private one) fail here, not in a reader's
# browser. The wasm32 target documents the core and the shell both.
step "cargo doc (wasm32-unknown-unknown, -D warnings)"
T="$(now)"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps --target wasm32-unknown-unknown
step "cargo doc: $(elapsed "$T")"

# A real PostgreSQL for the Postgres backend's tests: a throwaway cluster in target/pg. With
# RINDLE_PG_URL set they run or fail; RINDLE_PG_REQUIRED makes a missing URL a failure too
# (tests/support/pg.rs), so they never skip here.
T="$(now)"
RINDLE_PG_URL="$("$SCRIPTS_DIR/pg.sh" start)" || die "could not start PostgreSQL (scripts/pg.sh start): the Postgres tests need it"
export RINDLE_PG_URL RINDLE_PG_REQUIRED=1
step "postgres: $RINDLE_PG_URL ($(elapsed "$T"))"

# The native tests run beside the wasm builds: a release build spends most of its time in
# single-threaded work (LTO with one codegen unit, wasm-opt), which leaves the other core to the
# native tests (about 40 s less on 2 cores; the two never wait on each other's cargo lock: they
# build different profiles). The native part's output is shown once it is done.
mkdir -p test-artifacts
NATIVE_LOG="test-artifacts/native.log"
step "cargo test (native), beside the wasm builds; its output: $NATIVE_LOG, shown when done"
T="$(now)"
(
  set -e
  # The simulator's short seeded run (2,000 schedules on SQLite, 300 on Postgres, with resets,
  # rehydrations and resumes; the 10,000 / 1,000 proof runs are by hand: docs/TESTING.md) runs
  # here with the rest, in the optimized test profile (no release build of its own).
  cargo test -- --show-output
  # The native fan-out micro-benchmark (bench/fanout.rs), at smoke size: it must keep building
  # and running, here on `cargo test`'s build. Its full run is `cargo run --release --example
  # fanout` (BENCHMARKS.md).
  cargo run --quiet --profile test --example fanout -- --smoke
  # The curve of one database (bench/dbload.rs, docs/LOAD.md) at smoke size: two waves of a few
  # answers on the model of D1, both cadences; the adaptive one must lose no answer. Its full run
  # is `cargo run --release --example dbload` (by hand, about 10 minutes).
  cargo run --quiet --profile test --example dbload -- --smoke
) > "$NATIVE_LOG" 2>&1 &
NATIVE_PID=$!

# The production build (what `wrangler deploy` bundles: its size, and no dev code in it), then
# the dev build the Node tests serve, and the embedding example (examples/embed/, the crate
# without default features: the embedding build), which tests/e2e/embed.test.mjs runs.
BUILDS_OK=1
{ "$SCRIPTS_DIR/build.sh" && "$SCRIPTS_DIR/build.sh" --dev && "$SCRIPTS_DIR/bundle-size.sh" \
  && BUILD_CRATE=examples/embed "$SCRIPTS_DIR/build.sh"; } || BUILDS_OK=0
NATIVE_OK=1
wait "$NATIVE_PID" || NATIVE_OK=0
cat "$NATIVE_LOG"
[[ $NATIVE_OK == 1 ]] || die "the native tests failed (above; $NATIVE_LOG)"
[[ $BUILDS_OK == 1 ]] || die "a wasm build failed (above)"
step "cargo test and the wasm builds: $(elapsed "$T")"

# Node 22's `node --test` takes files and glob patterns, not directories (Node 20 searched a
# directory for test files): one quoted pattern per directory, expanded by node, not by bash.
suites=()
for d in tests/client tests/ai tests/e2e tests/survival tests/browser; do
  [[ -d "$d" ]] && suites+=("$d/**/*.test.mjs")
done
[[ ${#suites[@]} -gt 0 ]] || die "no Node test directories (tests/client, tests/ai, tests/e2e, tests/survival, tests/browser)"
step "node --test ${suites[*]}"
T="$(now)"
rm -rf test-artifacts/e2e && mkdir -p test-artifacts
# One file at a time: each e2e file runs its own wrangler/workerd and the machine has 2 cores.
# NODE_TEST_TIMEOUT (ms, default 300000) bounds any single test so CI can never hang.
# EVICTION_KILLS: 6 kills here (the test's own default, 12, by hand), within the budget.
RINDLE_E2E_BACKEND=d1 EVICTION_KILLS="${EVICTION_KILLS:-6}" node --test --test-concurrency=1 --test-timeout="${NODE_TEST_TIMEOUT:-300000}" "${suites[@]}"
step "node tests: $(elapsed "$T")"

# The durable plane's suites a second time, on the Postgres backend (the cluster above; each
# stack its own database): a lean subset, within about 3 minutes (docs/TESTING.md, "Both backends").
# tests/e2e-pg/ (the Postgres faults) stops and restarts the cluster (PG_DIR above): it runs only
# here, after every other suite, one file at a time.
PG_SUITES=(tests/e2e/durable.test.mjs tests/e2e/errors.test.mjs tests/e2e/ui.test.mjs tests/e2e/eviction.test.mjs
  tests/e2e/lease.test.mjs tests/e2e/survival.test.mjs tests/e2e/feed.test.mjs tests/e2e/dbload.test.mjs tests/e2e/shards.test.mjs
  tests/e2e-pg/chat.test.mjs
  tests/e2e-pg/stuck.test.mjs tests/e2e-pg/faults.test.mjs)
step "node --test on Postgres: ${PG_SUITES[*]}"
T="$(now)"
RINDLE_E2E_BACKEND=postgres EVICTION_KILLS="${PG_EVICTION_KILLS:-3}" \
  node --test --test-concurrency=1 --test-timeout="${NODE_TEST_TIMEOUT:-300000}" "${PG_SUITES[@]}"
step "node tests on Postgres: $(elapsed "$T")"
