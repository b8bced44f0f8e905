#!/usr/bin/env bash
# The deployable bundle: bundles the production build (build/, scripts/build.sh) exactly as
# `wrangler deploy` would (`--dry-run --outdir`, no login, nothing uploaded), prints its
# uncompressed and gzip sizes against Cloudflare's Worker size limit, and proves the dev build's
# code is not in it: none of the strings only the `dev`, `test-faults` and `heap-stats` features
# compile in (checked present in the dev build, build-dev/, when there is one, so the check
# cannot pass by a renamed string). Fails when the bundle is over the limit or holds dev code.
#
# The limit (https://developers.cloudflare.com/workers/platform/limits/#worker-size): since
# 2026-09-04 one 64 MiB limit on the UNCOMPRESSED bundle, on every plan; the former compressed
# limits (3 MB Free / 10 MB Paid, gzip) were removed (cloudflare-docs#33241, workers-sdk#14001).
# The gzip figure is still printed: it is what crosses the network at deploy, and what the
# old limits and older wranglers' warnings refer to. Run scripts/build.sh first.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

LIMIT_BYTES=$((64 * 1024 * 1024)) # uncompressed, every plan (checked 2026-11-30)
FORMER_FREE_GZIP_BYTES=$((3 * 1024 * 1024))

[[ -f build/worker/shim.mjs ]] || die "build/worker/shim.mjs missing: run scripts/build.sh first"
grep -q '^main = "build/worker/shim.mjs"$' wrangler.toml || die "wrangler.toml's main is not the production build (build/worker/shim.mjs)"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
if ! wrangler deploy --dry-run --outdir "$OUT/bundle" >"$OUT/log" 2>&1; then
  cat "$OUT/log" >&2
  die "wrangler deploy --dry-run failed"
fi

# What is uploaded: every module wrangler wrote (not its source maps or README).
raw=0
gz=0
while IFS= read -r -d '' f; do
  raw=$((raw + $(stat -c %s "$f")))
  gz=$((gz + $(gzip -9 -c "$f" | wc -c)))
done < <(find "$OUT/bundle" -type f ! -name '*.map' ! -name 'README.md' -print0)
(( raw > 0 )) || die "wrangler wrote no modules to $OUT/bundle"

kib() { awk -v b="$1" 'BEGIN { printf "%.1f KiB", b / 1024 }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f%%", 100 * a / b }'; }
step "bundle: $(kib "$raw") uncompressed = $(pct "$raw" "$LIMIT_BYTES") of the 64 MiB Worker size limit (every plan)"
step "bundle: $(kib "$gz") gzip ($(pct "$gz" "$FORMER_FREE_GZIP_BYTES") of the former 3 MB Free compressed limit, removed 2026-09-04)"
step "bundle: wrangler says: $(grep -m1 'Total Upload' "$OUT/log" || echo 'no Total Upload line')"
(( raw <= LIMIT_BYTES )) || die "the bundle ($(kib "$raw")) is over Cloudflare's 64 MiB Worker size limit: it cannot be deployed"

# Dev code: a string each feature compiles in, and only it.
DEV_MARKERS=(
  "/dev/session"    # dev: the development endpoints
  "injected fault"  # test-faults: the fault plan's failures
  "faultsInjected"  # test-faults: its /stats counter
  "wasmHeap"        # heap-stats: the counting allocator's /stats figure
)
for marker in "${DEV_MARKERS[@]}"; do
  if grep -rlaF -- "$marker" "$OUT/bundle" >/dev/null; then
    die "the production bundle holds dev code: \"$marker\" is in $(grep -rlaF -- "$marker" "$OUT/bundle" | head -n1)"
  fi
  if [[ -f build-dev/index_bg.wasm ]] && ! grep -qaF -- "$marker" build-dev/index_bg.wasm; then
    die "\"$marker\" is not in the dev build either (build-dev/index_bg.wasm): update DEV_MARKERS, or this check proves nothing"
  fi
done
step "bundle: no dev code (${#DEV_MARKERS[@]} markers absent$([[ -f build-dev/index_bg.wasm ]] && echo ', each present in the dev build'))"
