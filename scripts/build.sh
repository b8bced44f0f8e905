#!/usr/bin/env bash
# Builds the Worker (Rust → wasm → build/worker/shim.mjs) with worker-build, using only
# local tools: worker-build would otherwise download wasm-bindgen and wasm-opt from GitHub
# (unreachable here) and esbuild from npm. Skips the build when the last successful build is
# newer than src/, Cargo.toml and Cargo.lock; FORCE_BUILD=1 rebuilds anyway.
# Usage: scripts/build.sh [--dev] [extra worker-build args]
#
# Two builds, in two directories, so a dev build can never be deployed by accident:
# - the production build (no flag) into build/, what `wrangler deploy` bundles (wrangler.toml's
#   `main`): no development endpoints, no fault injection, no counting allocator;
# - the dev build (`--dev`) into build-dev/, with the `dev`, `test-faults` and `heap-stats`
#   features: what scripts/run.sh, the e2e tests and the benchmarks serve
#   (`wrangler dev build-dev/worker/shim.mjs`).
# BUILD_CRATE=examples/embed builds the embedding example instead (into examples/embed/build/).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
START="$(now)"

# The example chat's page (examples/chat/dist/: React + the transport, bundled by esbuild). Fast,
# and skipped when up to date; first, because the wasm build below may exit early.
node examples/chat/build.mjs || die "building the example chat's page failed"

CRATE="${BUILD_CRATE:-.}"
[[ -f "$CRATE/Cargo.toml" ]] || die "BUILD_CRATE=$CRATE has no Cargo.toml"
OUT_DIR="build"
FEATURES=()
if [[ "${1:-}" == --dev ]]; then
  shift
  [[ "$CRATE" == . ]] || die "--dev builds this crate's dev build; BUILD_CRATE=$CRATE has none"
  OUT_DIR="build-dev"
  FEATURES=(--features dev,test-faults,heap-stats)
fi
OUT_WASM="$CRATE/$OUT_DIR/index_bg.wasm"
OUT_SHIM="$CRATE/$OUT_DIR/worker/shim.mjs"
STAMP="$CRATE/$OUT_DIR/.build-ok"   # written only after a complete, successful build
if [[ "${FORCE_BUILD:-0}" != 1 && -f "$STAMP" && -f "$OUT_WASM" && -f "$OUT_SHIM" ]] \
   && [[ -z "$(find src Cargo.toml Cargo.lock "$CRATE/src" "$CRATE/Cargo.toml" -newer "$STAMP" -print -quit 2>/dev/null)" ]]; then
  step "build: $OUT_SHIM is up to date (FORCE_BUILD=1 to rebuild)"
  exit 0
fi
rm -f "$STAMP"

# --- Pin every binary worker-build would otherwise fetch. A *_BIN that does not resolve
# makes worker-build silently fall back to a download, so each one is checked here.
WB_VERSION="$(wasm_bindgen_version)"
WASM_BINDGEN_BIN="$(command -v wasm-bindgen || true)"
[[ -n "$WASM_BINDGEN_BIN" ]] || die "wasm-bindgen not found: run scripts/setup.sh"
[[ "$("$WASM_BINDGEN_BIN" --version)" == "wasm-bindgen $WB_VERSION" ]] \
  || die "$WASM_BINDGEN_BIN is $("$WASM_BINDGEN_BIN" --version), Cargo.toml pins $WB_VERSION: run scripts/setup.sh"

ESBUILD_BIN="$ROOT/node_modules/.bin/esbuild"
[[ -x "$ESBUILD_BIN" ]] || die "$ESBUILD_BIN missing: run scripts/setup.sh (npm ci)"
[[ "$("$ESBUILD_BIN" --version)" == "$ESBUILD_VERSION" ]] || die "esbuild is not $ESBUILD_VERSION: run scripts/setup.sh"

command -v worker-build >/dev/null 2>&1 || die "worker-build not found: run scripts/setup.sh"
[[ "$(worker-build --version)" == "$WORKER_BUILD_VERSION" ]] || die "worker-build is not $WORKER_BUILD_VERSION: run scripts/setup.sh"

# wasm-opt: worker-build 0.8.7 wants binaryen 132. Debian bookworm's binaryen is 108, which
# cannot parse what wasm-bindgen 0.2.129 emits ("invalid heap type"), so the default is the
# npm binaryen@132.0.0 build (node + wasm, slower but identical output). A system wasm-opt is
# used only if it is >= 120. NO_WASM_OPT=1 skips optimisation (bigger wasm, faster build).
opt_args=()
if [[ -z "${WASM_OPT_BIN:-}" ]]; then
  if [[ -x "$ROOT/node_modules/.bin/wasm-opt" ]]; then
    WASM_OPT_BIN="$ROOT/node_modules/.bin/wasm-opt"
  elif command -v wasm-opt >/dev/null 2>&1 \
       && (( $(wasm-opt --version | sed -nE 's/^wasm-opt version ([0-9]+).*/\1/p') >= 120 )); then
    WASM_OPT_BIN="$(command -v wasm-opt)"
  fi
fi
if [[ "${NO_WASM_OPT:-0}" == 1 ]]; then
  opt_args=(--no-opt); WASM_OPT_BIN=/nonexistent-wasm-opt
  step "build: wasm-opt disabled (NO_WASM_OPT=1)"
elif [[ -z "${WASM_OPT_BIN:-}" ]]; then
  opt_args=(--no-opt); WASM_OPT_BIN=/nonexistent-wasm-opt
  warn "no usable wasm-opt (>= 120; run scripts/setup.sh for npm binaryen): building with --no-opt"
elif ! "$WASM_OPT_BIN" --version >/dev/null 2>&1; then
  die "WASM_OPT_BIN=$WASM_OPT_BIN does not run"
fi
export WASM_BINDGEN_BIN ESBUILD_BIN WASM_OPT_BIN

if [[ ${#opt_args[@]} -eq 0 ]]; then opt_desc="wasm-opt $("$WASM_OPT_BIN" --version | awk '{print $3}')"; else opt_desc="no wasm-opt"; fi
step "build: worker-build --release --out-dir $OUT_DIR ${opt_args[*]:+${opt_args[*]} }${FEATURES[*]:+${FEATURES[*]} }(wasm-bindgen $WB_VERSION, esbuild $ESBUILD_VERSION, $opt_desc)"
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
set +e
(cd "$CRATE" && worker-build --release --out-dir "$OUT_DIR" "${opt_args[@]}" "$@" "${FEATURES[@]}") 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
# Belt and braces: a download attempt means one of the pins above did not take.
if grep -qE 'Downloading [A-Za-z ]+@[0-9]|falling back to internal' "$LOG"; then
  die "worker-build tried to download a tool (see above); nothing may be fetched from GitHub here"
fi
(( rc == 0 )) || die "worker-build failed (exit $rc)"
[[ -f "$OUT_SHIM" && -f "$OUT_WASM" ]] || die "worker-build finished but $OUT_SHIM / $OUT_WASM is missing"
touch "$STAMP"
step "build: done in $(elapsed "$START"): $OUT_SHIM, $OUT_WASM ($(du -h "$OUT_WASM" | cut -f1))"
